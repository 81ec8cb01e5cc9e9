"""ConsoleState: the pure reducer (no Textual, no runtime)."""

from __future__ import annotations

import math

from environments import events as ev
from hermes_console.runtime import events as rev
from hermes_console.runtime import state as st
from hermes_console.runtime.state import ConsoleState, percentile


def _ts():
    t = [1000.0]

    def nxt(dt: float = 0.01) -> float:
        t[0] += dt
        return t[0]

    return nxt


def test_accounting_counts_each_item_once_whatever_the_duplicates():
    s = ConsoleState()
    t = _ts()
    for g in ("a", "b", "c", "d", "e"):
        s.apply(rev.ItemReceived(group_id=g, ts=t()))
    s.apply(rev.ItemCompleted(group_id="a", scores=[1.0, 0.0], step=1, ts=t()))
    s.apply(rev.ItemCompleted(group_id="a", scores=[1.0, 0.0], step=1, ts=t()))  # duplicate
    s.apply(ev.ItemDropped(group_id="b", reason="identical_scores", ts=t()))
    s.apply(ev.ItemDropped(group_id="b", reason="identical_scores", ts=t()))
    s.apply(ev.ItemFailed(group_id="c", error="boom", ts=t()))
    s.apply(rev.ItemCancelled(group_id="c", ts=t()))  # already terminal: ignored
    s.apply(rev.ItemCancelled(group_id="d", requeued=True, ts=t()))
    acc = s.accounting
    assert (acc.received, acc.completed, acc.dropped_total, acc.failed, acc.cancelled) == (5, 1, 1, 1, 1)
    assert acc.in_flight == 1  # "e"
    assert acc.dropped == {"identical_scores": 1}
    assert s.groups["c"].status == "failed" and s.groups["d"].status == "cancelled"


def test_buffers_stay_bounded_under_100k_events():
    s = ConsoleState()
    t = _ts()
    n_groups = 5_000
    events = []
    for g in range(n_groups):
        gid = f"g{g}"
        events.append(rev.ItemReceived(group_id=gid, ts=t()))
        events.append(ev.GroupStarted(group_id=gid, item_summary="x", group_size=2, phase=1, ts=t()))
        for r in range(2):
            rid = f"{gid}-r{r}"
            events.append(ev.RolloutStarted(rollout_id=rid, group_id=gid, ts=t()))
            events.append(ev.TurnStarted(rollout_id=rid, turn=1, ts=t()))
            events.append(ev.ToolCallStarted(rollout_id=rid, turn=1, call_id="c1", tool_name="terminal", ts=t()))
            events.append(
                ev.ToolCallFinished(rollout_id=rid, turn=1, call_id="c1", tool_name="terminal", duration_s=0.1, ts=t())
            )
            events.append(ev.TurnFinished(rollout_id=rid, turn=1, latency_s=0.1, content="done", ts=t()))
            events.append(ev.SandboxCreated(task_id=rid, backend="local", ts=t()))
            events.append(ev.SandboxClosed(task_id=rid, reason="cleanup", ts=t()))
            events.append(
                ev.RolloutFinished(
                    rollout_id=rid, group_id=gid, reward=float(r), turns_used=1, finished_naturally=True, ts=t()
                )
            )
        events.append(ev.GroupFinished(group_id=gid, scores=[0.0, 1.0], ts=t()))
        events.append(rev.ItemCompleted(group_id=gid, scores=[0.0, 1.0], step=g + 1, ts=t()))
        events.append(rev.LogRecord(level="INFO", logger="x", message="m", ts=t()))
    assert len(events) >= 100_000
    s.apply_all(events)
    assert s.accounting.completed == n_groups
    assert len(s.groups) <= st.MAX_FINISHED_GROUPS
    assert len(s.rollouts) <= st.MAX_FINISHED_ROLLOUTS
    assert len(s.sandboxes) <= st.MAX_CLOSED_SANDBOXES
    assert len(s.stream) <= st.MAX_STREAM
    assert len(s.tool_rows) <= st.MAX_TOOL_ROWS
    assert len(s.recent_rewards) <= st.MAX_RECENT_REWARDS
    assert len(s.reward_steps) <= st.MAX_REWARD_STEPS
    assert len(s.logs) <= st.MAX_LOGS
    assert len(s._open_tools) == 0
    assert len(s._finished_groups) <= st.MAX_FINISHED_GROUPS


