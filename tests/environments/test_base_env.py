"""HermesAgentBaseEnv / HermesAgentEnvConfig (behaviours 39-45 plus our fixes)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import threading
import time
from dataclasses import dataclass
from typing import Any
from unittest import mock

import pytest
from atroposlib.envs.server_handling.server_baseline import APIServerConfig

import environments.agent_loop as agent_loop
import environments.hermes_base_env as hbe
from environments import events
from environments.agent_loop import AgentResult, ToolError
from environments.hermes_base_env import HermesAgentBaseEnv, HermesAgentEnvConfig
from tests.environments.test_agent_loop import call, reply
from tests.helpers.events import recording  # same directory (pytest prepends it to sys.path)

# ---------------------------------------------------------------- fakes


class FakeManager:
    """Stands in for ServerManager. ``servers=[]`` means Phase 1."""

    def __init__(self, script=None, servers=None, managed=None):
        self.script = script or (lambda messages: reply("done"))
        self.servers = servers if servers is not None else []
        self.managed = managed
        self.tool_parser = None
        self.calls = 0

    async def chat_completion(self, **kwargs):
        self.calls += 1
        await asyncio.sleep(0)
        return self.script(kwargs["messages"])

    @contextlib.asynccontextmanager
    async def managed_server(self, tokenizer=None, preserve_think_blocks=False):
        if self.managed is None:
            raise NotImplementedError("OpenAI endpoints do not support token IDs")
        yield self.managed


class FakeCtx:
    instances: list[FakeCtx] = []

    def __init__(self, task_id):
        self.task_id = task_id
        self.cleanups = 0
        FakeCtx.instances.append(self)

    def cleanup(self):
        self.cleanups += 1


class DemoEnv(HermesAgentBaseEnv):
    name = "demo"

    def __init__(self, *a, reward=1.0, **kw):
        super().__init__(*a, **kw)
        self.reward = reward
        self.reward_calls = 0
        self.seen_tools: list[Any] = []

    async def setup(self):
        pass

    async def get_next_item(self):
        return {"prompt": "p"}

    def format_prompt(self, item):
        return item["prompt"]

    async def compute_reward(self, item, result, ctx):
        self.reward_calls += 1
        if isinstance(self.reward, Exception):
            raise self.reward
        return self.reward(item, result, ctx) if callable(self.reward) else self.reward

    async def evaluate(self, *a, **kw):
        pass


def servers():
    return [APIServerConfig(base_url="http://127.0.0.1:1/v1", api_key="x", model_name="m", health_check=False)]


def make_env(tokenizer_path, reward=1.0, manager=None, **overrides):
    settings = dict(tokenizer_name=tokenizer_path, use_wandb=False, group_size=2, enabled_toolsets=["terminal"])
    cfg = HermesAgentEnvConfig(**{**settings, **overrides})
    env = DemoEnv(cfg, servers(), reward=reward)
    env.server = manager or FakeManager()
    return env


@pytest.fixture(autouse=True)
def fake_ctx():
    FakeCtx.instances.clear()
    with mock.patch.object(hbe, "_make_tool_context", FakeCtx):
        yield FakeCtx.instances


@pytest.fixture
def fake_tools():
    def handler(name, args, task_id=None, user_task=None, **kw):
        return json.dumps({"output": "ok", "exit_code": 0, "error": None})

    with mock.patch.object(agent_loop, "handle_function_call", side_effect=handler) as h:
        yield h


# ---------------------------------------------------------------- config


def test_config_defaults(tokenizer_path):
    cfg = HermesAgentEnvConfig()
    expected = dict(
        enabled_toolsets=None,
        disabled_toolsets=None,
        distribution=None,
        max_agent_turns=30,
        system_prompt=None,
        agent_temperature=1.0,
        terminal_backend="local",
        terminal_timeout=120,
        terminal_lifetime=3600,
        dataset_name=None,
        dataset_split="train",
        prompt_field="prompt",
        tool_pool_size=128,
        tool_call_parser="hermes",
        default_result_size_chars=100_000,
        turn_budget_chars=200_000,
        preview_size_chars=1_500,
        tool_result_overrides=None,
        extra_body=None,
    )
    assert {k: getattr(cfg, k) for k in expected} == expected
    assert cfg.tokenizer_name == tokenizer_path  # local, never a Hub name
    assert cfg.group_size == 4 and cfg.ensure_scores_are_not_same is True


def test_build_budget_config():
    cfg = HermesAgentEnvConfig(
        default_result_size_chars=10, turn_budget_chars=20, preview_size_chars=5, tool_result_overrides={"terminal": 7}
    )
    b = cfg.build_budget_config()
    assert (b.default_result_size, b.turn_budget, b.preview_size, b.tool_overrides) == (10, 20, 5, {"terminal": 7})


def test_bad_config_value_is_named():
    with pytest.raises(Exception, match="max_agent_turns"):
        HermesAgentEnvConfig(max_agent_turns=0)


def test_init_side_effects(tokenizer_path, monkeypatch):
    for var in ("TERMINAL_ENV", "TERMINAL_TIMEOUT", "TERMINAL_LIFETIME_SECONDS"):
        monkeypatch.delenv(var, raising=False)
    configured = {}
    monkeypatch.setattr("environments.sandboxes.configure", lambda **kw: configured.update(kw))
    with mock.patch.object(hbe, "resize_tool_pool") as resize:
        cfg = HermesAgentEnvConfig(
            tokenizer_name=tokenizer_path,
            terminal_backend="local",
            terminal_timeout=11,
            terminal_lifetime=22,
            tool_pool_size=5,
            tool_call_parser="mistral",
            use_wandb=False,
        )
        with pytest.warns(UserWarning, match="should be a list"):
            env = DemoEnv(cfg, servers()[0])  # a single config: fixed into a list
    assert (os.environ["TERMINAL_ENV"], os.environ["TERMINAL_TIMEOUT"], os.environ["TERMINAL_LIFETIME_SECONDS"]) == (
        "local",
        "11",
        "22",
    )
    assert configured == {"backend": "local", "timeout": 11, "lifetime": 22}
    resize.assert_called_once_with(5)
    assert env.server.tool_parser == "mistral"
    assert env._current_group_tools is None and env._tool_error_buffer == []
    assert str(env.server.servers[0].config.base_url) == "http://127.0.0.1:1/v1"
    assert env.max_token_len == cfg.max_token_length * cfg.max_agent_turns


# ---------------------------------------------------------------- tools / phase


def test_resolve_tools_enabled_disabled_and_distribution(tokenizer_path):
    env = make_env(tokenizer_path, enabled_toolsets=["terminal", "file"], disabled_toolsets=["file"])
    schemas, names = env._resolve_tools_for_group()
    assert names == {"terminal"} and [s["function"]["name"] for s in schemas] == ["terminal"]
    env = make_env(tokenizer_path, distribution="terminal_only")
    random.seed(0)
    _, names = env._resolve_tools_for_group()
    assert {"terminal", "read_file"} <= names
    env = make_env(tokenizer_path, distribution="nope")
    with pytest.raises(ValueError, match="nope"):
        env._resolve_tools_for_group()


def test_use_managed_server(tokenizer_path):
    env = make_env(tokenizer_path)
    assert env._use_managed_server() is False  # no servers
    env.server = FakeManager(servers=[object()])
    assert env._use_managed_server() is True  # anything but OpenAIServer
    cfg = HermesAgentEnvConfig(tokenizer_name=tokenizer_path, use_wandb=False)
    assert DemoEnv(cfg, servers())._use_managed_server() is False  # real OpenAIServer


# ---------------------------------------------------------------- collect_trajectory


async def test_api_failure_scores_zero_without_compute_reward(tokenizer_path):
    def boom(messages):
        raise ConnectionError("down")

    env = make_env(tokenizer_path, manager=FakeManager(boom))
    with recording() as seen:
        scored, backlog = await env.collect_trajectory({"prompt": "p"})
    assert scored["scores"] == 0.0 and env.reward_calls == 0 and backlog == []
    assert scored["messages"] == [{"role": "user", "content": "p"}]
    finished = next(e for e in seen if e.kind == "rollout_finished")
    assert "ConnectionError: down" in finished.error
    assert FakeCtx.instances[0].cleanups == 1


async def test_reward_exception_scores_zero_and_cleans_up(tokenizer_path):
    env = make_env(tokenizer_path, reward=RuntimeError("bad reward"))
    scored, _ = await env.collect_trajectory({"prompt": "p"})
    assert scored["scores"] == 0.0 and env.reward_errors == 1
    assert [c.cleanups for c in FakeCtx.instances] == [1]


async def test_success_cleanup_once_messages_tokens_and_distinct_task_ids(tokenizer_path, tokenizer, fake_tools):
    script = iter([reply(None, [call("terminal", {"command": "ls"})]), reply("all done")])
    env = make_env(
        tokenizer_path, reward=0.75, manager=FakeManager(lambda m: next(script, reply("x"))), system_prompt="be brief"
    )
    scored, _ = await env.collect_trajectory({"prompt": "p"})
    assert scored["scores"] == 0.75
    assert [m["role"] for m in scored["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
    assert FakeCtx.instances[0].cleanups == 1
    # Phase 1: real chat-template tokens, prompt masked
    tokens, masks = scored["tokens"], scored["masks"]
    assert len(tokens) == len(masks) and -100 in masks and masks[-1] == tokens[-1]
    assert "all done" in tokenizer.decode(tokens)
    await env.collect_trajectory({"prompt": "p"})
    assert len({c.task_id for c in FakeCtx.instances}) == 2


async def test_placeholder_tokens_without_tokenizer(tokenizer_path):
    env = make_env(tokenizer_path)
    env.tokenizer = None
    with recording() as seen:
        scored, _ = await env.collect_trajectory({"prompt": "p" * 40})
    assert scored["masks"][0] == -100 and scored["masks"][1:] == scored["tokens"][1:]
    assert next(e for e in seen if e.kind == "rollout_finished").placeholder_tokens is True


async def test_loop_exception_becomes_zero_scored_item(tokenizer_path):
    env = make_env(tokenizer_path)
    with mock.patch.object(env, "_run_agent", side_effect=KeyError("kaboom")):
        scored, _ = await env.collect_trajectory({"prompt": "p"})
    assert scored["scores"] == 0.0 and env.rollout_errors == 1 and scored["messages"]
    assert FakeCtx.instances[0].cleanups == 1


async def test_tool_errors_buffered_truncated(tokenizer_path):
    env = make_env(tokenizer_path, manager=FakeManager(lambda m: reply("x")))
    result = AgentResult(
        messages=[{"role": "user", "content": "u"}, {"role": "assistant", "content": "x"}],
        turns_used=1,
        tool_errors=[ToolError(1, "terminal", "a" * 400, "e" * 900, "r" * 900)],
    )
    with mock.patch.object(env, "_run_agent", return_value=(result, 1)):
        await env.collect_trajectory({"prompt": "p"})
    (entry,) = env._tool_error_buffer
    assert len(entry["args"]) <= 150 and len(entry["error"]) <= 300 and len(entry["result"]) <= 300


async def test_cancellation_still_cleans_up(tokenizer_path):
    started = asyncio.Event()

    class Hanging(FakeManager):
        async def chat_completion(self, **kw):
            started.set()
            await asyncio.sleep(3600)

    env = make_env(tokenizer_path, manager=Hanging())
    task = asyncio.create_task(env.collect_trajectory({"prompt": "p"}))
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(100):  # cleanup runs on a thread
        if FakeCtx.instances[0].cleanups:
            break
        await asyncio.sleep(0.01)
    assert FakeCtx.instances[0].cleanups == 1


class SetupEnv(DemoEnv):
    """A prepare_rollout whose progress the tests can see and steer."""

    def __init__(self, *a, setup=None, **kw):
        super().__init__(*a, **kw)
        self.setup_fn = setup
        self.setup_done = False

    async def prepare_rollout(self, item, ctx):
        if self.setup_fn is not None:
            await self.setup_fn()
        self.setup_done = True


def make_setup_env(tokenizer_path, setup, manager, **overrides):
    settings = dict(tokenizer_name=tokenizer_path, use_wandb=False, group_size=2, enabled_toolsets=["terminal"])
    env = SetupEnv(HermesAgentEnvConfig(**{**settings, **overrides}), servers(), setup=setup)
    env.server = manager
    return env


async def test_setup_runs_while_the_first_model_call_is_in_flight_and_tools_wait_for_it(tokenizer_path):
    """The model is asked before the sandbox is ready; its tool call runs only once it is."""
    asked = asyncio.Event()
    order: list[str] = []

    async def setup():
        await asyncio.wait_for(asked.wait(), 10)  # never set if setup had to finish first
        await asyncio.sleep(0.05)
        order.append("setup done")

    script = iter([reply(None, [call("terminal", {"command": "ls"})]), reply("all done")])

    def answer(messages):
        asked.set()
        order.append(f"model call {sum(1 for m in messages if m['role'] == 'assistant') + 1}")
        return next(script)

    def tool(name, args, task_id=None, user_task=None, **kw):
        order.append("tool")
        return json.dumps({"output": "ok", "exit_code": 0, "error": None})

    env = make_setup_env(tokenizer_path, setup, FakeManager(answer))
    with mock.patch.object(agent_loop, "handle_function_call", side_effect=tool):
        scored, _ = await env.collect_trajectory({"prompt": "p"})
    assert order == ["model call 1", "setup done", "tool", "model call 2"]
    assert scored["scores"] == 1.0 and env.reward_calls == 1
    assert FakeCtx.instances[0].cleanups == 1


async def test_the_reward_waits_for_setup_when_the_model_calls_no_tool(tokenizer_path):
    seen: list[bool] = []
    release = asyncio.Event()

    async def setup():
        await release.wait()

    def answer(messages):
        asyncio.get_running_loop().call_later(0.05, release.set)
        return reply("no tools needed")

    env = make_setup_env(tokenizer_path, setup, FakeManager(answer))
    env.reward = lambda item, result, ctx: seen.append(env.setup_done) or 1.0
    scored, _ = await env.collect_trajectory({"prompt": "p"})
    assert seen == [True] and scored["scores"] == 1.0


@pytest.mark.parametrize("answer_kind", ["tool call", "final answer"])
async def test_a_failed_setup_fails_the_rollout_with_its_message(tokenizer_path, answer_kind, fake_tools):
    async def setup():
        raise RuntimeError("setup of task 'x' failed (exit 1) running 'false'")

    first = reply(None, [call("terminal", {"command": "ls"})]) if answer_kind == "tool call" else reply("done")
    env = make_setup_env(tokenizer_path, setup, FakeManager(lambda m: first))
    with recording() as seen:
        scored, _ = await env.collect_trajectory({"prompt": "p"})
    assert scored["scores"] == 0.0 and env.reward_calls == 0 and env.rollout_errors == 1
    assert fake_tools.call_count == 0  # no tool ran in a sandbox that was never set up
    finished = next(e for e in seen if e.kind == "rollout_finished")
    assert "setup of task 'x' failed" in finished.error
    assert FakeCtx.instances[0].cleanups == 1


async def test_without_overlap_setup_finishes_before_the_model_is_asked(tokenizer_path):
    order: list[str] = []

    async def setup():
        await asyncio.sleep(0.05)
        order.append("setup done")

    def answer(messages):
        order.append("model call")
        return reply("done")

    env = make_setup_env(tokenizer_path, setup, FakeManager(answer), overlap_setup=False)
    await env.collect_trajectory({"prompt": "p"})
    assert order == ["setup done", "model call"]


@pytest.mark.parametrize("setup_kind", ["still running", "failed"])
async def test_a_rollout_that_ends_before_its_setup_cancels_the_setup(tokenizer_path, setup_kind):
    """The model call fails: no reward will read the sandbox, so a setup still running is
    cancelled and a failed one is not reported as a lost task exception either."""
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def setup():
        started.set()
        if setup_kind == "failed":
            cancelled.set()
            raise RuntimeError("setup failed")
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    def boom(messages):
        raise ConnectionError("down")

    env = make_setup_env(tokenizer_path, setup, FakeManager(boom))
    lost: list[Any] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: lost.append(context))
    try:
        scored, _ = await env.collect_trajectory({"prompt": "p"})
        await asyncio.wait_for(cancelled.wait(), 5)
        for _ in range(3):
            await asyncio.sleep(0)
        import gc

        gc.collect()  # an unretrieved task exception is reported when the task is collected
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert started.is_set() and scored["scores"] == 0.0
    assert lost == []  # nothing reported as a lost task exception
    assert FakeCtx.instances[0].cleanups == 1


# ---------------------------------------------------------------- groups


async def test_concurrent_groups_see_their_own_tools(tokenizer_path):
    env = make_env(tokenizer_path, group_size=3)
    sets = iter([["terminal"], ["file"]])
    seen: dict[str, list[set]] = {}

    def per_group():
        chosen = next(sets)
        return chosen

    async def fake_run(messages, tools, task_id):
        await asyncio.sleep(random.random() / 100)  # interleave the groups
        seen.setdefault(messages[0]["content"], []).append(tools[1])
        return AgentResult(messages=messages + [{"role": "assistant", "content": "x"}], turns_used=1), 1

    with (
        mock.patch.object(env, "_resolve_group_toolsets", side_effect=per_group),
        mock.patch.object(env, "_run_agent", side_effect=fake_run),
    ):
        (g1, _), (g2, _) = await asyncio.gather(
            env.collect_trajectories({"prompt": "A"}), env.collect_trajectories({"prompt": "B"})
        )
    assert seen["A"] == [{"terminal"}] * 3
    assert seen["B"] == [{"read_file", "write_file", "patch", "search_files"}] * 3
    assert len(g1["tokens"]) == len(g2["tokens"]) == 3


async def test_group_events_and_failing_rollout_does_not_sink_group(tokenizer_path):
    env = make_env(tokenizer_path, group_size=3)
    n = {"i": 0}

    async def flaky(messages, tools, task_id):
        n["i"] += 1
        if n["i"] == 2:
            raise RuntimeError("one bad rollout")
        return AgentResult(messages=messages + [{"role": "assistant", "content": "x"}], turns_used=1), 1

    seen = []
    events.add_observer(seen.append)
    token = events.current_group_id.set("host-group-7")
    try:
        with mock.patch.object(env, "_run_agent", side_effect=flaky):
            group, _ = await env.collect_trajectories({"prompt": "p"})
    finally:
        events.current_group_id.reset(token)
        events.remove_observer(seen.append)
    assert sorted(group["scores"]) == [0.0, 1.0, 1.0]
    started = next(e for e in seen if e.kind == "group_started")
    finished = next(e for e in seen if e.kind == "group_finished")
    assert started.group_id == finished.group_id == "host-group-7"
    assert started.phase == 1 and started.toolsets == ["terminal"] and started.group_size == 3
    assert all(e.group_id == "host-group-7" for e in seen if e.kind == "rollout_started")


async def test_phase2_falls_back_on_not_implemented(tokenizer_path):
    manager = FakeManager(lambda m: reply("direct"), servers=[object()], managed=None)
    env = make_env(tokenizer_path, manager=manager)
    result, phase = await env._run_agent([{"role": "user", "content": "u"}], ([], set()), "t")
    assert phase == 1 and result.messages[-1]["content"] == "direct" and manager.calls == 1


@dataclass
class Node:
    tokens: list[int]
    masked_tokens: list[int]
    logprobs: list[float]
    metadata: dict[str, Any] | None = None


async def test_phase2_uses_last_node_and_forwards_logprobs(tokenizer_path):
    class Managed:
        async def chat_completion(self, **kw):
            return reply("managed answer")

        def get_state(self):
            return {"nodes": [Node([9], [-100], [1.0]), Node([1, 2, 3, 4], [-100, -100, 3, 4], [1.0, 1.0, -0.5, -0.2])]}

    env = make_env(tokenizer_path, manager=FakeManager(servers=[object()], managed=Managed()))
    group, _ = await env.collect_trajectories({"prompt": "p"})
    assert group["tokens"] == [[1, 2, 3, 4]] * 2 and group["masks"] == [[-100, -100, 3, 4]] * 2
    assert group["inference_logprobs"] == [[1.0, 1.0, -0.5, -0.2]] * 2


# ---------------------------------------------------------------- display / wandb / drops


def test_format_trajectory_for_display():
    text = HermesAgentBaseEnv._format_trajectory_for_display(
        [
            {"role": "system", "content": "S"},
            {"role": "user", "content": "U"},
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": "r" * 400,
                "tool_calls": [{"id": "1", "function": {"name": "terminal", "arguments": "a" * 300}}],
            },
            {"role": "tool", "tool_call_id": "1", "content": "t" * 600},
            {"role": "assistant", "content": "final"},
        ]
    )
    assert "[SYSTEM]\nS" in text and "[USER]\nU" in text
    assert "[ASSISTANT thinking]\n" + "r" * 300 + "\n" in text and "r" * 301 not in text
    assert "[TOOL CALL] terminal(" + "a" * 200 + ")" in text
    assert "[TOOL RESULT]\n" + "t" * 500 in text and "t" * 501 not in text
    assert text.endswith("[ASSISTANT]\nfinal") and "\n\n" in text


async def test_add_rollouts_for_wandb(tokenizer_path):
    env = make_env(tokenizer_path, num_rollouts_per_group_for_logging=-1, num_rollouts_to_keep=2)
    group = {"tokens": [[1], [2]], "scores": [1.0, 0.0], "messages": [[{"role": "user", "content": "hi"}], None]}
    for _ in range(3):
        await env.add_rollouts_for_wandb(group)
    assert len(env.rollouts_for_wandb) == 2 and len(env.rollouts_for_wandb[0]) == 2
    assert env.rollouts_for_wandb[0][0] == ("[USER]\nhi", 1.0)
    assert env.rollouts_for_wandb[0][1][1] == 0.0  # decoded from tokens
    env.config.num_rollouts_per_group_for_logging = 1
    await env.add_rollouts_for_wandb(group)
    assert len(env.rollouts_for_wandb[-1]) == 1


async def test_wandb_log_tool_errors(tokenizer_path):
    env = make_env(tokenizer_path)
    metrics: dict[str, Any] = {}
    await env.wandb_log(metrics)
    assert metrics["train/tool_errors_count"] == 0
    env._tool_error_buffer = [{"turn": 2, "tool": "terminal", "args": "x" * 100, "error": "boom", "result": ""}]
    metrics = {}
    await env.wandb_log(metrics)
    assert metrics["train/tool_errors_count"] == 1
    assert metrics["train/tool_error_details"] == f"[turn 2] terminal({'x' * 80}) -> boom"
    assert env._tool_error_buffer == []


async def test_drop_events_match_atroposlib(tokenizer_path):
    env = make_env(tokenizer_path, ensure_scores_are_not_same=True)
    env.max_token_len = 5
    ok = {"tokens": [[1], [2]], "masks": [[1], [2]], "scores": [1.0, 0.0]}
    same = {"tokens": [[1], [2]], "masks": [[1], [2]], "scores": [0.5, 0.5]}
    small = {"tokens": [[1]], "masks": [[1]], "scores": [1.0]}
    long = {"tokens": [[1] * 9, [2]], "masks": [[1] * 9, [2]], "scores": [1.0, 0.0]}
    with recording() as seen:
        with mock.patch.object(env, "jsonl_writer", None):
            await env.handle_send_to_api([ok, same, small, long, None], do_send_to_api=False)
    drops = [e for e in seen if e.kind == "item_dropped"]
    # Stable codes (so drops-by-reason counts group), specifics in the detail.
    assert [d.reason for d in drops] == ["identical_scores", "wrong_group_size", "too_long", "empty_group"]
    assert "scores are 0.5" in drops[0].detail and "1 rollouts, expected 2" in drops[1].detail
    assert "9 tokens" in drops[2].detail
    assert len(env.rollouts_for_wandb) == 1  # super still did its job for the good group


# ---------------------------------------------------------------- tokenisation off the loop


async def test_tokenisation_never_stalls_the_event_loop(tokenizer_path):
    """A rollout's tokenisation (seconds for a huge conversation) runs off the loop, on its own
    tokenizer copy: other rollouts' coroutines keep running meanwhile."""
    env = make_env(tokenizer_path)
    real = env._tokens_for
    seen: dict[str, Any] = {}

    def slow_tokens_for(result, messages, tools, tokenizer=None):
        seen["thread"] = threading.current_thread().name
        seen["own_copy"] = tokenizer is not None and tokenizer is not env.tokenizer
        threading.Event().wait(0.6)  # stands in for tokenising a multi-megabyte conversation
        return real(result, messages, tools, tokenizer)

    env._tokens_for = slow_tokens_for
    ticks = 0

    async def heartbeat():
        nonlocal ticks
        while True:
            await asyncio.sleep(0.02)
            ticks += 1

    beat = asyncio.create_task(heartbeat())
    try:
        scored, _ = await env.collect_trajectory({"prompt": "p"})
    finally:
        beat.cancel()
    assert seen["thread"] != threading.main_thread().name and seen["own_copy"]
    assert ticks >= 10  # the loop kept turning during the 0.6 s (on the loop it would be ~0)
    assert scored["tokens"] and len(scored["tokens"]) == len(scored["masks"])


