"""terminal-tasks: the task file, its validation, the checks and the env's item handling."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from environments.terminal_tasks.reward import score_check
from environments.terminal_tasks.tasks import DEFAULT_TASKS_PATH, TaskCheck, load_tasks


class BashCtx:
    """A ToolContext stand-in running bash in a private directory (sync API only)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def terminal(self, command: str, timeout: int = 180) -> dict[str, Any]:
        p = subprocess.run(["bash", "-c", command], cwd=self.root, capture_output=True, text=True, timeout=timeout)
        return {"output": p.stdout + p.stderr, "exit_code": p.returncode, "error": None}


def write(tmp_path: Path, lines) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return path


GOOD = {
    "task_id": "t1",
    "split": "train",
    "prompt": "p",
    "setup": [],
    "check": {"type": "command_exit_zero", "command": "true"},
}


def test_bundled_tasks_load_and_split():
    train, evals = load_tasks(split="train"), load_tasks(split="eval")
    assert len(train) >= 14 and len(evals) >= 5
    assert len({t.task_id for t in train + evals}) == len(train) + len(evals)
    assert all(t.solution for t in train + evals)  # the simulator's hints


@pytest.mark.parametrize(
    "lines, message",
    [
        ([GOOD, "{not json"], r"tasks.jsonl:2: not valid JSON"),
        ([GOOD, {k: v for k, v in GOOD.items() if k != "prompt"}], r"tasks.jsonl:2: missing field 'prompt'"),
        ([{**GOOD, "split": "dev"}], r"tasks.jsonl:1: field 'split'"),
        ([{**GOOD, "check": {"type": "file_equals", "expected": "x"}}], r"tasks.jsonl:1: .*check.path"),
        ([{**GOOD, "check": {"type": "magic"}}], r"tasks.jsonl:1: field 'check.type'"),
        ([GOOD, GOOD], r"tasks.jsonl:2: duplicate task_id 't1'"),
        (["[1, 2]"], r"tasks.jsonl:1: expected a JSON object"),
    ],
)
def test_bad_task_files_name_file_line_and_field(tmp_path, lines, message):
    with pytest.raises(ValueError, match=message):
        load_tasks(write(tmp_path, lines))


