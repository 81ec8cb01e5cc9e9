"""A bounded sample of a stream of numbers: exact count and sum, percentiles from a reservoir.

The run's graphs keep one point per 10 s slice for an hour (history.py). A slice kept
every reward and every LLM latency of its 10 s, so their memory grew with the event
rate (~6 MB of P4's growth over 100,000 synthetic rollouts; an hour of a flood would
keep hundreds of MB). A :class:`Reservoir` holds at most ``size`` values (Algorithm R:
each value seen so far is equally likely to be kept), so percentiles are exact until it
fills and a uniform sample's after; the count and the mean stay exact. The draws come from a
generator seeded by the caller (the slice's start), so replaying a run's events gives
the same sample.
"""

from __future__ import annotations

import math
import random
from array import array

RESERVOIR_SIZE = 1024


class Reservoir:
    __slots__ = ("count", "total", "values", "_seed", "_rng", "_size")

    def __init__(self, seed: int = 0, size: int = RESERVOIR_SIZE) -> None:
        self.count = 0
        self.total = 0.0
        self.values = array("d")  # 8 bytes a value, not a float object each
        self._seed = seed
        self._rng: random.Random | None = None  # made when the reservoir first overflows
        self._size = size

    def add(self, value: float) -> None:
        self.count += 1
        self.total += value
        if len(self.values) < self._size:
            self.values.append(value)
            return
        if self._rng is None:
            self._rng = random.Random(self._seed)
        slot = self._rng.randrange(self.count)
        if slot < self._size:
            self.values[slot] = value

    def mean(self) -> float:
        return self.total / self.count if self.count else math.nan

    def sorted_values(self) -> list[float]:
        return sorted(self.values)
