"""The scripted policy at unit level: solves/fails as configured, deterministic, tool-aware."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hermes_console.sim.policy import ScriptedPolicy
from tests.sim.sim_helpers import ERROR_TASK, first_turn, play, tool_schema


def test_every_terminal_task_is_solved_at_rate_one_and_failed_at_zero(terminal_tasks, sim_tools, tmp_path: Path):
    good, bad = ScriptedPolicy(seed=1, solve_rate=1.0), ScriptedPolicy(seed=1, solve_rate=0.0)
    unsolved, solved_anyway = [], []
    for task in terminal_tasks:
        ok, _ = play(good, task, _fresh(tmp_path, "good", task), sim_tools)
        if not ok:
            unsolved.append(task["task_id"])
        ok, _ = play(bad, task, _fresh(tmp_path, "bad", task), sim_tools)
        if ok:
            solved_anyway.append(task["task_id"])
    assert unsolved == [] and solved_anyway == []


def test_tasks_are_solved_with_terminal_only(terminal_tasks, tmp_path: Path):
    policy = ScriptedPolicy(seed=2, solve_rate=1.0)
    tools = [tool_schema("terminal")]
    results = {}
    for task in terminal_tasks:
        ok, msgs = play(policy, task, _fresh(tmp_path, "t", task), tools)
        results[task["task_id"]] = ok
        used = {tc["function"]["name"] for m in msgs for tc in m.get("tool_calls", [])}
        assert used <= {"terminal"}, (task["task_id"], used)
    assert all(results.values()), [k for k, v in results.items() if not v]


def test_solve_rate_is_roughly_honoured_over_200_episodes(sim_tools, tmp_path: Path):
    task = {
        "task_id": "answer_42",
        "prompt": "Create a file named result.txt containing only the number 42.",
        "setup": [],
        "check": {"type": "file_equals", "path": "result.txt", "expected": "42"},
    }
    policy = ScriptedPolicy(seed=11, solve_rate=0.6)
    solved = sum(play(policy, task, _fresh(tmp_path, str(k), task), sim_tools[2:3], sample=k)[0] for k in range(200))
    # Binomial(200, 0.6): sd ~ 7 episodes; 0.45..0.75 is > 4 sd either way.
    assert 90 <= solved <= 150, solved


def test_policy_reacts_to_the_tool_result(sim_tools):
    policy = ScriptedPolicy(seed=0, solve_rate=1.0)
    msgs = first_turn(ERROR_TASK)
    for turn in range(2):  # inspect, then grep -c
        action = policy.respond(msgs, sim_tools)
        assert action.tool_calls, turn
        _answer(msgs, action, {"output": "17\n", "exit_code": 0, "error": None})
    action = policy.respond(msgs, sim_tools)
    call = action.tool_calls[0]
    assert call.name == "write_file"
    assert call.arguments == {"path": "error_count.txt", "content": "17\n"}  # the number it was shown


def test_decisions_are_deterministic_and_samples_differ(sim_tools):
    a, b = ScriptedPolicy(seed=5, solve_rate=0.5), ScriptedPolicy(seed=5, solve_rate=0.5)
    msgs = first_turn("Create a file named result.txt containing only the number 42.")
    _answer(msgs, a.respond(msgs, sim_tools), {"output": "", "exit_code": 0, "error": None})
    replies_a = [a.respond(msgs, sim_tools, sample=k) for k in range(40)]
    replies_b = [b.respond(msgs, sim_tools, sample=k) for k in range(40)]
    assert replies_a == replies_b
    # The decisive turn differs between samples: some write 42, some do not.
    kinds = {(r.final, json.dumps(r.tool_calls[0].arguments) if r.tool_calls else None) for r in replies_a}
    assert len(kinds) >= 2
    other_seed = [ScriptedPolicy(seed=6, solve_rate=0.5).respond(msgs, sim_tools, sample=k) for k in range(40)]
    assert other_seed != replies_a


def test_only_offered_tools_are_called(sim_tools):
    policy = ScriptedPolicy(seed=0, solve_rate=1.0)
    only_read = [tool_schema("read_file")]
    action = policy.respond(first_turn(ERROR_TASK), only_read)
    assert [c.name for c in action.tool_calls] == ["read_file"]
    assert policy.respond(first_turn(ERROR_TASK), [tool_schema("todo")]).final  # nothing usable: answers


def test_no_tools_means_a_text_answer():
    action = ScriptedPolicy().respond(first_turn(ERROR_TASK), None)
    assert action.final and "grep -c ERROR log.txt" in (action.content or "")


def test_unknown_prompt_gets_the_generic_fallback(sim_tools, tmp_path: Path):
    (tmp_path / "data.txt").write_text("some data\n")
    task = {
        "task_id": "x",
        "prompt": "Tidy up this workspace however you see fit.",
        "setup": [],
        "check": {"type": "file_contains", "path": "notes.txt", "expected": "data.txt"},
    }
    ok, msgs = play(ScriptedPolicy(seed=0, solve_rate=1.0), task, tmp_path, sim_tools)
    calls = [tc["function"] for m in msgs for tc in m.get("tool_calls", [])]
    assert [c["name"] for c in calls] == ["terminal", "read_file", "write_file"]
    assert json.loads(calls[1]["arguments"]) == {"path": "data.txt"}  # picked from the ls output
    assert ok and msgs[-1]["role"] == "assistant" and not msgs[-1].get("tool_calls")


@pytest.mark.parametrize(
    "prompt, path, expected",
    [
        ("Create a file named hello.txt containing the word banana.", "hello.txt", "banana"),
        ("Count the lines containing WARN in app.log and write the number to warn.txt", "warn.txt", "2"),
    ],
)
def test_prompt_families_outside_the_table(prompt, path, expected, sim_tools, tmp_path: Path):
    task = {
        "task_id": "f",
        "prompt": prompt,
        "setup": ["printf 'WARN a\\nok\\nWARN b\\n' > app.log"],
        "check": {"type": "file_equals", "path": path, "expected": expected},
    }
    ok, _ = play(ScriptedPolicy(seed=0, solve_rate=1.0), task, tmp_path, sim_tools)
    assert ok


def _answer(msgs: list[dict[str, Any]], action: Any, result: dict[str, Any]) -> None:
    calls = [
        {"id": f"call_{i}", "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
        for i, c in enumerate(action.tool_calls)
    ]
    msgs.append({"role": "assistant", "content": action.content, "tool_calls": calls})
    for c in calls:
        msgs.append({"role": "tool", "tool_call_id": c["id"], "content": json.dumps(result)})


def _fresh(root: Path, tag: str, task: dict[str, Any]) -> Path:
    ws = root / f"{tag}-{task['task_id']}"
    ws.mkdir(parents=True, exist_ok=True)
    return ws
