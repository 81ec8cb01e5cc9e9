"""At most one redraw a second for views that rebuild whole tables; a change that arrives
sooner is drawn by a timer, so the last one is never lost (even when no tick follows)."""

from __future__ import annotations

import time
from collections.abc import Callable

from textual.message_pump import MessagePump

MIN_INTERVAL_S = 1.0


class Throttle:
    def __init__(self, interval_s: float = MIN_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._last = float("-inf")
        self._pending = False

    def due(self) -> bool:
        """True (and counts as a draw) when the last draw is at least ``interval_s`` ago."""
        now = time.monotonic()
        if now - self._last >= self.interval_s:
            self._last = now
            return True
        return False

    def later(self, owner: MessagePump, redraw: Callable[[], None]) -> None:
        """Schedule one ``redraw`` when the interval is over (once, however many calls)."""
        if self._pending:
            return
        self._pending = True

        def fire() -> None:
            self._pending = False
            redraw()

        owner.set_timer(max(0.01, self.interval_s - (time.monotonic() - self._last)), fire)
