"""The runtime→UI channel under floods: bounded by count, every counter exact.

A generator emits the event mix of concurrent agent rollouts (turns, tool calls with
errors and start-less finishes, sandbox commands with timeouts, cancellations with
calls still open, lag, server stats with a counter reset, error logs) and counts what
it emitted itself. Three views must agree: the generator's own counts, the reducer fed
every event directly, and the reducer fed through the coalescing queue by a consumer
that takes 10× fewer items per step than are pushed (and one that stalls).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import pytest

from environments import events as ev
from hermes_console.runtime import events as rev
from hermes_console.runtime.coalesce import Coalesced
from hermes_console.runtime.queue import EventQueue
from hermes_console.runtime.state import ConsoleState


@dataclass
class Emitted:
    """What the generator sent, counted by the generator (the independent oracle)."""

    received: int = 0
    completed: int = 0
    dropped: Counter = field(default_factory=Counter)
    failed: int = 0
    cancelled: int = 0
    tool_starts: int = 0
    startless_finishes: int = 0
    tool_errors: int = 0
    api_errors: int = 0
    commands: Counter = field(default_factory=Counter)
    events: int = 0


@dataclass
class _Rollout:
    rid: str
    gid: str
    turn: int = 0
    open_calls: list[str] = field(default_factory=list)
    stage: str = "start"
    calls_left: int = 0


def generate(seed: int, groups: int, group_size: int = 4, concurrent_groups: int = 8) -> tuple:
    rng = random.Random(seed)
    out: list[Any] = []
    em = Emitted()
    t = [1000.0]

    def emit(e: Any) -> None:
        out.append(e)
        em.events += 1

    def ts() -> float:
        t[0] += 0.001
        return t[0]

    emit(
        rev.RunConfigured(
            ts=ts(),
            env_name="flood",
            mode="process",
            phase=1,
            group_size=group_size,
            max_in_flight=concurrent_groups,
            worker_timeout_s=60.0,
        )
    )
    emit(rev.RuntimeStatus(ts=ts(), status="running"))
    live: dict[str, list[_Rollout]] = {}
    next_group = 0
    server_errors = 0
    while next_group < groups or live:
        while next_group < groups and len(live) < concurrent_groups:
            gid = f"g{next_group}"
            next_group += 1
            emit(rev.ItemReceived(ts=ts(), group_id=gid, item_summary=f"item {gid}"))
            em.received += 1
            emit(ev.GroupStarted(ts=ts(), group_id=gid, item_summary=f"item {gid}", group_size=group_size, phase=1))
            live[gid] = [_Rollout(f"{gid}-r{i}", gid) for i in range(group_size)]
        gid = rng.choice(sorted(live))
        rollouts = live[gid]
        if rng.random() < 0.004:  # operator cancels the group: calls may be open
            emit(rev.ItemCancelled(ts=ts(), group_id=gid))
            em.cancelled += 1
            for r in rollouts:
                if r.stage not in ("start", "done"):
                    emit(ev.SandboxClosed(ts=ts(), task_id=r.rid, reason="cleanup"))
            del live[gid]
            continue
        active = [r for r in rollouts if r.stage != "done"]
        if not active:
            scores = [rng.choice([0.0, 1.0]) for _ in rollouts]
            emit(ev.GroupFinished(ts=ts(), group_id=gid, scores=scores))
            roll = rng.random()
            if roll < 0.1:
                emit(ev.ItemDropped(ts=ts(), group_id=gid, reason="identical_scores"))
                em.dropped["identical_scores"] += 1
            elif roll < 0.13:
                emit(ev.ItemFailed(ts=ts(), group_id=gid, error="boom"))
                em.failed += 1
            else:
                emit(rev.ItemCompleted(ts=ts(), group_id=gid, scores=scores, step=em.completed + 1))
                em.completed += 1
            del live[gid]
            continue
        _advance(rng.choice(active), rng, emit, ts, em)
        # background noise the UI sees at any rate
        noise = rng.random()
        if noise < 0.03:
            emit(rev.LoopLag(ts=ts(), lag_ms=rng.random() * 300))
        elif noise < 0.05:
            server_errors = 0 if rng.random() < 0.05 else server_errors + rng.randrange(3)  # 0: a rebuilt manager
            emit(
                rev.ServerStats(
                    ts=ts(), phase=1, servers=[{"url": "http://s1", "healthy": True, "transport_errors": server_errors}]
                )
            )
        elif noise < 0.06:
            emit(rev.LogRecord(ts=ts(), level=rng.choice(["INFO", "ERROR"]), logger="x", message="m"))
    return out, em


def _advance(r: _Rollout, rng: random.Random, emit: Any, ts: Any, em: Emitted) -> None:
    if r.stage == "start":
        emit(ev.RolloutStarted(ts=ts(), rollout_id=r.rid, group_id=r.gid))
        emit(ev.SandboxCreated(ts=ts(), task_id=r.rid, backend="local", lifetime_s=300.0))
        r.stage = "turn"
    elif r.stage == "turn":
        r.turn += 1
        emit(ev.TurnStarted(ts=ts(), rollout_id=r.rid, turn=r.turn))
        if rng.random() < 0.02:
            emit(ev.TurnFinished(ts=ts(), rollout_id=r.rid, turn=r.turn, latency_s=0.1, error="api down"))
            em.api_errors += 1
            r.stage = "finish"
            return
        calls = 0 if r.turn >= 4 else rng.choice([1, 1, 2])
        emit(
            ev.TurnFinished(
                ts=ts(),
                rollout_id=r.rid,
                turn=r.turn,
                latency_s=0.1,
                content=rng.choice(["", "ok"]),
                reasoning=rng.choice([None, "thinking"]),
                tool_calls=calls,
            )
        )
        r.calls_left = calls
        r.stage = "calls" if calls else "finish"
    elif r.stage == "calls":
        if r.open_calls and (r.calls_left == 0 or rng.random() < 0.5):
            call_id = r.open_calls.pop(0)
            timed_out = rng.random() < 0.05
            emit(
                ev.SandboxCommandFinished(
                    ts=ts(),
                    task_id=r.rid,
                    command="ls",
                    exit_code=124 if timed_out else 0,
                    duration_s=0.01,
                    timed_out=timed_out,
                )
            )
            em.commands[r.rid] += 1
            error = "timeout" if timed_out else ("exit 1" if rng.random() < 0.1 else None)
            em.tool_errors += bool(error)
            emit(
                ev.ToolCallFinished(
                    ts=ts(),
                    rollout_id=r.rid,
                    turn=r.turn,
                    call_id=call_id,
                    tool_name="terminal",
                    duration_s=0.01,
                    result_head="out",
                    error=error,
                    error_kind="timeout" if timed_out else ("tool_error" if error else None),
                )
            )
        elif r.calls_left:
            r.calls_left -= 1
            call_id = f"c{r.turn}-{r.calls_left}"
            if rng.random() < 0.05:  # unknown tool: answered without a start event
                emit(
                    ev.ToolCallFinished(
                        ts=ts(),
                        rollout_id=r.rid,
                        turn=r.turn,
                        call_id=call_id,
                        tool_name="nope",
                        duration_s=0.0,
                        error="unknown tool",
                        error_kind="unknown_tool",
                    )
                )
                em.startless_finishes += 1
                em.tool_errors += 1
                return
            emit(
                ev.ToolCallStarted(
                    ts=ts(), rollout_id=r.rid, turn=r.turn, call_id=call_id, tool_name="terminal", args_head="ls"
                )
            )
            em.tool_starts += 1
            emit(ev.SandboxCommandStarted(ts=ts(), task_id=r.rid, command="ls", timeout_s=30.0))
            r.open_calls.append(call_id)
        if not r.open_calls and not r.calls_left:
            r.stage = "turn"
    elif r.stage == "finish":
        # A command outside any tool call (the reward check) may time out too.
        timed_out = rng.random() < 0.05
        emit(ev.SandboxCommandStarted(ts=ts(), task_id=r.rid, command="test -f done", timeout_s=5.0))
        emit(
            ev.SandboxCommandFinished(
                ts=ts(), task_id=r.rid, command="test -f done", exit_code=0, duration_s=0.01, timed_out=timed_out
            )
        )
        em.commands[r.rid] += 1
        emit(
            ev.RolloutFinished(
                ts=ts(),
                rollout_id=r.rid,
                group_id=r.gid,
                reward=1.0,
                turns_used=r.turn,
                finished_naturally=True,
                token_count=10,
                trainable_tokens=5,
                assistant_turns=r.turn,
                trainable_turns=r.turn,
            )
        )
        emit(ev.SandboxClosed(ts=ts(), task_id=r.rid, reason="cleanup"))
        r.stage = "done"


def counters(s: ConsoleState) -> dict[str, Any]:
    """Everything the console counts (what must stay exact)."""
    return {
        "accounting": asdict(s.accounting),
        "step": s.step,
        "status": s.status,
        "tool_calls_total": s.tool_calls_total,
        "tool_errors_total": s.tool_errors_total,
        "errors_by_kind": dict(+s.errors_by_kind),
        "stream_seq": s.stream_seq,
        "tool_seq": s.tool_seq,
        "events_applied": s.events_applied,
        "version": s.version,
        "sections": (s.groups_version, s.tools_version, s.sandboxes_version, s.rewards_version, s.servers_version),
        "rollouts_finished": s.rollouts_finished,
        "groups_scored": s.groups_scored,
        "identical": s.identical_score_groups,
        "data_health": asdict(s.data_health),
        "sandboxes": {
            k: (v.state, v.commands, v.timeouts, v.last_exit_code, v.running_command) for k, v in s.sandboxes.items()
        },
        "sandboxes_closed_by": dict(s.sandboxes_closed_by),
        "rollouts": {k: (v.status, v.current_tool, v.tool_errors, v.turn) for k, v in s.rollouts.items()},
        "groups": {k: (v.status, v.stage, v.rollouts_done) for k, v in s.groups.items()},
        "open_tools": sorted(s._open_tools),
        "loop_lag": (s.loop_lag_ms, s.loop_lag_max_ms),
        "servers": s.servers,
        "logs": [(x.level, x.ts) for x in s.logs],
        "first_last_ts": (s.first_ts, s.last_ts),
    }


def feed(
    events: list[Any],
    q: EventQueue,
    state: ConsoleState,
    push_per_step: int,
    drain_per_step: int | None,
    stall_every: int = 0,
) -> int:
    """Push ``push_per_step`` events, then let the consumer take ``drain_per_step`` items.
    Returns the largest queue depth seen. ``stall_every``: skip every n-th drain (a stuck UI)."""
    deepest = 0
    step = 0
    for i in range(0, len(events), push_per_step):
        for e in events[i : i + push_per_step]:
            q.push(e)
        deepest = max(deepest, len(q))
        step += 1
        if stall_every and step % stall_every:
            continue
        state.apply_all(q.drain(drain_per_step))
    while len(q):
        state.apply_all(q.drain(drain_per_step))
    return deepest


@pytest.mark.parametrize("seed,take", [(1, None), (2, None), (3, 40)])
def test_flood_through_coalescing_queue_keeps_every_counter_exact(seed: int, take: int | None) -> None:
    """400 events pushed per UI step (10x the 40 lines a flooded redraw draws); the consumer takes
    everything waiting (``take`` None, like the UI's drain step) or only 40 items (10x fewer)."""
    events, emitted = generate(seed, groups=300)
    direct = ConsoleState()
    direct.apply_all(events)
    # The reducer fed directly matches what the generator counted itself.
    acc = direct.accounting
    assert (acc.received, acc.completed, dict(acc.dropped), acc.failed, acc.cancelled) == (
        emitted.received,
        emitted.completed,
        dict(emitted.dropped),
        emitted.failed,
        emitted.cancelled,
    )
    assert acc.in_flight == 0
    assert direct.events_applied == emitted.events == len(events)

    q = EventQueue(maxlen=50_000, coalesce_at=64)
    via_queue = ConsoleState()
    deepest = feed(events, q, via_queue, push_per_step=400, drain_per_step=take)
    assert q.dropped == 0 and q.pushed == len(events)
    assert q.coalesced > len(events) // 2, "most events should have been folded"
    assert counters(via_queue) == counters(direct)
    # The generator's own count of tool calls: every start, plus finishes that came without one.
    assert via_queue.tool_calls_total == emitted.tool_starts + emitted.startless_finishes
    assert via_queue.tool_errors_total == emitted.tool_errors
    assert via_queue.errors_by_kind["api_error"] == emitted.api_errors
    assert {k: v.commands for k, v in via_queue.sandboxes.items()} == {
        k: v.commands for k, v in direct.sandboxes.items()
    }
    assert sum(v.commands for v in direct.sandboxes.values()) <= sum(emitted.commands.values())
    # Lines shown are the reducer's lines (same time, rollout, group, text), just fewer: a segment
    # is applied before lifecycle events about other rollouts, so numbering may interleave differently.
    oldest = direct.stream[0].ts
    real = {(e.ts, e.rollout_id, e.group_id, e.kind, e.text) for e in direct.stream}
    shown = [e for e in via_queue.stream if e.ts >= oldest]
    assert len(shown) > 100 and all((e.ts, e.rollout_id, e.group_id, e.kind, e.text) in real for e in shown)
    # Bounded by count: folded events take no queue slots; what waits is the lifecycle
    # events not yet taken (each may close a segment: x2) on top of coalesce_at.
    per_step = [sum(1 for e in events[i : i + 400] if not isinstance(e, _FOLDABLE)) for i in range(0, len(events), 400)]
    if take is None:
        assert deepest <= 64 + 2 * max(per_step) + 1
    else:
        # A consumer 10x behind in items: the backlog is the events that cannot fold.
        assert deepest <= 64 + 2 * (len(events) - q.coalesced) + 1 and deepest < len(events) // 2


def test_stalled_consumer_queue_is_bounded_by_count() -> None:
    """Nobody drains during a long flood: folded events take no slots, so the queue holds the
    events that cannot fold (lifecycle, a finish whose start was queued earlier) and their
    segments; the state built from it is exact."""
    events, _ = generate(7, groups=400)
    q = EventQueue(maxlen=100_000, coalesce_at=256)
    for e in events:
        q.push(e)
    assert q.dropped == 0
    unfolded = len(events) - q.coalesced
    assert len(q) <= 256 + 2 * unfolded + 1
    assert len(q) < 0.3 * len(events), (len(q), len(events))  # ~0.21 here: lifecycle events are ~0.17
    state = ConsoleState()
    state.apply_all(q.drain())
    direct = ConsoleState()
    direct.apply_all(events)
    assert counters(state) == counters(direct)


def test_hard_cap_refuses_and_counts() -> None:
    """At the hard cap nothing grows: refused lifecycle events are counted, never silently lost."""
    events, _ = generate(11, groups=200)
    q = EventQueue(maxlen=500, coalesce_at=100)
    for e in events:
        q.push(e)
    assert len(q) <= 500
    assert q.dropped > 0 and q.pushed == len(events)
    items = q.drain()
    folded = sum(x.count for x in items if isinstance(x, Coalesced))
    plain = sum(1 for x in items if not isinstance(x, Coalesced))
    assert folded == q.coalesced
    assert folded + plain + q.dropped == len(events)  # every event accounted for


_FOLDABLE = (
    ev.TurnStarted,
    ev.TurnFinished,
    ev.ToolCallStarted,
    ev.ToolCallFinished,
    ev.SandboxCommandStarted,
    ev.SandboxCommandFinished,
    rev.LoopLag,
    rev.ServerStats,
    rev.LogRecord,
    rev.EvalProgress,
)


def test_headless_printer_sees_error_logs_folded_into_a_segment() -> None:
    from hermes_console.runtime.headless import _records

    q = EventQueue(coalesce_at=0)  # fold from the first event
    q.push(rev.LogRecord(level="ERROR", logger="env", message="reward server down"))
    q.push(rev.LogRecord(level="INFO", logger="env", message="fine"))
    items = q.drain()
    assert len(items) == 1 and isinstance(items[0], Coalesced)
    assert [r.message for r in _records(items)] == ["reward server down", "fine"]


def test_push_below_the_threshold_does_no_folding_work_and_a_whole_drain_seals_segments(monkeypatch) -> None:
    """The runtime thread's cost (issue 16): while the UI keeps up (fewer than ``coalesce_at``
    waiting, no segment open) a push neither looks up the event's entity nor touches a segment;
    a drain of everything hands the segments over sealed, so later events never fold into them."""
    import hermes_console.runtime.queue as queue_mod

    events, _ = generate(5, groups=40)
    looked_up: list[Any] = []
    real_entity_of = queue_mod.entity_of
    monkeypatch.setattr(queue_mod, "entity_of", lambda e: looked_up.append(e) or real_entity_of(e))
    q = EventQueue(maxlen=50_000, coalesce_at=10**6)
    for e in events:
        q.push(e)
    assert looked_up == [] and q.coalesced == 0 and len(q) == len(events)
    direct = ConsoleState()
    direct.apply_all(q.drain())

    q = EventQueue(maxlen=50_000, coalesce_at=0)  # fold from the first event
    state = ConsoleState()
    half = len(events) // 2
    for e in events[:half]:
        q.push(e)
    first = q.drain()
    segments = [x for x in first if isinstance(x, Coalesced)]
    assert segments and all(s.drained for s in segments) and len(q) == 0
    counts = [s.count for s in segments]
    for e in events[half:]:
        q.push(e)
    assert [s.count for s in segments] == counts  # sealed: nothing folded into a drained segment
    state.apply_all(first)
    state.apply_all(q.drain())
    assert counters(state) == counters(direct)
