"""todo store/tool and the tool-result budget (behaviour 19 from the tools' side)."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from environments.sandboxes import get_sandbox
from environments.tools import get_tool_definitions
from environments.tools.budget import (
    DEFAULT_BUDGET,
    BudgetConfig,
    enforce_turn_budget,
    maybe_persist_tool_result,
    resolve_threshold,
)
from environments.tools.todo import TodoStore, todo_tool
from tests.helpers.sandboxes import local_sandbox

# ------------------------------------------------------------------ todo


def test_todo_read_replace_merge_and_summary():
    store = TodoStore()
    assert json.loads(todo_tool(store=store)) == {
        "todos": [],
        "summary": {"total": 0, "pending": 0, "in_progress": 0, "completed": 0, "cancelled": 0},
    }
    todo_tool([{"id": "1", "content": "plan"}, {"id": "2", "content": "build", "status": "in_progress"}], store=store)
    out = json.loads(
        todo_tool([{"id": "1", "status": "completed"}, {"id": "3", "content": "ship"}], merge=True, store=store)
    )
    assert out["todos"] == [
        {"id": "1", "content": "plan", "status": "completed"},
        {"id": "2", "content": "build", "status": "in_progress"},
        {"id": "3", "content": "ship", "status": "pending"},
    ]
    assert out["summary"] == {"total": 3, "pending": 1, "in_progress": 1, "completed": 1, "cancelled": 0}
    replaced = json.loads(todo_tool([{"id": "9", "content": "only", "status": "cancelled"}], store=store))
    assert [t["id"] for t in replaced["todos"]] == ["9"] and replaced["summary"]["cancelled"] == 1


@pytest.mark.parametrize(
    ("todos", "fragment"),
    [
        (
            [{"id": "1", "content": "x", "status": "done"}],
            "todos[0].status must be one of pending, in_progress, completed, cancelled; got 'done'",
        ),
        ([{"content": "x"}], "todos[0].id is required"),
        ([{"id": "1"}], "todos[0].content is required"),
        ([{"id": "1", "content": "a"}, {"id": "1", "content": "b"}], "appears more than once"),
        ("nope", "not JSON"),
        ([3], "todos[0] must be an object"),
    ],
)
def test_todo_invalid_input_is_a_clear_error_and_changes_nothing(todos, fragment):
    store = TodoStore()
    todo_tool([{"id": "k", "content": "keep"}], store=store)
    out = json.loads(todo_tool(todos, store=store))
    assert fragment in out["error"]
    assert store.read() == [{"id": "k", "content": "keep", "status": "pending"}]


def test_todo_schema_is_offered_in_the_todo_toolset():
    (definition,) = get_tool_definitions(["todo"], quiet_mode=True)
    assert definition["function"]["name"] == "todo"
    assert "todos" in definition["function"]["parameters"]["properties"]


# ------------------------------------------------------------------ budget


@pytest.fixture
def task(tmp_path):
    # A real local sandbox, whatever backend an earlier test in this worker configured.
    task_id = f"budget-{uuid.uuid4().hex[:8]}"
    for _ in local_sandbox(tmp_path, task_id):
        yield task_id


def test_small_results_pass_through(task):
    assert maybe_persist_tool_result("small", "terminal", "c1", task, DEFAULT_BUDGET) == "small"


def test_oversized_result_is_persisted_into_the_sandbox(task):
    content = "".join(f"row {i}\n" for i in range(5000))
    config = BudgetConfig(default_result_size=1000, preview_size=100)
    out = maybe_persist_tool_result(content, "terminal", "call/1", task, config)
    sandbox = get_sandbox(task)
    saved = Path(sandbox.host_workspace) / ".hermes-results" / "call_1.txt"
    assert saved.read_text() == content
    assert out.startswith(f'<persisted-output path="{sandbox.workspace}/.hermes-results/call_1.txt"')
    assert content[:100] in out and content[100:200] not in out
    assert "read_file" in out and out.endswith("</persisted-output>")
    assert len(out) < 1000


def test_a_planted_results_symlink_is_never_followed_on_the_host(task, tmp_path):
    """The model owns the workspace: it can make .hermes-results a link to a host directory
    (or plant call_1.txt as a link to a host file) before a big result is persisted."""
    outside = tmp_path / "host-dir"
    outside.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("host data")
    ws = Path(get_sandbox(task).host_workspace)
    (ws / ".hermes-results").symlink_to(outside)
    content = "x" * 5000
    config = BudgetConfig(default_result_size=1000, preview_size=100)
    out = maybe_persist_tool_result(content, "terminal", "call_1", task, config)
    assert list(outside.iterdir()) == []
    assert "<persisted-output" not in out and out.startswith("x" * 100)  # inline truncation instead
    (ws / ".hermes-results").unlink()
    (ws / ".hermes-results").mkdir()
    (ws / ".hermes-results" / "call_2.txt").symlink_to(victim)
    maybe_persist_tool_result(content, "terminal", "call_2", task, config)
    assert victim.read_text() == "host data"
    # a FIFO planted where the result goes: the host must not block on it (no reader ever comes)
    os.mkfifo(ws / ".hermes-results" / "call_3.txt")
    out = maybe_persist_tool_result(content, "terminal", "call_3", task, config)
    assert "<persisted-output" not in out and out.startswith("x" * 100)


def test_threshold_argument_and_overrides(task):
    assert maybe_persist_tool_result("x" * 50, "terminal", "c", task, DEFAULT_BUDGET, threshold=10).startswith(
        "<persisted-output"
    )
    config = BudgetConfig(tool_overrides={"terminal": 5})
    assert resolve_threshold("terminal", config) == 5
    assert resolve_threshold("patch", config) == 100_000


def test_read_file_is_never_persisted(task):
    big = "1|" + "y" * 300_000
    assert maybe_persist_tool_result(big, "read_file", "c", task, BudgetConfig(default_result_size=10)) == big
    assert maybe_persist_tool_result(big, "read_file", "c", task, BudgetConfig(tool_overrides={"read_file": 5})) == big


def test_without_a_sandbox_results_are_truncated_inline():
    out = maybe_persist_tool_result("z" * 5000, "terminal", "c", None, BudgetConfig(default_result_size=1000))
    assert out.startswith("z" * 1000) and "truncated 4000 of 5000" in out and "<persisted" not in out


def test_turn_budget_persists_the_largest_first(task):
    config = BudgetConfig(default_result_size=10**9, turn_budget=30_000, preview_size=200)
    messages = [
        {"role": "tool", "tool_call_id": "a", "content": "a" * 12_000},
        {"role": "tool", "tool_call_id": "b", "content": "b" * 20_000},
        {"role": "tool", "tool_call_id": "c", "content": "c" * 5_000},
    ]
    out = enforce_turn_budget(messages, task, config)
    assert out is messages  # updated in place, same list back
    assert messages[1]["content"].startswith("<persisted-output")  # the biggest went first ...
    assert messages[0]["content"] == "a" * 12_000 and messages[2]["content"] == "c" * 5_000  # ... and was enough
    assert sum(len(m["content"]) for m in messages) <= 30_000
    ws = Path(get_sandbox(task).host_workspace)
    assert (ws / ".hermes-results" / "b.txt").read_text() == "b" * 20_000


def test_turn_budget_keeps_going_until_it_fits(task):
    config = BudgetConfig(turn_budget=10_000, preview_size=100)
    messages = [{"role": "tool", "tool_call_id": f"m{i}", "content": str(i) * 8_000} for i in range(4)]
    messages.append({"role": "tool", "tool_call_id": "r", "name": "read_file", "content": "r" * 3_000})
    enforce_turn_budget(messages, task, config)
    assert all(m["content"].startswith("<persisted-output") for m in messages[:4])
    assert messages[4]["content"] == "r" * 3_000  # read_file is pinned
    assert sum(len(m["content"]) for m in messages) <= 10_000
