"""Seeing what the env layer emits while a test runs one thing."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from environments import events


@contextmanager
def recording() -> Iterator[list[events.Event]]:
    """Every event emitted inside the block, in order."""
    seen: list[events.Event] = []
    events.add_observer(seen.append)
    try:
        yield seen
    finally:
        events.remove_observer(seen.append)
