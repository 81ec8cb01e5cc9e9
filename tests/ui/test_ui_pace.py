"""The UI wakes only when something is due: while the budget throttles, no tick at the base
rate finds nothing to do (each one is CPU a busy env loses, BENCHMARKS P1), and a key still
shows its effect on the next base tick."""

from __future__ import annotations

import asyncio
import time

from hermes_console.ui.config import ConsoleConfig
from hermes_console_dev.fake_runtime import FakeRuntime
from tests.ui.helpers import make_app


async def test_a_throttled_ui_ticks_only_when_a_drain_or_redraw_is_due(main_events) -> None:
    runtime = FakeRuntime(main_events)
    config = ConsoleConfig(tick_hz=4.0, drain_hz=20.0, max_redraw_interval_s=2.0, max_drain_interval_s=0.5)
    app = make_app(runtime, config=config)
    ticks: list[float] = []
    original = app.tick

    def counted() -> None:
        ticks.append(time.monotonic())
        original()

    app.tick = counted  # type: ignore[method-assign]
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        # The UI thread "uses" a whole core and so does the env: the budget throttles to its caps.
        app.budget._cpu = time.monotonic
        app.budget._others = time.monotonic
        for _ in range(200):
            if (app.budget.drain_s, app.budget.redraw_s) == (0.5, 2.0):
                break
            await pilot.pause(0.1)
        assert (app.budget.drain_s, app.budget.redraw_s) == (0.5, 2.0)
        start = len(ticks)
        began = time.monotonic()
        await pilot.pause(2.0)
        spent = time.monotonic() - began
        # At the caps a drain is due every 0.5 s and the budget's window ends every second:
        # ~6 ticks in 2 s (a 20 Hz timer: 40). Counted against the time that really passed.
        assert len(ticks) - start <= 4 * spent + 2, (len(ticks) - start, spent)

        # A key while throttled: the next tick comes at the base rate, not at the throttled pace,
        # and it redraws.
        loop = asyncio.get_running_loop()
        app._kick()  # what every key does (on_key) before it is handled
        assert app._pace_handle is not None
        assert app._pace_handle.when() - loop.time() <= app.pace_s
        redraws: list[float] = []
        redraw = app._redraw

        def counted_redraw(**kwargs: bool) -> None:
            redraws.append(time.monotonic())
            redraw(**kwargs)

        app._redraw = counted_redraw  # type: ignore[method-assign]
        key_at = len(ticks)
        await pilot.press("x")  # bound to nothing: the tick's redraw is the only one
        for _ in range(100):
            if redraws:
                break
            await pilot.pause(0.01)
        assert redraws
        assert len(ticks) - key_at <= 2
