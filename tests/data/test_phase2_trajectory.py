"""Phase 2 end to end: real ManagedServer against the embedded simulator's ``/generate``.

One rollout = one trajectory: its trained tokens are exactly the tokens the server
sampled on every turn (recorded here as they come back from the server), with their
logprobs; prompt and tool tokens are masked with logprob 1.0.
"""

from __future__ import annotations

import pytest

from environments import events
from hermes_console.sim import SimConfig, SimServer
from tests.data.checks import assert_rollout_trains_only_assistant_text, trained_runs


@pytest.fixture(scope="module")
def sim_url():
    sim = SimServer(SimConfig(solve_rate=1.0, seed=3))
    url = sim.start()
    yield url
    sim.stop()


def make_env(sim_url, tokenizer_path, group_size=2):
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig

    from environments.terminal_tasks.env import TerminalTasksEnv

    config, _ = TerminalTasksEnv.config_init()
    config.group_size = group_size
    servers = [
        APIServerConfig(
            base_url=f"{sim_url}/v1",
            model_name="hermes-sim",
            api_key="x",
            server_type="vllm",
            tokenizer_name=tokenizer_path,
            health_check=False,
            timeout=30,
        )
    ]
    return TerminalTasksEnv(config, servers)


def record_sampling(server):
    """Wrap the real server's sampling call to keep what it returned (the oracle)."""
    sampled = []
    real = server.tokens_and_logprobs_completion

    async def spy(**kwargs):
        out = await real(**kwargs)
        sampled.append((list(out[1][0]), list(out[2][0])))
        return out

    server.tokens_and_logprobs_completion = spy
    return sampled


async def test_phase2_one_trajectory_every_turn_trained(sim_url, tokenizer_path, tokenizer):
    env = make_env(sim_url, tokenizer_path, group_size=1)
    assert env._use_managed_server()
    sampled = record_sampling(env.server.servers[0])
    seen = []
    events.add_observer(seen.append)
    try:
        await env.setup()
        group, _ = await env.collect_trajectories(await env.get_next_item())
    finally:
        events.remove_observer(seen.append)
    finished = [e for e in seen if e.kind == "rollout_finished"]
    assert len(finished) == 1 and finished[0].turns_used >= 2  # a multi-turn rollout with tool calls
    assert finished[0].node_count == 1 and finished[0].drift_count == 0
    tokens, masks, logprobs = group["tokens"][0], group["masks"][0], group["inference_logprobs"][0]
    messages = group["messages"][0]
    assert any(m["role"] == "tool" for m in messages)
    assert len(tokens) == len(masks) == len(logprobs)
    assert_rollout_trains_only_assistant_text(tokenizer, tokens, masks, messages)
    # the trained runs are exactly the sampled completions, in order, with their logprobs
    runs = trained_runs(masks)
    assert len(runs) == len(sampled) == finished[0].turns_used
    for (a, b), (ids, lps) in zip(runs, sampled):
        assert tokens[a:b] == ids and logprobs[a:b] == lps
    assert all(logprobs[i] == 1.0 for i, m in enumerate(masks) if m == -100)
    assert all(logprobs[i] <= 0.0 for i, m in enumerate(masks) if m != -100)
    assert finished[0].trainable_tokens == sum(b - a for a, b in runs)
    assert finished[0].trainable_turns == finished[0].assistant_turns == finished[0].turns_used
    assert finished[0].trained_run_tokens == [len(ids) for ids, _ in sampled]
    assert finished[0].trained_run_logprob == [round(sum(lps) / len(lps), 4) for _, lps in sampled]


async def test_phase2_tokens_decode_to_messages_one_reasoning_format(sim_url, tokenizer_path, tokenizer):
    env = make_env(sim_url, tokenizer_path, group_size=2)
    await env.setup()
    group, _ = await env.collect_trajectories(await env.get_next_item())
    schemas = env._tools_for_toolsets(env.config.enabled_toolsets)[0]
    for tokens, masks, messages in zip(group["tokens"], group["masks"], group["messages"]):
        rendered = tokenizer.apply_chat_template(messages, tools=schemas, tokenize=False)
        assert tokenizer.decode(tokens, skip_special_tokens=False) == rendered
        assistants = [m for m in messages if m["role"] == "assistant"]
        assert all("<think>" not in (m.get("content") or "") for m in assistants)  # reasoning_content, as Phase 1
        assert any(m.get("reasoning_content") for m in assistants)
        # tool calls survive in structured form (as tool_calls, or parsed_tool_calls next to the sampled text)
        assert any(m.get("tool_calls") or m.get("parsed_tool_calls") for m in assistants)
        assert_rollout_trains_only_assistant_text(tokenizer, tokens, masks, messages)


