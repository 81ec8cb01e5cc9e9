"""Replay controls: position in the status bar, pause, seek back / forward, speed.

Oracle: a ConsoleState fed directly with the log's first N events (read by the replay's
own reader) — after a seek the console shows exactly the state of that prefix."""

from __future__ import annotations

from hermes_console.runtime.replay import ReplaySource, read_events
from hermes_console.runtime.state import ConsoleState
from hermes_console.ui.app import ConsoleApp
from hermes_console.ui.config import ConsoleConfig
from hermes_console.ui.screens.main import MainScreen
from hermes_console.ui.widgets.status_bar import StatusBar
from tests.ui.eventlog import FIXTURES
from tests.ui.helpers import settle

LOG = FIXTURES / "phase_switch.jsonl"


async def _wait(pilot, pred, rounds: int = 600) -> None:
    for _ in range(rounds):  # bounded: a loaded machine drains slowly
        if pred():
            return
        await pilot.pause(0.05)
    raise AssertionError("replay did not get there")


def _prefix_state(n: int) -> dict:
    state = ConsoleState()
    state.apply_all(list(read_events(str(LOG)))[:n])
    return state.snapshot()


async def test_replay_seek_pause_and_speed() -> None:
    source = ReplaySource(str(LOG))
    events = list(read_events(str(LOG)))
    app = ConsoleApp(source, now=events[-1].ts, config=ConsoleConfig(tick_hz=20.0))
    async with app.run_test(size=(160, 45)) as pilot:
        await _wait(pilot, lambda: app.state.events_applied == len(events))
        status = app.screen.query_one(StatusBar)
        # drawn by the redraw after the last drain (a tick later on a loaded machine)
        await _wait(pilot, lambda: "100%" in str(status.render()))
        assert "REPLAY" in str(status.render())
        # back 10% of the log's time: the state is exactly that of the log's prefix
        await pilot.press("left_square_bracket")
        await _wait(
            pilot, lambda: source.position().pos == app.state.events_applied and isinstance(app.screen, MainScreen)
        )
        pos = source.position()
        span = pos.last_ts - pos.first_ts
        assert pos.paused and pos.pos < len(events)
        assert pos.ts <= pos.last_ts - 0.1 * span + 1e-6
        assert app.state.snapshot() == _prefix_state(pos.pos)
        await settle(pilot, 4)
        assert app.state.events_applied == pos.pos  # paused: nothing more comes
        await _wait(pilot, lambda: "PAUSED" in str(app.screen.query_one(StatusBar).render()))
        # once more back, then forward again: still exact prefixes
        await pilot.press("left_square_bracket")
        await _wait(pilot, lambda: source.position().pos == app.state.events_applied < pos.pos)
        back2 = source.position().pos
        assert app.state.snapshot() == _prefix_state(back2)
        await pilot.press("right_square_bracket")
        await _wait(pilot, lambda: source.position().pos == app.state.events_applied > back2)
        assert app.state.snapshot() == _prefix_state(source.position().pos)
        # speed: from "all at once" to a timed replay, then faster
        await pilot.press("minus")
        assert source.speed == 32.0
        await pilot.press("plus", "plus")
        assert source.speed == 128.0
        # p plays again (a replay has no intake to pause: p is the replay's own pause)
        await pilot.press("p")
        await settle(pilot)
        assert not source.paused
        await _wait(pilot, lambda: app.state.events_applied == len(events))
        assert app.state.snapshot() == _prefix_state(len(events))
