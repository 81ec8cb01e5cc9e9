"""A drain step stops when its CPU budget is spent, even when the queue holds folded segments.

A ``Coalesced`` segment stands for hundreds of events: a step sized by items alone met
several of them and overran its budget many times (the P3 flood's worst ticks). The
step's CPU clock is injected here (a fake: every applied event costs a fixed 20 µs), so
the test counts what a step took, never timings. The oracle for "nothing lost" is the
reducer fed every event directly (and the event generator's own counts).
"""

from __future__ import annotations

from typing import Any

from hermes_console.runtime.coalesce import Coalesced
from hermes_console.runtime.queue import EventQueue
from hermes_console.runtime.state import ConsoleState
from hermes_console.ui.app import CATCH_UP_MAX, ConsoleApp
from hermes_console.ui.config import ConsoleConfig
from tests.runtime.test_queue_coalesce import counters, generate

EVENT_COST_S = 20e-6  # fake CPU per applied event


class QueueRuntime:
    """Just what a drain step uses of a runtime: the real coalescing queue behind ``drain``."""

    is_live = True

    def __init__(self, queue: EventQueue) -> None:
        self.queue = queue
        self.drain_calls = 0

    def drain(self, max_events: int | None = None) -> list[Any]:
        self.drain_calls += 1
        return self.queue.drain(max_events)


def test_drain_step_stops_within_its_cpu_budget_on_coalesced_segments_and_loses_nothing() -> None:
    events, emitted = generate(5, groups=300)
    q = EventQueue(maxlen=50_000, coalesce_at=0)  # a flooded queue: every foldable event folds
    for e in events:
        q.push(e)
    segments = [len(item.kept_lines) for item in list(q._q) if isinstance(item, Coalesced)]
    big = max(item.count for item in q._q if isinstance(item, Coalesced))
    assert len(segments) > 50 and big >= 20, (len(segments), big)  # the queue holds many (large) segments

    config = ConsoleConfig(drain_budget_ms=8.0)
    app = ConsoleApp(QueueRuntime(q), config=config, start_runtime=False)  # type: ignore[arg-type]
    # The fake UI-thread CPU clock: what the reducer applied so far, at a fixed cost per event.
    app.cpu_clock = lambda: app.state.events_applied * EVENT_COST_S
    app.wall_clock = lambda: 0.0  # steps on time: no catching up (see the next test)
    budget_s = config.drain_budget_ms / 1000.0

    steps = 0
    while len(q) or app._carry:
        before = app.state.events_applied
        applied, _full = app._drain_step(app._step_budget_s())
        spent = (app.state.events_applied - before) * EVENT_COST_S
        assert applied == app.state.events_applied - before
        # Stops once the budget is spent: at most one item (a segment, or one check interval of
        # plain events) beyond it, not several segments' worth.
        assert spent <= budget_s + max(big, 64) * EVENT_COST_S, (steps, spent)
        steps += 1
        assert steps < 10_000
    # Several steps were needed (the old step took every segment at once: ~1,600 items).
    assert steps >= (len(events) * EVENT_COST_S) / (budget_s + big * EVENT_COST_S) - 1

    direct = ConsoleState()
    direct.apply_all(events)
    assert counters(app.state) == counters(direct)
    assert app.state.events_applied == emitted.events == len(events)
    assert app.state.accounting.completed == emitted.completed
    assert app.state.tool_calls_total == emitted.tool_starts + emitted.startless_finishes


def _late_app(seed: int) -> tuple[ConsoleApp, list[float], float]:
    """An app over a flooded queue, with fake clocks: CPU = events applied × EVENT_COST_S, and a
    wall clock the test moves (``wall[0]``). Also the fake CPU of the biggest folded segment."""
    events, _ = generate(seed, groups=300)
    q = EventQueue(maxlen=50_000, coalesce_at=0)
    for e in events:
        q.push(e)
    app = ConsoleApp(QueueRuntime(q), config=ConsoleConfig(drain_budget_ms=8.0), start_runtime=False)  # type: ignore[arg-type]
    app.cpu_clock = lambda: app.state.events_applied * EVENT_COST_S
    wall = [0.0]
    app.wall_clock = lambda: wall[0]
    biggest = max(item.count for item in q._q if isinstance(item, Coalesced)) * EVENT_COST_S
    return app, wall, biggest


def test_a_late_drain_step_with_a_backlog_catches_up_by_at_most_a_few_budgets() -> None:
    """Ticks that run late (the loop was busy drawing) leave the queue growing unless a step that
    is late with a backlog applies more: as much as the time it missed, capped."""
    app, wall, biggest = _late_app(6)
    budget_s = app.config.drain_budget_ms / 1000.0

    def step() -> float:
        before = app.state.events_applied
        app._drain_step(app._step_budget_s())  # one step given all it is owed (the tick splits it)
        return (app.state.events_applied - before) * EVENT_COST_S

    assert step() <= budget_s + biggest  # the first step: its own budget
    wall[0] += 1.0  # the next tick runs a second late: far more than the cap's worth
    spent = step()
    assert budget_s * 2 < spent <= CATCH_UP_MAX * budget_s + biggest
    wall[0] += app.budget.base_drain_s  # on time again: one budget
    assert step() <= budget_s + biggest


def test_a_late_tick_catches_up_in_callbacks_of_one_budget_each_and_draws_after_them() -> None:
    """The tick itself applies one budget; the catching up it is owed runs as separate
    callbacks of one budget each, and a redraw due in a tick that drained runs as its own
    callback too: a key pressed meanwhile waits for one short step, never for all of them."""
    app, wall, biggest = _late_app(7)
    scheduled: list[tuple[Any, tuple[Any, ...]]] = []
    app._soon = lambda callback, *args: scheduled.append((callback, args))  # type: ignore[method-assign]
    redraws: list[int] = []
    app._redraw = lambda **_kw: redraws.append(app.state.events_applied)  # type: ignore[method-assign]
    budget_s = app.config.drain_budget_ms / 1000.0

    def one(call: Any, *args: Any) -> float:
        before = app.state.events_applied
        call(*args)
        return (app.state.events_applied - before) * EVENT_COST_S

    app.budget._last_drain = app.budget._last_redraw = -1e18  # both due
    assert one(app.tick) <= budget_s + biggest
    assert redraws == [] and [cb for cb, _ in scheduled] == [app._redraw]  # drawn after the step
    scheduled.clear()
    wall[0] += 1.0  # the next tick is a second late: owed CATCH_UP_MAX budgets
    app.budget._last_drain = -1e18
    app.budget._last_redraw = 1e18  # no redraw this time
    assert one(app.tick) <= budget_s + biggest
    chunks = 1
    while scheduled:
        callback, args = scheduled.pop(0)
        assert callback == app._catch_up
        assert one(callback, *args) <= budget_s + biggest  # each callback: one budget
        chunks += 1
    assert chunks == CATCH_UP_MAX  # all that was owed, in separate steps


def test_default_drain_steps_fit_inside_the_interpreters_switch_interval() -> None:
    """While the runtime's thread is busy, a UI stretch longer than the switch interval is cut:
    the runtime asks for the GIL after that long, and the UI then waits as long again or more
    for it back (8 ms steps at 20 Hz took 3-10x their CPU in wall time in P3's flood). A default
    step fits inside one interval, and the drain's capacity (steps per second x budget) stays
    what keeps the queue bounded in a flood."""
    import sys

    config = ConsoleConfig()
    assert config.drain_budget_ms < 1000.0 * sys.getswitchinterval()
    assert config.flood_drain_hz * config.drain_budget_ms >= 160.0  # ms of reducer CPU per second
