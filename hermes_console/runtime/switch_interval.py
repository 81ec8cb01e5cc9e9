"""How long one thread of the console's process may keep the GIL while another waits for it.

The console runs the env's event loop and the UI's thread in one interpreter. When a thread
asks for the GIL, CPython makes the holder let go after the switch interval (5 ms by
default): an env reply that arrives while the UI thread draws waits up to that long before
its rollout moves on, once per hand-over, turn after turn. One group at a time (P1) is a
chain of such waits. 1 ms bounds each to a fifth; the price is more hand-overs while both
threads are busy, which the UI's CPU budget already keeps rare.

P1 at 5 ms and at 1 ms, both sides of each pair in the same process, 7 rounds alternated
(session 26): medians 0.938 and 0.965, 5 of 7 pairs higher at 1 ms. P2's 256 env-only
rollouts (no UI thread) did not move with it (0.839 at 5 ms, 0.847 at 1, 0.839 at 20): the
headless runner keeps CPython's default.

Applied by ``run_console`` (the console's process) and by the benchmark standing in for it,
never by tests (a test process would keep it for every later test).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

CONSOLE_S = 0.001  # CPython's default is 0.005


def apply() -> None:
    sys.setswitchinterval(CONSOLE_S)


@contextlib.contextmanager
def applied() -> Iterator[None]:
    """:func:`apply` for a while, the process's own setting back afterwards."""
    saved = sys.getswitchinterval()
    apply()
    try:
        yield
    finally:
        sys.setswitchinterval(saved)
