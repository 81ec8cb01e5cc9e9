"""Worker threads that tokenise finished rollouts, each call with a tokenizer copy of its own.

A fast tokenizer must not be used from two threads at once (its Rust core is borrowed
mutably per call), and the env's own tokenizer is used on the event loop (ManagedServer).
One copy behind one lock made every rollout's tokenisation wait for the one before: when
256 rollouts end within a couple of seconds, the last waited ~2.5 s in that queue
(BENCHMARKS.md, P2). Several copies let the tokenizer's encoding, which runs without the
GIL, use the other cores.

A worker that finishes a call takes the next queued one at once, with the copy it holds. When
copies were handed from one call to the next through the event loop, each hand-over waited
for a loop busy with the other rollouts' ends (rewards, cleanups, replies): in P2 the two
copies sat idle 70 % of the time while 256 rollouts ended, and the batch ended when the
last tokens did (BENCHMARKS.md, session 27).

Copies are made on the event loop (where the source tokenizer is used, so a copy never reads
it while another thread encodes with it), the first time every existing one may be in use,
never more than ``size``: a large vocabulary's copy costs a fraction of a second of the loop
and tens of MB, once per copy for the env's life.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
import queue
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Encodings run in parallel up to the cores there are; beyond 4 copies memory grows (a large
# vocabulary is tens of MB a copy) for little, as rendering the chat template needs the GIL.
DEFAULT_COPIES = max(2, min(4, os.cpu_count() or 1))


def shutdown_workers(wait: bool = True) -> None:
    """Stop every pool's worker threads (a stopped runtime leaves no thread of the env layer
    running); a pool used again starts new ones."""
    for pool in list(_pools):
        pool.close(wait=wait)


class TokenizerCopies:
    """Runs ``fn(*args, tokenizer)`` calls in at most ``size`` worker threads, each call with
    a copy of ``source`` no other thread uses meanwhile."""

    def __init__(self, source: Any, size: int = DEFAULT_COPIES) -> None:
        self.source = source
        self.size = max(1, size)
        self.made = 0
        self._free: queue.SimpleQueue[Any] = queue.SimpleQueue()  # copies no call holds
        self._lock = threading.Lock()
        self._pending = 0  # calls submitted and not yet finished (or cancelled before they ran)
        self._executor: ThreadPoolExecutor | None = None
        self._uncopyable = False
        _pools.add(self)

    @property
    def uncopyable(self) -> bool:
        """The source could not be copied at all: callers tokenise on the loop instead."""
        return self._uncopyable

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args, copy)`` in a worker thread. Cancelling the caller drops a call that has
        not started; one that has runs to its end (its copy comes back when it is done).
        When the source cannot be copied, ``fn(*args, None)`` runs here, on the loop, where
        the source itself is used (never from two threads at once)."""
        if not self._copy_if_needed():
            return fn(*args, None)
        executor = self._executor
        if executor is None:
            executor = self._executor = ThreadPoolExecutor(max_workers=self.size, thread_name_prefix="hermes-tokens")
        with self._lock:
            self._pending += 1
        try:
            work: Future[T] = executor.submit(self._call, fn, args)
        except BaseException:
            self._finished(None)
            raise
        work.add_done_callback(self._finished)
        return await asyncio.wrap_future(work)

    def close(self, wait: bool = False) -> None:
        """The workers end once the queued calls are done (``wait``: and this returns then).
        A later call starts new workers."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=wait)

    def _copy_if_needed(self) -> bool:
        """Make one more copy when every existing one may be in use (on the loop). False when
        there is no copy to use at all."""
        if self._uncopyable:
            return False
        with self._lock:
            needed = self.made < self.size and self._pending >= self.made
        if needed:
            try:
                made = copy.deepcopy(self.source) if self.source is not None else None
            except Exception as exc:  # noqa: BLE001 - an exotic tokenizer: tokenise on the loop instead
                if self.made == 0:
                    logger.warning(
                        "could not copy the tokenizer for off-loop tokenisation (%s); tokenising on the loop", exc
                    )
                    self._uncopyable = True
                    return False
                logger.warning("could not make tokenizer copy %d (%s); using %d", self.made + 1, exc, self.made)
                self.size = self.made
                return True
            self.made += 1
            self._free.put(made)
        return True

    def _call(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        # Never blocks for long: a copy exists for every call that can run at once (made >=
        # min(size, pending)); at most the moment a finishing call takes to put its copy back.
        own = self._free.get()
        try:
            return fn(*args, own)
        finally:
            self._free.put(own)

    def _finished(self, _: object) -> None:
        with self._lock:
            self._pending -= 1


_pools: weakref.WeakSet[TokenizerCopies] = weakref.WeakSet()
