"""The one crossing point for events: env threads append, the UI thread drains.

Bounded by count at any event rate. While the UI keeps up, events pass one by one.
Once ``coalesce_at`` items are waiting, the high-rate kinds (turns, tool calls,
sandbox commands, lag, server stats, logs) are folded into a :class:`Coalesced`
segment instead of appended (see ``runtime/coalesce.py``): the state they produce
has every counter exact, stream lines beyond what can be shown become counts.
Lifecycle events (items, groups, rollouts, sandboxes opened/closed, ...) are always
queued as they are. Each entity (rollout / its sandbox; None for run-wide kinds) has a
home segment its events fold into; a lifecycle event about it (or about its group, or a
run-wide one: status, phase, eval, unknown kinds) ends that, and its next events fold
into a segment behind the lifecycle event. A segment is applied before later lifecycle
events about other entities, which changes nothing for the entities it holds.

``max_depth`` is the hard cap on queued items; a lifecycle event that finds the
queue full is counted in ``dropped`` (shown by the UI) rather than growing memory.
The recorder, a tap with its own queue, still writes every event either way.
A lock guards the tail: producers on several threads fold into the same segment.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from environments.events import Event
from hermes_console.runtime.coalesce import COALESCABLE, Coalesced, entity_of

DEFAULT_MAX_QUEUED = 200_000  # hard cap on queued items (events + segments)
DEFAULT_COALESCE_AT = 4_096  # waiting items from which high-rate events are folded
MAX_TRACKED_ROLLOUTS = 100_000  # group -> rollouts map (for a group's lifecycle events); past it: run-wide
_GROUP_ENDS = frozenset({"item_completed", "item_dropped", "item_failed", "item_cancelled"})

Item = Event | Coalesced


class EventQueue:
    def __init__(self, maxlen: int = DEFAULT_MAX_QUEUED, coalesce_at: int = DEFAULT_COALESCE_AT) -> None:
        if maxlen < 1 or coalesce_at < 0:
            raise ValueError(f"EventQueue: maxlen must be >= 1 and coalesce_at >= 0, got {maxlen}, {coalesce_at}")
        self._q: deque[Item] = deque()
        self._maxlen = maxlen
        self.coalesce_at = min(coalesce_at, maxlen)
        self._homes: dict[str | None, Coalesced] = {}  # entity -> the segment its events fold into
        self._rollouts_of: dict[str, list[str]] = {}  # live group -> its rollouts
        self._lock = threading.Lock()
        self.dropped = 0  # lifecycle events refused at the hard cap (never silently)
        self.pushed = 0
        self.coalesced = 0  # events folded into segments
        self.max_depth_seen = 0
        self.pushed_by_kind: dict[str, int] = {}  # a plain dict: counted on the emitting thread
        # Extra sinks that see every event (the recorder); called on the emitting thread.
        self._taps: list[Callable[[Event], None]] = []

    @property
    def max_depth(self) -> int:
        return self._maxlen

    def add_tap(self, tap: Callable[[Event], None]) -> None:
        self._taps = [*self._taps, tap]

    def push(self, event: Event) -> None:
        """The observer: cheap, never raises, never blocks on the consumer. Below ``coalesce_at``
        with no segment open (the UI keeping up) an event costs a count and an append."""
        kind = type(event).kind
        with self._lock:
            self.pushed += 1
            by_kind = self.pushed_by_kind
            by_kind[kind] = by_kind.get(kind, 0) + 1
            if kind in COALESCABLE:
                if len(self._q) >= self.coalesce_at and self._fold(event):
                    self.coalesced += 1
                else:
                    if self._homes:  # later events about it go behind this one
                        self._homes.pop(entity_of(event), None)
                    self._append(event)
            else:
                self._lifecycle(kind, event)
        for tap in self._taps:
            tap(event)

    __call__ = push

    def _fold(self, event: Event) -> bool:
        entity = entity_of(event)
        home = self._homes.get(entity)
        if home is not None:
            return home.add(event)
        # No home: the segment at the tail (behind everything queued), or a new one.
        q = self._q
        tail = q[-1] if q else None
        if isinstance(tail, Coalesced):
            if not tail.add(event):
                return False
            self._homes[entity] = tail
            return True
        if len(q) >= self._maxlen:
            return False
        fresh = Coalesced()
        if not fresh.add(event):
            return False
        q.append(fresh)
        self._homes[entity] = fresh
        self.max_depth_seen = max(self.max_depth_seen, len(q))
        return True

    def _lifecycle(self, kind: str, event: Event) -> None:
        """Queue a lifecycle event; the entities it changes get their next events folded behind it."""
        ended: list[str] | None = None
        if kind == "rollout_started":
            group = self._rollouts_of.get(event.group_id)  # type: ignore[attr-defined]
            if group is None and len(self._rollouts_of) < MAX_TRACKED_ROLLOUTS:
                group = self._rollouts_of[event.group_id] = []  # type: ignore[attr-defined]
            if group is not None:
                group.append(event.rollout_id)  # type: ignore[attr-defined]
        elif kind in _GROUP_ENDS:
            ended = self._rollouts_of.pop(getattr(event, "group_id", None), None)  # type: ignore[arg-type]
        if self._homes:  # no segment open: nothing to end (the common case while the UI keeps up)
            entities = self._entities(kind, event, ended)
            if entities is None:
                self._homes.clear()
            else:
                for entity in entities:
                    self._homes.pop(entity, None)
        self._append(event)

    @staticmethod
    def _entities(kind: str, event: Event, ended: list[str] | None) -> set[str] | list[str] | None:
        """What a lifecycle event changes; None when it is run-wide (or unknown)."""
        entity = entity_of(event)
        if entity is not None:
            return {entity}
        if getattr(event, "group_id", None) is None:
            return None
        if kind in _GROUP_ENDS:  # ends the group's live rollouts (cancelled, their calls closed)
            return ended  # None: not tracked (map full), taken as run-wide
        return set()  # received / group started / group finished: only the group's own view

    def _append(self, event: Event) -> None:
        q = self._q
        if len(q) >= self._maxlen:
            self.dropped += 1
            return
        q.append(event)
        if len(q) > self.max_depth_seen:
            self.max_depth_seen = len(q)

    def drain(self, max_events: int | None = None) -> list[Any]:
        """Up to ``max_events`` queued items, oldest first (events and folded segments)."""
        with self._lock:
            q = self._q
            if max_events is None or max_events >= len(q):
                # Everything: swap the deque (the lock is held O(1), producers wait for nothing).
                # No home or tail can reach the old segments any more, so they are marked outside.
                self._q = deque()
                self._homes = {}
                whole = True
            else:
                out = [q.popleft() for _ in range(max_events)]
                whole = False
                gone = False
                for item in out:
                    if isinstance(item, Coalesced):
                        item.drained = gone = True
                if gone:  # handed to the consumer: nothing may fold into them any more
                    self._homes = {k: v for k, v in self._homes.items() if not v.drained}
        if not whole:
            return out
        for item in q:
            if isinstance(item, Coalesced):
                item.drained = True
        return list(q)

    def __len__(self) -> int:
        return len(self._q)