def test_percentiles_and_reward_histogram():
    assert percentile([], 50) != percentile([], 50)  # nan
    assert percentile([3.0], 90) == 3.0
    assert percentile([0.0, 1.0, 2.0, 3.0, 4.0], 50) == 2.0
    assert math.isclose(percentile([0.0, 10.0], 90), 9.0)
    s = ConsoleState()
    t = _ts()
    for i, r in enumerate([0.0, 0.05, 0.5, 0.55, 0.95, 1.0, 1.0, -3.0, 7.0]):
        s.apply(
            ev.RolloutFinished(
                rollout_id=f"r{i}", group_id="g", reward=r, turns_used=1, finished_naturally=True, ts=t()
            )
        )
    hist = s.reward_histogram(bins=10)
    assert sum(hist) == 9
    assert hist[0] == 3  # 0.0, 0.05 and the clamped -3.0
    assert hist[5] == 2  # 0.5, 0.55
    assert hist[9] == 4  # 0.95, 1.0, 1.0 and the clamped 7.0
    summary = s.reward_summary()
    assert summary["n"] == 9 and math.isclose(summary["p50"], 0.55)
    s.apply(ev.GroupFinished(group_id="g1", scores=[1.0, 1.0], ts=t()))
    s.apply(ev.GroupFinished(group_id="g2", scores=[0.0, 1.0], ts=t()))
    assert s.identical_share() == 0.5
    assert [x.identical for x in s.reward_steps] == [True, False]


def test_throughput_uses_event_time_only():
    s = ConsoleState()
    base = 5000.0
    for i in range(50):  # 50 rollouts over 5 s -> 10/s
        s.apply(
            ev.RolloutFinished(
                rollout_id=f"r{i}", group_id="g", reward=1.0, turns_used=1, finished_naturally=True, ts=base + i * 0.1
            )
        )
    assert math.isclose(s.rollouts_per_s(), 50 / 4.9, rel_tol=0.01)
    # a window later than every event: nothing in it
    assert s.rollouts_per_s(now=base + 100) == 0.0
    # same events, fresh state -> same value (deterministic, replay-safe)
    s2 = ConsoleState()
    for i in range(50):
        s2.apply(
            ev.RolloutFinished(
                rollout_id=f"r{i}", group_id="g", reward=1.0, turns_used=1, finished_naturally=True, ts=base + i * 0.1
            )
        )
    assert s2.rollouts_per_s() == s.rollouts_per_s()


def test_snapshot_equal_for_equal_event_sequences_and_phase_switch_applies():
    t = _ts()
    seq = [
        rev.RunConfigured(
            env_name="e", mode="process", phase=1, group_size=2, max_in_flight=2, worker_timeout_s=5, ts=t()
        ),
        rev.RuntimeStatus(status="running", ts=t()),
        rev.PhaseSwitch(stage="requested", from_phase=1, to_phase=2, ts=t()),
        rev.PhaseSwitch(stage="done", from_phase=1, to_phase=2, ts=t()),
        rev.EvalStarted(eval_id="e1", ts=t()),
        rev.EvalFinished(eval_id="e1", metrics={"acc": 0.5}, ts=t()),
    ]
    a, b = ConsoleState(), ConsoleState()
    a.apply_all(seq)
    b.apply_all(seq)
    assert a.snapshot() == b.snapshot()
    assert a.run.phase == 2 and a.evals["e1"].metrics == {"acc": 0.5}


def test_the_accounting_check_counts_items_from_the_events_not_from_the_counters():
    """identity() (used by every live-run test) must catch a reducer that miscounts:
    in_flight is a remainder of the counters, so it is compared with a count made here."""
    from tests.runtime.runtime_helpers import identity

    t = _ts()
    events = [rev.ItemReceived(group_id=g, ts=t()) for g in ("a", "b", "c")] + [
        rev.ItemCompleted(group_id="a", scores=[1.0, 0.0], ts=t()),
        rev.ItemCompleted(group_id="a", scores=[1.0, 0.0], ts=t()),  # a duplicate end: counted once
        ev.ItemDropped(group_id="b", reason="too_long", ts=t()),
    ]
    s = ConsoleState()
    s.apply_all(events)
    assert identity(s, events) is None
    s.accounting.completed += 1  # as if the duplicate had been counted: in_flight drops to 0
    problem = identity(s, events)
    assert problem is not None and "in_flight: 1 counted from the events, 0 in the console" in problem
    assert "completed: 1 counted from the events, 2 in the console" in problem
    s.accounting.completed -= 1
    assert identity(s, events + [rev.ItemCancelled(group_id="zz", ts=t())]) is not None  # ended, never received
