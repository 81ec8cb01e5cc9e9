"""Simulator configuration (pydantic): latency model, concurrency, policy knobs, faults."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

# Every fault the simulator knows how to inject. Kept as a tuple so the order
# (used for hash-based decisions and /stats) is stable.
FAULT_KINDS: tuple[str, ...] = (
    "http_500",
    "hang",
    "drop_connection",
    "malformed_tool_json",
    "unknown_tool",
    "empty_choices",
    "garbage_text",
    "unhealthy",
)


def validate_fault_rates(rates: dict[str, float]) -> dict[str, float]:
    """Check names and ranges; raise ValueError naming the bad entry."""
    out: dict[str, float] = {}
    for kind, rate in rates.items():
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; expected one of {', '.join(FAULT_KINDS)}")
        try:
            value = float(rate)
        except (TypeError, ValueError):
            raise ValueError(f"fault {kind!r}: rate must be a number in [0, 1], got {rate!r}") from None
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"fault {kind!r}: rate must be in [0, 1], got {value}")
        out[kind] = value
    return out


class LatencyConfig(BaseModel):
    """Time to first token plus generation time.

    ``mode="fixed"`` sleeps ``mean_ms``; ``"lognormal"`` draws a lognormal with
    that mean and shape ``sigma``. ``tokens_per_s`` adds output_tokens / rate
    (0 disables it). All zero means "answer as fast as possible" (benchmarks).
    """

    model_config = ConfigDict(extra="forbid")

    mode: Literal["fixed", "lognormal"] = "fixed"
    mean_ms: float = Field(0.0, ge=0.0)
    sigma: float = Field(0.5, ge=0.0)
    tokens_per_s: float = Field(0.0, ge=0.0)


class SimConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(0, ge=0, le=65535)  # 0 = pick a free port, read back after bind
    model_name: str = "hermes-sim"
    seed: int = 0
    latency: LatencyConfig = Field(default_factory=LatencyConfig)
    max_concurrency: int = Field(256, ge=1)  # excess requests queue on a semaphore
    solve_rate: float = Field(0.6, ge=0.0, le=1.0)
    tool_call_format: str = "hermes"  # parser name used to render Phase 2 tool calls
    tokenizer_path: str | None = None  # None = environments.tokenizer.local_tokenizer_path()
    faults: dict[str, float] = Field(default_factory=dict)
    hang_max_s: float = Field(3600.0, gt=0.0)  # a "hang" never outlives this (or stop())
    default_max_tokens: int = Field(1024, ge=1)
    use_uvloop: bool = True  # only for the server's own thread/loop

    @field_validator("host")
    @classmethod
    def _loopback_only(cls, v: str) -> str:
        # The simulator never listens beyond this machine.
        if v not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError(f"host must be a loopback address (127.0.0.1), got {v!r}")
        return v

    @field_validator("faults")
    @classmethod
    def _check_faults(cls, v: dict[str, float]) -> dict[str, float]:
        return validate_fault_rates(v)
