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
    h = hashlib.blake2b(digest_size=16)
    for p in parts:
        h.update(p if isinstance(p, bytes) else str(p).encode("utf-8", "surrogatepass"))
        h.update(b"\x1f")  # separator so ("ab","c") != ("a","bc")
    return h.digest()


def unit(*parts: object) -> float:
    """A float in [0, 1) determined by ``parts``."""
    (n,) = struct.unpack_from("<Q", digest(*parts))
    return (n >> 11) * (1.0 / (1 << 53))


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
