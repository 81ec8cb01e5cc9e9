"""A process-mode run with injected faults: the accounting identity holds, every
kept group is in the jsonl, every dropped one in dropped.jsonl, the html is
written, and replaying the recorded log gives exactly the live final state."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from hermes_console.runtime.replay import ReplaySource
from hermes_console.runtime.state import ConsoleState
from tests.runtime.runtime_helpers import identity, make_spec


def test_faulty_run_accounts_everything_and_replays_exactly(sim, tmp_path, live):
    sim.set_faults(http_500=0.05, malformed_tool_json=0.05, unknown_tool=0.05, hang=0.02)
    log = tmp_path / "events.jsonl.gz"
    try:
        spec = make_spec(
            sim,
            tmp_path,
            "--env.total_steps",
            "12",
            "--env.ensure_scores_are_not_same",
            "true",  # some groups get dropped
            "--env.worker_timeout",
            "4",  # hung requests become timeouts
            max_in_flight=6,
            record_path=str(log),
        )
        p = live(spec, exit_when_finished=True)
        p.until(lambda s: s.status == "finished", 90, "run finished")
        p.host.join(15)
        p.pump()
    finally:
        sim.set_faults(replace=True)

    s = p.state
    acc = s.accounting
    assert identity(s, p.events) is None, identity(s, p.events)
    assert acc.in_flight == 0
    assert acc.completed + acc.dropped_total + acc.failed == 12
    assert acc.received == 12 + acc.cancelled
    assert acc.dropped_total + acc.failed > 0  # the faults and the identical-score rule bit
    # faults were really injected and surfaced somewhere
    assert sum(v for k, v in s.errors_by_kind.items() if k.startswith("tool:")) > 0

    # every kept group is on disk, in completion order, with the same scores
    jsonl = Path(s.run.jsonl_path)
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    completed = p.of("item_completed")
    assert len(rows) == len(completed) == acc.completed
    for row, ev in zip(rows, completed):
        assert [float(x) for x in row["scores"]] == ev.scores
        assert len(row["tokens"]) == len(row["masks"]) == 4
    # every dropped group is kept too, with its reason
    dropped_path = jsonl.with_name("dropped.jsonl")
    if acc.dropped_total:
        dropped = [json.loads(line) for line in dropped_path.read_text().splitlines()]
        assert Counter(d["reason"] for d in dropped) == Counter(acc.dropped)
        assert {d["group_id"] for d in dropped} == {e.group_id for e in p.of("item_dropped")}
    failed = p.of("item_failed")
    assert all(e.error for e in failed)
    assert all(e.error_kind in ("timeout", "exception") for e in failed)
    if acc.completed:
        assert jsonl.with_suffix(".html").exists()

    # rollouts.jsonl: every finished rollout with its score, every group with its fate
    lines = [json.loads(line) for line in jsonl.with_name("rollouts.jsonl").read_text().splitlines()]
    finished = {e.rollout_id: e for e in p.of("rollout_finished")}
    rollouts = {r["rollout_id"]: r for r in lines if r["kind"] == "rollout"}
    assert set(rollouts) == set(finished)
    assert all(rollouts[k]["score"] == e.reward and rollouts[k]["turns"] == e.turns_used for k, e in finished.items())
    fates = Counter(r["outcome"] for r in lines if r["kind"] == "group")
    assert (fates["kept"], fates["dropped"], fates["failed"]) == (acc.completed, acc.dropped_total, acc.failed)

    # replay: the recorded log folds into exactly the same state
    replay = ReplaySource(str(log))
    replay.start()
    b = ConsoleState()
    b.apply_all(replay.drain())
    assert replay.done.done()
    assert b.snapshot() == s.snapshot()
    assert b.events_applied == s.events_applied
