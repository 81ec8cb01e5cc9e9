"""Fixtures for the compatibility suite: the embedded simulator and the compat envs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

from hermes_console.sim.config import LatencyConfig, SimConfig
from hermes_console.sim.server import SimServer

ENVS = Path(__file__).resolve().parent / "envs"
# runtime_helpers (Pump, make_spec) live beside the runtime tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    server = SimServer(SimConfig(seed=3, solve_rate=1.0, latency=LatencyConfig(mode="fixed", mean_ms=5.0)))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def compat_env(sim: SimServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Point the compat envs' config_init at the simulator; returns the report path."""
    monkeypatch.setenv("COMPAT_BASE_URL", f"{sim.base_url}/v1")
    report = tmp_path / "report.jsonl"
    monkeypatch.setenv("COMPAT_REPORT", str(report))
    return report
