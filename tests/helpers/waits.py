"""Waiting on conditions instead of the wall clock.

A test never asserts that something took less than N seconds: it waits for the condition
with a generous ceiling (a pass returns at once), or proves "did not wait for X" by
holding X until the work under test has finished.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

CEILING_S = 20.0  # what normally takes milliseconds gets this long on a loaded machine


def wait_for(predicate: Callable[[], object], within: float = CEILING_S, step: float = 0.02) -> bool:
    """Poll until predicate() is true; False if it still is not at the ceiling."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(step)
    return bool(predicate())


def finishes(work: Callable[[], object], within: float = CEILING_S) -> bool:
    """Run work in a daemon thread; True once it returned (or raised), False if it is
    still blocked at the ceiling. Used with something held (an Event the test sets
    afterwards) to show the work does not wait for it."""
    done = threading.Event()

    def run() -> None:
        try:
            work()
        finally:
            done.set()

    threading.Thread(target=run, daemon=True, name="test-finishes").start()
    return done.wait(within)
