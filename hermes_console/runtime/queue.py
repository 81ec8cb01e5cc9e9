"""The one crossing point for events: env threads append, the UI thread drains.

Bounded by count at any event rate. While the UI keeps up, events pass one by one.
Once ``coalesce_at`` items are waiting, the high-rate kinds (turns, tool calls,
sandbox commands, lag, server stats, logs) are folded into a :class:`Coalesced`
segment at the tail instead of appended (see ``runtime/coalesce.py``): the state
they produce has every counter exact, stream lines beyond what can be shown become
counts. Lifecycle events (items, groups, rollouts, sandboxes opened/closed, ...) are
always queued as they are and end the open segment, so order is kept.

``max_depth`` is the hard cap on queued items; a lifecycle event that finds the
queue full is counted in ``dropped`` (shown by the UI) rather than growing memory.
The recorder, a tap with its own queue, still writes every event either way.
A lock guards the tail: producers on several threads fold into the same segment.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from typing import Any, Callable, Deque, List, Optional, Union

from environments.events import Event
from hermes_console.runtime.coalesce import COALESCABLE, Coalesced

DEFAULT_MAX_QUEUED = 200_000  # hard cap on queued items (events + segments)
DEFAULT_COALESCE_AT = 4_096  # waiting items from which high-rate events are folded

Item = Union[Event, Coalesced]


class EventQueue:
    def __init__(self, maxlen: int = DEFAULT_MAX_QUEUED, coalesce_at: int = DEFAULT_COALESCE_AT) -> None:
        if maxlen < 1 or coalesce_at < 0:
            raise ValueError(f"EventQueue: maxlen must be >= 1 and coalesce_at >= 0, got {maxlen}, {coalesce_at}")
        self._q: Deque[Item] = deque()
        self._maxlen = maxlen
        self.coalesce_at = min(coalesce_at, maxlen)
        self._open: Optional[Coalesced] = None  # the segment at the tail still taking events
        self._lock = threading.Lock()
        self.dropped = 0  # lifecycle events refused at the hard cap (never silently)
        self.pushed = 0
        self.coalesced = 0  # events folded into segments
        self.max_depth_seen = 0
        self.pushed_by_kind: Counter[str] = Counter()
        # Extra sinks that see every event (the recorder); called on the emitting thread.
        self._taps: List[Callable[[Event], None]] = []

    @property
    def max_depth(self) -> int:
        return self._maxlen

    def add_tap(self, tap: Callable[[Event], None]) -> None:
        self._taps = [*self._taps, tap]

    def push(self, event: Event) -> None:
        """The observer: cheap, never raises, never blocks on the consumer."""
        kind = type(event).kind
        with self._lock:
            self.pushed += 1
            self.pushed_by_kind[kind] += 1
            q = self._q
            if len(q) >= self.coalesce_at and kind in COALESCABLE:
                if self._fold(event):
                    self.coalesced += 1
                else:
                    self._append(event)
            else:
                self._append(event)
        for tap in self._taps:
            tap(event)

    __call__ = push

    def _fold(self, event: Event) -> bool:
        segment = self._open
        if segment is not None and segment.add(event):
            return True
        if len(self._q) >= self._maxlen:
            return False
        fresh = Coalesced()
        if not fresh.add(event):
            return False
        self._q.append(fresh)
        self._open = fresh
        self.max_depth_seen = max(self.max_depth_seen, len(self._q))
        return True

    def _append(self, event: Event) -> None:
        # Anything queued after the open segment closes it: later events keep their order.
        q = self._q
        if len(q) >= self._maxlen:
            self.dropped += 1
            return
        self._open = None
        q.append(event)
        if len(q) > self.max_depth_seen:
            self.max_depth_seen = len(q)

    def drain(self, max_events: Optional[int] = None) -> List[Any]:
        """Up to ``max_events`` queued items, oldest first (events and folded segments)."""
        with self._lock:
            q = self._q
            n = len(q) if max_events is None else min(max_events, len(q))
            out = [q.popleft() for _ in range(n)]
            if self._open is not None and (not q or q[-1] is not self._open):
                self._open = None  # handed to the consumer: nothing may fold into it any more
            return out

    def __len__(self) -> int:
        return len(self._q)
