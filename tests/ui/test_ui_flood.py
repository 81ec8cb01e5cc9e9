"""Keys stay responsive while thousands of events arrive: per-tick work is capped."""

from __future__ import annotations

import asyncio

from hermes_console.ui.config import ConsoleConfig
from hermes_console.ui.screens.confirm import ConfirmModal
from hermes_console.ui.widgets.status_bar import StatusBar
from hermes_console_dev.fake_runtime import FakeRuntime
from tests.ui.eventlog import flood
from tests.ui.helpers import make_app


async def test_key_press_is_handled_within_a_few_ticks_during_a_flood(main_events) -> None:
    runtime = FakeRuntime(main_events)
    # One rhythm of 20 drains a second (also in a flood), so the backlog outlasts the test's steps.
    config = ConsoleConfig(tick_hz=20.0, max_events_per_tick=1_000, flood_drain_hz=20.0)
    app = make_app(runtime, config=config)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        runtime.feed(flood(200_000))  # lasts ~10 s at 20 drains of 1,000 per second
        await pilot.pause()
        drains_before = runtime.drain_calls
        await pilot.press("p")
        for _ in range(200):  # bounded by ticks, not wall time: a loaded machine only slows both
            if "pause" in runtime.names() or runtime.drain_calls - drains_before > 10:
                break
            await pilot.pause(0.01)
        assert "pause" in runtime.names()
        # Handled within a few ticks, while most of the flood was still queued:
        # keys never wait for the backlog. Counted when the command arrived: Pilot.press
        # itself waits for the app to go idle, and cheap ticks keep running meanwhile.
        assert runtime.drains_at_call[runtime.names().index("pause")] - drains_before <= 10
        assert runtime.backlog > 25_000
        # Busy and far over the UI's CPU budget (folding 1,000 events a step, no queue to fold
        # them): the UI spaces its redraws out and the status bar says so.
        for _ in range(400):
            if app.budget.throttled and "UI throttled" in app.screen.query_one(StatusBar)._rendered[0]:
                break
            await pilot.pause(0.05)
        assert app.budget.throttled, (app.budget.used_share, app.budget.redraw_s)
        assert "UI throttled" in app.screen.query_one(StatusBar)._rendered[0]
        # Throttled redraws update a few panels per tick, least recently drawn first: every
        # panel the flood changes (groups, turns, tools, sandboxes) is still drawn.
        screen = app.screen
        start = screen._redraws
        for _ in range(400):
            if all(screen._drawn_at.get(p, -1) >= start for p in ("groups", "turns", "tools", "sandboxes")):
                break
            await pilot.pause(0.05)
        assert all(screen._drawn_at.get(p, -1) >= start for p in ("groups", "turns", "tools", "sandboxes")), (
            start,
            screen._drawn_at,
        )
        # A modal opens and answers while the flood continues.
        drains_before = runtime.drain_calls
        await pilot.press("c")
        for _ in range(200):
            if isinstance(app.screen, ConfirmModal) or runtime.drain_calls - drains_before > 10:
                break
            await pilot.pause(0.01)
        assert isinstance(app.screen, ConfirmModal)
        await pilot.press("n")
        await pilot.pause()
        assert runtime.backlog > 0
        # Every tick applies at most max_events_per_tick events.
        applied, drains = app.state.events_applied, runtime.drain_calls
        for _ in range(500):  # drains are spaced out by the UI's CPU budget in a flood: wait for two
            await pilot.pause(0.02)
            if runtime.drain_calls - drains >= 2:
                break
        ticks = runtime.drain_calls - drains
        assert 0 < app.state.events_applied - applied <= ticks * config.max_events_per_tick


async def test_the_fast_drain_rhythm_runs_only_while_a_backlog_waits(main_events) -> None:
    """Short drain steps need a faster rhythm to keep up with a flood, but a timer at that rate
    costs CPU all the time (P1's UI share rose by a third): it runs while a step leaves a
    backlog, and stops once the queue is drained."""
    runtime = FakeRuntime(main_events)
    app = make_app(runtime, config=ConsoleConfig(drain_budget_ms=1.0))
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        assert app.flood_rhythm is False  # idle: the base rhythm only
        runtime.feed(flood(30_000))
        for _ in range(400):
            if app.flood_rhythm:
                break
            await pilot.pause(0.01)
        assert app.flood_rhythm and runtime.backlog > 0
        for _ in range(3000):  # bounded by steps, not a timing: a slow machine only takes longer
            if runtime.backlog == 0 and not app.flood_rhythm:
                break
            await pilot.pause(0.01)
        assert runtime.backlog == 0 and not app.flood_rhythm
        assert app.state.events_applied >= 30_000  # all of it applied


async def test_drain_steps_and_redraws_run_as_loop_turns_not_as_app_messages(main_events) -> None:
    """Catch-up steps and the redraw after a drain are scheduled on the event loop: the app's
    message queue (where keys wait) never holds them. A failing one is reported as Textual
    reports a failing callback, and none runs once the app is exiting."""
    runtime = FakeRuntime(main_events)
    app = make_app(runtime)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        order: list[str] = []

        def step(n: int) -> None:
            order.append(f"step {n}")
            if n < 4:
                app._soon(step, n + 1)

        app._soon(step, 1)
        assert app._message_queue.qsize() == 0  # not an app message
        app.call_later(order.append, "message")  # e.g. a key: behind nothing of the chain
        for _ in range(50):
            if "step 4" in order and "message" in order:
                break
            await pilot.pause(0.01)
        assert order.index("message") < order.index("step 4"), order
        failures: list[BaseException] = []
        app._handle_exception = failures.append  # type: ignore[method-assign]
        app._soon(lambda: 1 / 0)
        for _ in range(50):
            if failures:
                break
            await pilot.pause(0.01)
        assert [type(f) for f in failures] == [ZeroDivisionError]
        app._exit = True
        app._soon(order.append, "after exit")
        await asyncio.sleep(0.05)
        app._exit = False
        assert "after exit" not in order