async def test_rollouts_ending_together_tokenise_in_parallel_each_on_a_copy_of_its_own(tokenizer_path):
    """256 rollouts that end together queued behind one tokenizer copy (BENCHMARKS P2): now
    they tokenise side by side, never two threads on one copy, never on the env's own."""
    env = make_env(tokenizer_path)
    real = env._tokens_for
    lock = threading.Lock()
    busy: dict[int, int] = {}  # id(copy) -> workers using it now
    seen: dict[str, Any] = {"most_at_once": 0, "shared": 0, "env_own": 0, "copies": set()}

    def slow_tokens_for(result, messages, tools, tokenizer=None):
        with lock:
            busy[id(tokenizer)] = busy.get(id(tokenizer), 0) + 1
            seen["shared"] += busy[id(tokenizer)] > 1
            seen["env_own"] += tokenizer is None or tokenizer is env.tokenizer
            seen["copies"].add(id(tokenizer))
            seen["most_at_once"] = max(seen["most_at_once"], sum(busy.values()))
        try:
            threading.Event().wait(0.3)
            return real(result, messages, tools, tokenizer)
        finally:
            with lock:
                busy[id(tokenizer)] -= 1

    env._tokens_for = slow_tokens_for
    started = time.monotonic()
    scored = await asyncio.gather(*(env.collect_trajectory({"prompt": f"p{i}"}) for i in range(6)))
    wall = time.monotonic() - started
    assert all(s["tokens"] and len(s["tokens"]) == len(s["masks"]) for s, _ in scored)
    assert seen["shared"] == 0 and seen["env_own"] == 0
    copies = env._tokenizer_copies().size
    assert seen["most_at_once"] == min(6, copies) >= 2
    assert len(seen["copies"]) == copies  # no more copies than the pool's size were ever made
    assert wall < 6 * 0.3  # one at a time would take 1.8 s at least


