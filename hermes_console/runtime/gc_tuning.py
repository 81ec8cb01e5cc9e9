"""Garbage-collector settings for a hermes-console process (the console's and the headless runner's).

A console process holds a few hundred thousand long-lived objects (Textual, atroposlib,
transformers, the loaded env and dataset) that a full collection walks every time: ~0.3 s
of CPU each, about every 2 s in a 20k events/s flood, and whichever thread triggers it
stalls the UI (BENCHMARKS P3) and every rollout (a full collection holds the GIL: 130-150 ms
at the start of each 256-rollout P2 batch). Freezing what exists once the runtime has started
moves those objects out of every later collection, and a larger first threshold makes the
young collections (and so the full ones they count up to) rarer. Only garbage cycles wait
longer; reference counting frees everything else at once, as before (and a rollout leaves no
cycles: ``environments/server_retries.py``, the sandbox registry).

Applied by the process entry points (``run_console``, ``run_headless`` from the CLI, the
fleet console) and by the benchmarks that stand in for them, never by tests: a frozen object
is never freed, and a test process builds hundreds of apps.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

THRESHOLDS = (20_000, 10, 10)  # CPython's default is (700, 10, 10)


def tune() -> None:
    """Raise the collection thresholds and freeze everything alive now."""
    gc.set_threshold(*THRESHOLDS)
    freeze()


def freeze() -> None:
    """Move every object alive now out of future collections (at the process's start)."""
    gc.collect()  # what is garbage already should not be frozen
    gc.freeze()


def freeze_loaded() -> None:
    """Freeze again once the env is loaded, without a collection first: a full collection of
    everything the env's imports made took 0.1-0.3 s with the GIL held, in the run's first
    seconds (P1 measured it: 0.976 -> 0.951 in an A/B). ``gc.freeze`` alone costs nothing; the
    price is that cyclic garbage the loading left (bounded, once) is never freed."""
    gc.freeze()


@contextlib.contextmanager
def tuned() -> Iterator[None]:
    """:func:`tune` for a run; CPython's settings back afterwards (unfrozen, default thresholds),
    so whatever runs next in the process (a test, after the CLI's headless run) gets them."""
    saved = gc.get_threshold()
    tune()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*saved)