def _node(tokens, masks, logprobs):
    from atroposlib.envs.server_handling.managed_server import SequenceNode

    return SequenceNode(full_text="", tokens=tokens, masked_tokens=masks, logprobs=logprobs)


def test_merge_nodes_keeps_every_turn_it_can_place():
    from environments.atropos_compat import merge_nodes

    first = _node([1, 2, 7, 8], [-100, -100, 7, 8], [1.0, 1.0, -0.1, -0.2])
    # the re-rendered prompt holds turn 1 as masked prompt, then the new completion
    last = _node([1, 2, 7, 8, 3, 9, 9], [-100] * 5 + [9, 9], [1.0] * 5 + [-0.3, -0.4])
    traj = merge_nodes([first, last])
    assert traj.node_count == 2 and traj.drift == 1 and traj.lost_turns == 0
    assert traj.masks == [-100, -100, 7, 8, -100, 9, 9]
    assert traj.logprobs == [1.0, 1.0, -0.1, -0.2, 1.0, -0.3, -0.4]
    # a turn re-rendered differently cannot be found: counted, never silently dropped
    other = _node([1, 2, 5, 8, 3, 9, 9], [-100] * 5 + [9, 9], [1.0] * 5 + [-0.3, -0.4])
    traj = merge_nodes([first, other])
    assert traj.lost_turns == 1 and traj.masks == [-100] * 5 + [9, 9]


async def test_phase2_prefix_break_is_counted_not_silent(sim_url, tokenizer_path, tokenizer, monkeypatch, caplog):
    # Without our sampled-text re-send the template re-renders tool calls differently (the old behaviour).
    import logging

    import environments.hermes_base_env as base

    caplog.set_level(logging.WARNING, logger="environments.atropos_compat")
    monkeypatch.setattr(base, "with_sampled_text", lambda messages, sampled: list(messages))
    env = make_env(sim_url, tokenizer_path, group_size=1)
    seen = []
    events.add_observer(seen.append)
    try:
        await env.setup()
        await env.collect_trajectories(await env.get_next_item())
    finally:
        events.remove_observer(seen.append)
    done = next(e for e in seen if e.kind == "rollout_finished")
    assert done.node_count > 1 and done.drift_count >= done.node_count - 1
    assert done.trainable_turns < done.assistant_turns  # visible in the health figures
    assert "prefix broke" in caplog.text


def _parsers_with_formatter():
    from environments.tool_call_parsers import get_parser, list_parsers

    return [n for n in list_parsers() if callable(getattr(get_parser(n), "format_tool_calls", None))]


@pytest.mark.parametrize("parser", _parsers_with_formatter())
async def test_phase2_one_node_for_every_tool_call_format(parser, tokenizer_path, tokenizer):
    """Each parser's text format, sampled by the simulator and parsed by the loop, keeps one node."""
    sim = SimServer(SimConfig(solve_rate=1.0, seed=4, tool_call_format=parser))
    url = sim.start()
    try:
        env = make_env(url, tokenizer_path, group_size=1)
        env.config.tool_call_parser = parser
        seen = []
        events.add_observer(seen.append)
        try:
            await env.setup()
            group, _ = await env.collect_trajectories(await env.get_next_item())
        finally:
            events.remove_observer(seen.append)
    finally:
        sim.stop()
    done = next(e for e in seen if e.kind == "rollout_finished")
    messages = group["messages"][0]
    assert any(m["role"] == "tool" for m in messages), f"{parser}: no tool ran"
    assert done.node_count == 1 and done.drift_count == 0, parser
    assert done.trainable_turns == done.assistant_turns == done.turns_used
    schemas = env._tools_for_toolsets(env.config.enabled_toolsets)[0]
    assert tokenizer.decode(group["tokens"][0], skip_special_tokens=False) == tokenizer.apply_chat_template(
        messages, tools=schemas, tokenize=False
    )