async def test_queued_tokenisations_go_on_while_the_loop_is_busy(tokenizer_path):
    """When hundreds of rollouts end together the loop is busiest (rewards, cleanups, replies).
    A copy handed from one tokenisation to the next through the loop waited for it: the two
    copies sat idle 70 % of P2's end (BENCHMARKS.md, session 27). A worker now takes the next
    queued call itself: with the loop held, every queued tokenisation still runs."""
    env = make_env(tokenizer_path)
    real = env._tokens_for
    lock = threading.Lock()
    ran: list[float] = []

    def counted_tokens_for(result, messages, tools, tokenizer=None):
        out = real(result, messages, tools, tokenizer)
        with lock:
            ran.append(time.monotonic())
        return out

    env._tokens_for = counted_tokens_for
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    jobs = 3 * env._tokenizer_copies().size
    calls = [asyncio.ensure_future(env._tokens_off_loop(None, messages, ([], set()))) for _ in range(jobs)]
    for _ in range(5):
        await asyncio.sleep(0)  # every call is queued
    held = time.monotonic()
    while len(ran) < jobs and time.monotonic() - held < 3:
        time.sleep(0.005)  # the loop is busy elsewhere meanwhile
    assert len(ran) == jobs, f"{len(ran)} of {jobs} tokenisations ran while the loop was held"
    outs = await asyncio.gather(*calls)
    assert all(o["tokens"] and len(o["tokens"]) == len(o["masks"]) for o in outs)


