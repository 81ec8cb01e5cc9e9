"""Deterministic randomness from hashes (never the global ``random``).

Every decision the simulator makes is a pure function of the seed and some
request-derived key, so two servers with the same seed give the same answers
to the same requests, in any order of arrival.
"""

from __future__ import annotations

import hashlib
import math
import random
import struct


def digest(*parts: object) -> bytes:
    # One join + one hash call: this runs several times per request.
    data = b"\x1f".join(p if isinstance(p, bytes) else str(p).encode("utf-8", "surrogatepass") for p in parts)
    return hashlib.blake2b(data, digest_size=16).digest()


def unit(*parts: object) -> float:
    """A float in [0, 1) determined by ``parts``."""
    (n,) = struct.unpack_from("<Q", digest(*parts))
    return float((n >> 11) * (1.0 / (1 << 53)))


def rng(*parts: object) -> random.Random:
    """A private Random seeded from ``parts`` (for multi-draw decisions)."""
    (n,) = struct.unpack_from("<Q", digest(*parts))
    return random.Random(n)


def lognormal_ms(mean_ms: float, sigma: float, u1: float, u2: float) -> float:
    """Lognormal sample with the given *mean* (not median), via Box-Muller on two uniforms."""
    if mean_ms <= 0:
        return 0.0
    if sigma <= 0:
        return mean_ms
    mu = math.log(mean_ms) - sigma * sigma / 2.0
    z = math.sqrt(-2.0 * math.log(max(u1, 1e-12))) * math.cos(2.0 * math.pi * u2)
    return math.exp(mu + sigma * z)


class Occurrences:
    """How many times each request key was seen (bounded LRU).

    Identical requests (a group's rollouts, or a client's retry) get successive
    occurrence numbers, so they sample differently yet reproducibly: the k-th
    time a given request arrives, the answer is the same on every server with
    the same seed. Only touched from the server's event loop.
    """

    def __init__(self, size: int = 65536) -> None:
        from collections import OrderedDict

        self._size = size
        self._seen: OrderedDict[bytes, int] = OrderedDict()

    def next(self, key: bytes) -> int:
        n = self._seen.pop(key, 0)
        self._seen[key] = n + 1
        if len(self._seen) > self._size:
            self._seen.popitem(last=False)
        return n
