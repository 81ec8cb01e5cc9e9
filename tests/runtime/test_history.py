"""The history reducer (runtime/history.py): readable ids, one record per finished rollout
with its group's fate, where the time went, errors by kind. Oracle: the events themselves."""

from __future__ import annotations

import math
import statistics

import numpy

from environments import events as ev
from hermes_console.runtime import events as rev
from hermes_console.runtime import history as history_module
from hermes_console.runtime.state import ConsoleState
from tests.ui.eventlog import error_run, main_run


def _state(events) -> ConsoleState:
    s = ConsoleState()
    s.apply_all(events)
    return s


def test_every_finished_rollout_has_a_record_matching_its_event() -> None:
    events = main_run(finished=8)
    s = _state(events)
    finished = {e.rollout_id: e for e in events if isinstance(e, ev.RolloutFinished)}
    assert set(s.history.records) == set(finished)
    dropped = {e.group_id: e.reason for e in events if isinstance(e, ev.ItemDropped)}
    kept = {e.group_id for e in events if isinstance(e, rev.ItemCompleted)}
    for rid, e in finished.items():
        r = s.history.records[rid]
        assert (r.score, r.turns, r.duration_s, r.group_id) == (e.reward, e.turns_used, e.duration_s, e.group_id)
        assert r.outcome == ("dropped" if e.group_id in dropped else "kept" if e.group_id in kept else "pending")
        assert r.drop_reason == dropped.get(e.group_id, "")
        # generation / tool time are the sums of the rollout's turn latencies and tool durations
        gen = sum(t.latency_s for t in events if isinstance(t, ev.TurnFinished) and t.rollout_id == rid)
        tools = sum(t.duration_s for t in events if isinstance(t, ev.ToolCallFinished) and t.rollout_id == rid)
        assert math.isclose(r.generation_s, gen) and math.isclose(r.tool_s, tools)
    totals = s.history.totals
    assert totals["rollouts"] == len(finished)
    assert math.isclose(totals["duration_s"], sum(e.duration_s for e in finished.values()))
    # LLM latency percentiles over every successful call (fewer than the bound here)
    latencies = sorted(t.latency_s for t in events if isinstance(t, ev.TurnFinished) and not t.error)
    p50, p95 = s.history.latency_percentiles()
    assert math.isclose(p50, statistics.median(latencies))
    assert math.isclose(p95, float(numpy.percentile(latencies, 95)))


def test_readable_ids_for_uuid_groups_and_rollouts() -> None:
    s = ConsoleState()
    for i, gid in enumerate(("9f3c2a1b0d4e", "77aa01bc23de")):
        s.apply(rev.ItemReceived(ts=1.0 + i, group_id=gid))
        for r in range(2):
            s.apply(ev.RolloutStarted(ts=2.0 + i, rollout_id=f"{gid}-uuid-{r}", group_id=gid))
    assert s.history.label_of("9f3c2a1b0d4e-uuid-1") == "g0001-r1"
    assert s.history.label_of("77aa01bc23de-uuid-0") == "g0002-r0"
    assert s.history.resolve("g0002-r0") == "77aa01bc23de-uuid-0"
    assert s.history.resolve_any("g0002-r0") == "77aa01bc23de-uuid-0"  # the `/` filter takes labels
    assert s.history.resolve_any("g0001") == "9f3c2a1b0d4e"
    assert s.history.resolve_any("ls -la") == "ls -la"
    assert s.history.siblings("77aa01bc23de-uuid-0") == ["77aa01bc23de-uuid-0", "77aa01bc23de-uuid-1"]


def test_errors_by_kind_count_each_error_once() -> None:
    events = error_run()
    s = _state(events)
    counts = s.history.error_counts
    tool_errors = [e for e in events if isinstance(e, ev.ToolCallFinished) and e.error]
    assert counts["tool"] + counts["timeout"] >= len(tool_errors)
    assert counts["tool"] == sum(1 for e in tool_errors if e.error_kind != "timeout")
    assert counts["reward"] == sum(1 for e in events if isinstance(e, ev.RolloutFinished) and e.reward_error)
    items = [e for e in events if isinstance(e, (ev.ItemDropped, ev.ItemFailed))]
    timeouts = (
        sum(1 for e in tool_errors if e.error_kind == "timeout")
        + sum(1 for e in items if isinstance(e, ev.ItemFailed) and e.error_kind == "timeout")
        + sum(1 for e in events if isinstance(e, ev.TurnFinished) and e.error and "timeout" in e.error.lower())
    )
    assert counts["timeout"] == timeouts
    assert sum(counts.values()) == len(s.history.errors)  # fewer than the bound: every one is listed
    assert all(r.cause for r in s.history.errors)


def test_records_are_bounded_oldest_first(monkeypatch) -> None:
    monkeypatch.setattr(history_module, "MAX_RECORDS", 10)
    events = main_run(finished=6)
    s = _state(events)
    finished = [
        e.rollout_id for e in sorted((e for e in events if isinstance(e, ev.RolloutFinished)), key=lambda e: e.ts)
    ]
    assert list(s.history.records) == finished[-10:]
    assert s.history.totals["rollouts"] == len(finished)  # run totals still count every rollout


def test_same_events_same_history() -> None:
    events = error_run()
    a, b = _state(events), _state(events)
    assert a.history.records == b.history.records
    assert list(a.history.errors) == list(b.history.errors)
    assert [x.rollouts for x in a.history.buckets] == [x.rollouts for x in b.history.buckets]