async def test_tokenisation_runs_while_the_reward_waits_on_its_sandbox(tokenizer_path):
    """The reward mostly waits (a check command in the sandbox): the rollout's tokens are
    made meanwhile, not after it (BENCHMARKS P2: 256 rollouts ending together)."""
    env = make_env(tokenizer_path)
    real = env._tokens_for

    def slow_tokens_for(result, messages, tools, tokenizer=None):
        threading.Event().wait(0.4)
        return real(result, messages, tools, tokenizer)

    async def slow_reward(item, result, ctx):
        await asyncio.sleep(0.4)
        return 1.0

    env._tokens_for = slow_tokens_for
    env.compute_reward = slow_reward
    started = time.monotonic()
    scored, _ = await env.collect_trajectory({"prompt": "p"})
    assert time.monotonic() - started < 0.75  # one after the other: 0.8 s at least
    assert scored["scores"] == 1.0 and scored["tokens"] and len(scored["tokens"]) == len(scored["masks"])


async def test_a_reward_that_edits_the_messages_gets_tokens_of_the_edited_messages(tokenizer_path):
    """Tokenising before the reward must not change what is trained: a reward that appends a
    note to the conversation (or rewrites a message in place) is tokenised as sent."""
    from environments.atropos_compat import render_conversation

    for edit in ("append", "in place"):
        env = make_env(tokenizer_path)

        async def editing_reward(item, result, ctx, edit=edit):
            await asyncio.sleep(0.05)  # the early tokenisation is under way or done
            if edit == "append":
                result.messages.append({"role": "user", "content": "judge: looks right"})
            else:
                result.messages[-1]["content"] = "rewritten by the reward"
            return 1.0

        env.compute_reward = editing_reward
        scored, _ = await env.collect_trajectory({"prompt": "p"})
        oracle = render_conversation(env.tokenizer, scored["messages"], tools=env._resolve_tools_for_group()[0] or None)
        assert scored["tokens"] == oracle.tokens and scored["masks"] == oracle.masks, edit
