"""The one crossing point for events: env threads append, the UI thread drains.

``collections.deque.append``/``popleft`` are atomic under the GIL, so the
observer takes no lock and costs one bound-method call per event. The deque is
bounded so a UI that stops draining cannot grow memory without limit; events
pushed past the bound are counted (``dropped``) and the recorder, which has
its own queue, still writes every one of them.
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Deque, List, Optional

from environments.events import Event

DEFAULT_MAX_QUEUED = 1_000_000


class EventQueue:
    def __init__(self, maxlen: int = DEFAULT_MAX_QUEUED) -> None:
        self._q: Deque[Event] = deque()
        self._maxlen = maxlen
        self.dropped = 0
        self.pushed = 0
        # Extra sinks that see every event (the recorder); called on the emitting thread.
        self._taps: List[Callable[[Event], None]] = []

    def add_tap(self, tap: Callable[[Event], None]) -> None:
        self._taps = [*self._taps, tap]

    def push(self, event: Event) -> None:
        """The observer: cheap, lock-free, never raises."""
        self.pushed += 1
        if len(self._q) >= self._maxlen:
            self.dropped += 1
        else:
            self._q.append(event)
        for tap in self._taps:
            tap(event)

    __call__ = push

    def drain(self, max_events: Optional[int] = None) -> List[Event]:
        out: List[Event] = []
        pop = self._q.popleft
        n = len(self._q) if max_events is None else min(max_events, len(self._q))
        try:
            for _ in range(n):
                out.append(pop())
        except IndexError:  # raced with nothing: another drainer; harmless
            pass
        return out

    def __len__(self) -> int:
        return len(self._q)