def test_rollout_log_writes_every_rollout_and_group_fate_and_stays_bounded(tmp_path, monkeypatch) -> None:
    import json

    from hermes_console.runtime import rollout_log
    from hermes_console.runtime.rollout_log import RolloutLog

    monkeypatch.setattr(rollout_log, "MAX_OPEN", 8)
    events = main_run(finished=4)
    log = RolloutLog(tmp_path / "run" / "rollouts.jsonl")
    for e in events:
        log.tap(e)
    log.close()
    lines = [json.loads(x) for x in (tmp_path / "run" / "rollouts.jsonl").read_text().splitlines()]
    finished = [e for e in events if isinstance(e, ev.RolloutFinished)]
    rollouts = [r for r in lines if r["kind"] == "rollout"]
    assert [r["rollout_id"] for r in rollouts] == [e.rollout_id for e in finished]
    assert [r["score"] for r in rollouts] == [e.reward for e in finished]
    for r in rollouts[-4:]:  # still tracked under the small bound: time summed from the events
        gen = sum(t.latency_s for t in events if isinstance(t, ev.TurnFinished) and t.rollout_id == r["rollout_id"])
        assert math.isclose(r["generation_s"], round(gen, 4))
    assert len(log._time) <= 8  # the running rollouts at the end of the log, at most the bound
    groups = [r for r in lines if r["kind"] == "group"]
    fates = {
        e.group_id: ("dropped" if isinstance(e, ev.ItemDropped) else "kept")
        for e in events
        if isinstance(e, (ev.ItemDropped, rev.ItemCompleted))
    }
    assert {g["group_id"]: g["outcome"] for g in groups} == fates


def _flood(rollouts: int, turns: int, ts: float = 1000.0) -> list:
    """``rollouts`` rollouts of ``turns`` LLM calls each, all in one 10 s slice."""
    out: list = []
    for i in range(rollouts):
        rid, gid = f"r{i}", f"g{i // 8}"
        out.append(ev.RolloutStarted(ts=ts, rollout_id=rid, group_id=gid))
        for t in range(turns):
            out.append(ev.TurnFinished(ts=ts + 0.001 * t, rollout_id=rid, turn=t, latency_s=0.01 * ((i * 7 + t) % 997)))
        out.append(
            ev.RolloutFinished(
                ts=ts + 1,
                rollout_id=rid,
                group_id=gid,
                reward=((i * 13) % 101) / 100.0,
                turns_used=turns,
                finished_naturally=True,
            )
        )
    return out


def test_a_slice_keeps_a_bounded_sample_with_exact_count_and_mean_at_any_rate() -> None:
    """Session 24: each 10 s slice kept every reward and LLM latency of its 10 s (memory
    growing with the rate, for an hour of slices); now a bounded sample, count and mean exact."""
    from hermes_console.runtime.reservoir import RESERVOIR_SIZE

    events = _flood(rollouts=3000, turns=4)
    s = _state(events)
    (bucket,) = [b for b in s.history.buckets if b.rollouts]
    latencies = [e.latency_s for e in events if isinstance(e, ev.TurnFinished)]
    rewards = [e.reward for e in events if isinstance(e, ev.RolloutFinished)]
    assert (len(bucket.latencies.values), len(bucket.rewards.values)) == (RESERVOIR_SIZE, RESERVOIR_SIZE)
    assert (bucket.latencies.count, bucket.rewards.count) == (len(latencies), len(rewards))
    assert math.isclose(bucket.latencies.mean(), statistics.fmean(latencies))
    assert math.isclose(bucket.rewards.mean(), statistics.fmean(rewards))
    assert set(bucket.latencies.values) <= set(latencies)  # a sample of what came, nothing else
    # a uniform sample of 1024 out of 12,000: its median within a few points of the true one
    true_p50 = statistics.median(latencies)
    assert abs(statistics.median(bucket.latencies.values) - true_p50) < 0.1 * (max(latencies) - min(latencies))
    # replaying the same events draws the same sample
    again = _state(events)
    (b2,) = [b for b in again.history.buckets if b.rollouts]
    assert list(b2.latencies.values) == list(bucket.latencies.values)


def test_a_slice_under_the_bound_keeps_every_value_exactly() -> None:
    events = _flood(rollouts=100, turns=4)
    s = _state(events)
    (bucket,) = [b for b in s.history.buckets if b.rollouts]
    assert sorted(bucket.latencies.values) == sorted(e.latency_s for e in events if isinstance(e, ev.TurnFinished))
    assert sorted(bucket.rewards.values) == sorted(e.reward for e in events if isinstance(e, ev.RolloutFinished))


def test_group_member_lists_are_bounded_by_rollouts_not_groups(monkeypatch) -> None:
    """Session 24: the member lists were bounded by MAX_LABELS *groups*, so a run kept up to
    MAX_LABELS x group_size rollout ids (160,000 at 8). Now by MAX_LABELS ids, oldest group
    first, the labels and siblings of recent rollouts unchanged."""
    monkeypatch.setattr(history_module, "MAX_LABELS", 100)
    s = ConsoleState()
    for g in range(60):
        gid = f"group-{g}"
        s.apply(rev.ItemReceived(ts=float(g), group_id=gid))
        for r in range(8):
            s.apply(ev.RolloutStarted(ts=float(g), rollout_id=f"{gid}-x{r}", group_id=gid))
    h = s.history
    kept = sum(len(ids) for ids in h._group_rollouts.values())
    assert kept <= 100 and kept == h._members
    assert len(h._received_at) <= len(h.group_labels)
    assert h.label_of("group-59-x3") == "g0060-r3"
    assert h.siblings("group-59-x3") == [f"group-59-x{r}" for r in range(8)]
    assert "group-0" not in h._group_rollouts  # the oldest went first
