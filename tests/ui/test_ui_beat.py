"""The base rhythm: ``tick`` on a fixed grid of the loop's clock, as plain loop callbacks."""

from __future__ import annotations

import asyncio
import time

import pytest

from hermes_console_dev.fake_runtime import FakeRuntime
from tests.ui.helpers import make_app


async def test_beats_keep_to_a_fixed_grid_skip_what_a_slow_tick_missed_and_stop_with_the_app(main_events) -> None:
    app = make_app(FakeRuntime(main_events))
    beats: list[float] = []
    slow_ended: list[float] = []
    beat = app._beat

    def recorded() -> None:
        beats.append(app._next_beat or 0.0)  # the time this beat was due
        if len(beats) == 5:
            time.sleep(3.5 * app.pace_s)  # a tick that outlasts three beats
            slow_ended.append(asyncio.get_running_loop().time())
        beat()

    app._beat = recorded  # type: ignore[method-assign]
    async with app.run_test(size=(160, 45)) as pilot:
        for _ in range(400):
            if len(beats) >= 10:
                break
            await pilot.pause(0.02)
        assert len(beats) >= 10
        steps = [(b - a) / app.pace_s for a, b in zip(beats, beats[1:])]
        # Every beat sits on the grid, however long the ticks took (no drift) ...
        assert all(step == pytest.approx(round(step), abs=1e-6) for step in steps), steps
        # ... at least one beat apart, and the beats the slow tick overran are skipped: the next
        # one is due after it ended, not at once to catch up.
        assert all(round(step) >= 1 for step in steps), steps
        assert beats[5] > slow_ended[0] and round(steps[4]) >= 4, (steps, beats[5] - slow_ended[0])
    await asyncio.sleep(2 * app.pace_s)  # a beat already due while the app closed may still run
    count = len(beats)
    await asyncio.sleep(5 * app.pace_s)
    assert len(beats) == count and app._beat_handle is None  # the app is gone: the beats stopped
