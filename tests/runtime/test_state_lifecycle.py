"""Lifecycle details of the reducer: a cancelled or failed group ends its rollouts and tool
calls (nothing stays "running" forever), and one timeout counts once."""

from __future__ import annotations

from environments import events as ev
from hermes_console.runtime import events as rev
from hermes_console.runtime.state import ConsoleState


def _group_with_live_rollouts(s: ConsoleState, gid: str = "g1") -> None:
    s.apply_all(
        [
            rev.ItemReceived(group_id=gid, item_summary="t"),
            ev.GroupStarted(group_id=gid, item_summary="t", group_size=2, phase=1),
            ev.RolloutStarted(rollout_id=f"{gid}-r1", group_id=gid),
            ev.RolloutStarted(rollout_id=f"{gid}-r2", group_id=gid),
            ev.ToolCallStarted(rollout_id=f"{gid}-r1", turn=1, call_id="c1", tool_name="terminal"),
            ev.RolloutFinished(rollout_id=f"{gid}-r2", group_id=gid, reward=1.0, turns_used=1, finished_naturally=True),
        ]
    )


def test_cancelled_group_ends_its_running_rollouts_and_tool_calls():
    s = ConsoleState()
    _group_with_live_rollouts(s)
    s.apply(rev.ItemCancelled(group_id="g1", reason="stopped"))
    assert [r.status for r in s.rollouts.values() if r.status == "running"] == []
    assert s.rollouts["g1-r1"].status == "cancelled" and s.rollouts["g1-r1"].finished_at is not None
    assert s.rollouts["g1-r2"].status == "done"  # a finished one keeps its outcome
    assert [t.status for t in s.tool_rows] == ["cancelled"]
    # the call is closed: a late finish for it does not reopen or double count anything
    s.apply(ev.ToolCallFinished(rollout_id="g1-r1", turn=1, call_id="c1", tool_name="terminal", duration_s=0.1))
    assert [t.status for t in s.tool_rows] == ["cancelled"]
    assert s.accounting.cancelled == 1 and s.accounting.received == 1 and s.accounting.in_flight == 0


def test_failed_group_ends_its_running_rollouts_too():
    s = ConsoleState()
    _group_with_live_rollouts(s)
    s.apply(ev.ItemFailed(group_id="g1", error="no result within worker_timeout=60s", error_kind="timeout"))
    assert not any(r.status == "running" for r in s.rollouts.values())


def test_completed_group_leaves_rollout_outcomes_alone():
    s = ConsoleState()
    _group_with_live_rollouts(s)
    s.apply(
        ev.RolloutFinished(
            rollout_id="g1-r1", group_id="g1", reward=0.0, turns_used=2, finished_naturally=True, error="empty reply"
        )
    )
    s.apply(rev.ItemCompleted(group_id="g1", scores=[0.0, 1.0], step=1))
    assert {r.rollout_id: r.status for r in s.rollouts.values()} == {"g1-r1": "error", "g1-r2": "done"}


def test_a_tool_command_timeout_counts_once_in_the_headline_errors():
    s = ConsoleState()
    s.apply_all(
        [
            ev.RolloutStarted(rollout_id="r1", group_id="g"),
            ev.ToolCallStarted(rollout_id="r1", turn=1, call_id="c1", tool_name="terminal"),
            ev.SandboxCommandStarted(task_id="r1", command="sleep 99", timeout_s=1.0),
            ev.SandboxCommandFinished(task_id="r1", command="sleep 99", exit_code=124, duration_s=1.0, timed_out=True),
            ev.ToolCallFinished(
                rollout_id="r1",
                turn=1,
                call_id="c1",
                tool_name="terminal",
                duration_s=1.0,
                error="Command timed out after 1 seconds",
                error_kind="timeout",
                exit_code=124,
            ),
        ]
    )
    assert sum(s.errors_by_kind.values()) == 1 and s.sandboxes["r1"].timeouts == 1
    # the verifier's command (no tool call in flight) timing out is its own error
    s.apply_all(
        [
            ev.SandboxCommandStarted(task_id="r1", command="pytest", timeout_s=1.0),
            ev.SandboxCommandFinished(task_id="r1", command="pytest", exit_code=124, duration_s=1.0, timed_out=True),
        ]
    )
    assert s.errors_by_kind["sandbox_timeout"] == 1 and sum(s.errors_by_kind.values()) == 2


def test_an_eval_item_row_is_done_when_its_rollout_is():
    s = ConsoleState()
    s.apply_all(
        [
            rev.EvalStarted(eval_id="ev-1"),
            ev.RolloutStarted(rollout_id="r9", group_id="eval-abc", item_summary="task-3"),
        ]
    )
    assert s.groups["eval-abc"].stage == "rolling out"
    s.apply(ev.RolloutFinished(rollout_id="r9", group_id="eval-abc", reward=1.0, turns_used=1, finished_naturally=True))
    assert s.groups["eval-abc"].status == "evaluated" and s.groups["eval-abc"].stage == "done"
    assert s.accounting.received == 0 and s.accounting.in_flight == 0  # evals stay outside item accounting
    s.apply(rev.EvalFinished(eval_id="ev-1", metrics={"pass_rate": 1.0}))
    assert s.evals["ev-1"].status == "done"