def test_missing_file_and_empty_split(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        load_tasks(tmp_path / "nope.jsonl")
    with pytest.raises(ValueError, match="no tasks in split 'eval'"):
        load_tasks(write(tmp_path, [GOOD]), split="eval")


@pytest.mark.parametrize(
    "check, content, expected",
    [
        (TaskCheck(type="file_equals", path="f.txt", expected="42"), "42\n", 1.0),
        (TaskCheck(type="file_equals", path="f.txt", expected="42"), "the answer is 42", 0.5),
        (TaskCheck(type="file_equals", path="f.txt", expected="42"), "41", 0.0),
        (TaskCheck(type="file_equals", path="f.txt", expected="42"), None, 0.0),
        (TaskCheck(type="file_contains", path="f.txt", expected="HELLO"), "say HELLO", 1.0),
        (TaskCheck(type="file_contains", path="f.txt", expected="HELLO"), "say hello", 0.5),
        (TaskCheck(type="command_exit_zero", command="test -f f.txt"), "x", 1.0),
        (TaskCheck(type="command_exit_zero", command="test -f f.txt"), None, 0.0),
        (TaskCheck(type="command_output_equals", command="cat f.txt", expected="ok"), "ok", 1.0),
        (TaskCheck(type="command_output_equals", command="cat f.txt", expected="ok"), "ok!?", 0.5),
        (TaskCheck(type="command_output_equals", command="cat f.txt", expected="ok"), "no", 0.0),
    ],
)
async def test_reward_levels(tmp_path, check, content, expected):
    if content is not None:
        (tmp_path / "f.txt").write_text(content)
    assert await score_check(check, BashCtx(tmp_path)) == expected


async def test_every_task_is_solvable_and_unsolved_scores_below_one(tmp_path):
    """The hints solve each task (1.0) and the untouched setup does not (< 1.0)."""
    for task in load_tasks():
        solved, unsolved = tmp_path / task.task_id / "a", tmp_path / task.task_id / "b"
        solved.mkdir(parents=True), unsolved.mkdir(parents=True)
        for root, commands in ((solved, task.setup + task.solution), (unsolved, task.setup)):
            for command in commands:
                assert BashCtx(root).terminal(command)["exit_code"] == 0, (task.task_id, command)
        assert await score_check(task.check, BashCtx(solved)) == 1.0, task.task_id
        assert await score_check(task.check, BashCtx(unsolved)) < 1.0, task.task_id


# ---------------------------------------------------------------- the env


@pytest.fixture
def env(tokenizer_path):
    from environments.terminal_tasks.env import TerminalTasksEnv

    config, servers = TerminalTasksEnv.config_init()
    return TerminalTasksEnv(config, servers)


def test_config_init(env):
    config, (server,) = type(env).config_init()
    assert config.enabled_toolsets == ["terminal", "file"] and config.terminal_backend == "local"
    assert (config.max_agent_turns, config.group_size, config.max_token_length, config.total_steps) == (8, 4, 4096, 20)
    assert config.use_wandb is False and config.ensure_scores_are_not_same is False
    assert (server.base_url, server.model_name, server.api_key, server.server_type) == (
        "http://127.0.0.1:9001/v1",
        "hermes-sim",
        "x",
        "openai",
    )
    assert server.health_check is False and server.timeout == 30


async def test_items_cycle_seeded_and_hide_solution(env):
    await env.setup()
    n = len(env.train_items)
    first = [(await env.get_next_item())["task_id"] for _ in range(n)]
    assert sorted(first) == sorted(t["task_id"] for t in env.train_items)  # each once per epoch
    assert all("solution" not in t for t in env.train_items + env.eval_items)
    assert env.format_prompt(env.train_items[0]) == env.train_items[0]["prompt"]
    again = type(env)(env.config, type(env).config_init()[1])
    await again.setup()
    assert [(await again.get_next_item())["task_id"] for _ in range(n)] == first  # reproducible


async def test_setup_failure_is_reported(env):
    class Failing:
        async def a_terminal(self, command, timeout=180):
            return {"output": "boom", "exit_code": 2}

    with pytest.raises(RuntimeError, match="setup of task 'x' failed .*exit 2"):
        await env.prepare_rollout({"task_id": "x", "setup": ["false"]}, Failing())


async def test_real_sandbox_setup_and_reward(env):
    """prepare_rollout + compute_reward through the real ToolContext and a local sandbox."""
    from environments.tool_context import ToolContext

    task = next(t for t in load_tasks(DEFAULT_TASKS_PATH) if t.task_id == "csv_sum")
    item = env._item(task)
    ctx = ToolContext("tt-real-sandbox")
    try:
        await env.prepare_rollout(item, ctx)
        assert await env.compute_reward(item, None, ctx) == 0.0
        for command in task.solution:
            await ctx.a_terminal(command)
        assert await env.compute_reward(item, None, ctx) == 1.0
    finally:
        ctx.cleanup()
    assert env.reward_buffer == [0.0, 1.0]


class _CatOnly:
    """A real ToolContext seen through its terminal alone: the ``cat`` path score_check takes
    for a context without ``a_read_text`` (the old way: the oracle for parity)."""

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx

    async def a_terminal(self, command: str, timeout: int = 180) -> dict[str, Any]:
        return await self._ctx.a_terminal(command, timeout=timeout)


async def test_every_bundled_task_scores_the_same_read_as_stored_and_through_cat(env):
    """Every bundled task, unsolved and solved, in a real local sandbox: the file checks read
    without a process now; the score is what the ``cat`` path gives on the same sandbox."""
    from environments.tool_context import ToolContext

    for task in load_tasks(DEFAULT_TASKS_PATH):
        item = env._item(task)
        ctx = ToolContext(f"tt-parity-{task.task_id}")
        try:
            await env.prepare_rollout(item, ctx)
            unsolved = await score_check(task.check, ctx)
            assert unsolved == await score_check(task.check, _CatOnly(ctx)) and unsolved < 1.0, task.task_id
            for command in task.solution:
                await ctx.a_terminal(command)
            assert await score_check(task.check, ctx) == await score_check(task.check, _CatOnly(ctx)) == 1.0
        finally:
            ctx.cleanup()


async def test_a_secret_looking_answer_scores_as_written():
    """The terminal tool redacts what looks like a credential (for the model's eyes and the
    logs); a task whose answer is such a token must still score 1 when the file holds it."""
    from environments.tool_context import ToolContext

    token = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"
    check = TaskCheck(type="file_equals", path="key.txt", expected=token)
    ctx = ToolContext("tt-secret-answer")
    try:
        await ctx.a_terminal(f"printf '%s\\n' {token} > key.txt")
        assert await score_check(check, _CatOnly(ctx)) == 0.0  # cat's output came back redacted
        assert await score_check(check, ctx) == 1.0
    finally:
        ctx.cleanup()
