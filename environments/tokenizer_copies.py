"""Copies of one tokenizer for the threads that tokenise finished rollouts.

A fast tokenizer must not be used from two threads at once (its Rust core is borrowed
mutably per call), and the env's own tokenizer is used on the event loop (ManagedServer).
One copy behind one lock made every rollout's tokenisation wait for the one before: when
256 rollouts end within a couple of seconds, the last waited ~2.5 s in that queue
(BENCHMARKS.md, P2). Several copies let the tokenizer's encoding, which runs without the
GIL, use the other cores.

Everything here runs on the event loop: copies are made there (where the source tokenizer
is used, so a copy never reads it while another thread encodes with it), handed to one
worker at a time, and given back when that worker is done. A copy is made the first time
every existing one is busy, never more than ``size``: a large vocabulary's copy costs a
fraction of a second of the loop and tens of MB, once per copy for the env's life.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
from collections import deque
from typing import Any

logger = logging.getLogger(__name__)

UNCOPYABLE = object()  # the tokenizer cannot be copied: tokenise on the loop rather than race
# Encodings run in parallel up to the cores there are; beyond 4 copies memory grows (a large
# vocabulary is tens of MB a copy) for little, as rendering the chat template needs the GIL.
DEFAULT_COPIES = max(2, min(4, os.cpu_count() or 1))


class TokenizerCopies:
    def __init__(self, source: Any, size: int = DEFAULT_COPIES) -> None:
        self.source = source
        self.size = max(1, size)
        self.made = 0
        self._idle: list[Any] = []
        self._waiters: deque[asyncio.Future[Any]] = deque()
        self._broken = False

    async def acquire(self) -> Any:
        """A copy for one worker: an idle one, a new one while fewer than ``size`` exist, or
        the next one given back. :data:`UNCOPYABLE` when the tokenizer cannot be copied."""
        if self._broken:
            return UNCOPYABLE
        if self._idle:
            return self._idle.pop()
        if self.made < self.size:
            try:
                made = copy.deepcopy(self.source) if self.source is not None else None
            except Exception as exc:  # noqa: BLE001 - an exotic tokenizer: tokenise on the loop instead
                logger.warning(
                    "could not copy the tokenizer for off-loop tokenisation (%s); tokenising on the loop", exc
                )
                self._broken = True
                return UNCOPYABLE
            self.made += 1
            return made
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release(waiter.result())  # handed over just as we were cancelled: pass it on
            raise

    def release(self, tokenizer: Any) -> None:
        """Give a copy back (its worker is done with it)."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(tokenizer)
                return
        self._idle.append(tokenizer)
