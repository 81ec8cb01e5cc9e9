"""Counters behind ``/stats``: requests per endpoint, in flight, faults, latency."""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

from hermes_console.sim.config import FAULT_KINDS

ENDPOINTS: tuple[str, ...] = (
    "chat_completions",
    "completions",
    "models",
    "generate_vllm",
    "generate_sglang",
    "health",
    "stats",
    "admin",
)


class SimStats:
    """Mutated on the server loop; read from any thread (hence the lock)."""

    def __init__(self, window: int = 2048) -> None:
        self._lock = threading.Lock()
        self.started_at = time.time()
        self.requests: dict[str, int] = dict.fromkeys(ENDPOINTS, 0)
        self.bad_requests = 0
        self.in_flight = 0
        self.queued = 0  # waiting for a concurrency slot
        self.faults: dict[str, int] = dict.fromkeys(FAULT_KINDS, 0)
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self._latency_ms: deque[float] = deque(maxlen=window)

    def request(self, endpoint: str) -> None:
        with self._lock:
            self.requests[endpoint] = self.requests.get(endpoint, 0) + 1

    def bad_request(self) -> None:
        with self._lock:
            self.bad_requests += 1

    def fault(self, kind: str) -> None:
        with self._lock:
            self.faults[kind] = self.faults.get(kind, 0) + 1

    def add_in_flight(self, delta: int) -> None:
        with self._lock:
            self.in_flight += delta

    def add_queued(self, delta: int) -> None:
        with self._lock:
            self.queued += delta

    def finished(self, latency_ms: float, prompt_tokens: int, completion_tokens: int) -> None:
        with self._lock:
            self._latency_ms.append(latency_ms)
            self.prompt_tokens += prompt_tokens
            self.completion_tokens += completion_tokens

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            lat = sorted(self._latency_ms)
            requests = dict(self.requests)
            out: dict[str, Any] = {
                "uptime_s": round(time.time() - self.started_at, 3),
                "requests": requests,
                "requests_total": sum(requests.values()),
                "bad_requests": self.bad_requests,
                "in_flight": self.in_flight,
                "queued": self.queued,
                "faults": dict(self.faults),
                "tokens": {"prompt": self.prompt_tokens, "completion": self.completion_tokens},
            }
        out["latency_ms"] = _latency_summary(lat)
        return out


def _latency_summary(lat: list[float]) -> dict[str, float | int]:
    if not lat:
        return {"count": 0, "mean": 0.0, "p50": 0.0, "p95": 0.0, "max": 0.0}

    def pct(p: float) -> float:
        return round(lat[min(len(lat) - 1, int(p * len(lat)))], 3)

    return {
        "count": len(lat),
        "mean": round(sum(lat) / len(lat), 3),
        "p50": pct(0.5),
        "p95": pct(0.95),
        "max": round(lat[-1], 3),
    }
