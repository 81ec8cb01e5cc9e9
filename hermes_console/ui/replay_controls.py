"""Replay controls for the console: position in the status bar, pause / play, seek, speed.

A mixin of :class:`~hermes_console.ui.app.ConsoleApp`, active when the runtime is a
:class:`~hermes_console.runtime.replay.ReplaySource` (it has ``seek``). A seek replays the
log from its start into a fresh state (the reducer only goes forward) and a fresh main
screen (its widgets remember what they drew).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from hermes_console.runtime.api import RuntimeAPI
from hermes_console.runtime.state import ConsoleState
from hermes_console.ui.format import bar, duration

if TYPE_CHECKING:  # typed as what it is mixed into, without importing the app at run time
    from textual.app import App

    from hermes_console.runtime.replay import ReplaySource

    _MixinBase = App[Any]
else:
    _MixinBase = object


class ReplayControls(_MixinBase):
    runtime: RuntimeAPI
    state: ConsoleState

    if TYPE_CHECKING:

        def _redraw(self, *, force: bool = False) -> None: ...  # ConsoleApp's

    def _replay_source(self) -> ReplaySource | None:
        """The log being replayed (it can seek), or None for a live run."""
        # Not imported yet: no runtime can be one (kept off the import path of a live console).
        replay = sys.modules.get("hermes_console.runtime.replay")
        return self.runtime if replay is not None and isinstance(self.runtime, replay.ReplaySource) else None

    def _replay_controls(self) -> bool:
        return self._replay_source() is not None

    def replay_note(self) -> str:
        """The replay's position for the status bar (empty for a live run)."""
        source = self._replay_source()
        if source is None:
            return ""
        pos = source.position()
        first, last, ts = pos.first_ts, pos.last_ts, pos.ts
        span = (last - first) if first is not None and last is not None else 0.0
        done = ((ts - first) / span) if span > 0 and ts is not None and first is not None else (1.0 if pos.pos else 0.0)
        speed = "all at once" if pos.speed is None else f"×{pos.speed:g}"
        state = "PAUSED" if pos.paused else "playing"
        at = duration((ts - first) if ts is not None and first is not None else 0.0)
        return (
            f"REPLAY {bar(done, 20)} {done:.0%}  {at} of {duration(span)}  event {pos.pos}/{pos.total}"
            f"  {speed}  {state}   p pause · [ ] seek 10% · - + speed · read-only"
        )

    def _replay_speed(self, factor: float) -> None:
        source = self._replay_source()
        if source is None:
            self.notify("Replay speed: only while replaying a log.", severity="warning")
            return
        current = source.speed if source.speed is not None else 64.0
        source.set_speed(min(1024.0, max(0.125, current * factor)))
        self._redraw(force=True)

    def action_replay_faster(self) -> None:
        self._replay_speed(2.0)

    def action_replay_slower(self) -> None:
        self._replay_speed(0.5)

    async def _replay_seek(self, fraction: float) -> None:
        source = self._replay_source()
        if source is None:
            self.notify("Seek: only while replaying a log.", severity="warning")
            return
        pos = source.position()
        if pos.first_ts is None or pos.last_ts is None:
            return
        span = pos.last_ts - pos.first_ts
        at = pos.ts if pos.ts is not None else pos.first_ts
        target = source.index_at(at + fraction * span)
        # A quiet stretch of the log still moves the position by at least one event.
        if fraction < 0 and target >= pos.pos:
            target = max(0, pos.pos - 1)
        elif fraction > 0 and target <= pos.pos:
            target = min(pos.total, pos.pos + 1)
        # Replayed from the start into a fresh state: the reducer only goes forward.
        source.seek(target)
        self.state = ConsoleState()
        self.switch_peak = 0
        self._render_key = ()
        # A fresh main screen: its widgets remember what they drew from the old state.
        while len(self.screen_stack) > 1:
            await self.pop_screen()
        from hermes_console.ui.screens.main import MainScreen

        await self.push_screen(MainScreen())

    async def action_replay_back(self) -> None:
        await self._replay_seek(-0.1)

    async def action_replay_forward(self) -> None:
        await self._replay_seek(0.1)
