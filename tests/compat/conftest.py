"""Fixtures for the compatibility suite: the embedded simulator and the compat envs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_console.sim.server import SimServer
from tests.helpers.live import HostStarter, fixed_latency_sim, running_sim, started_hosts
from tests.runtime.runtime_helpers import Pump

ENVS = Path(__file__).resolve().parent / "envs"
# The seed-API example env (one file for the environments and compat suites).
SEED_ENV = Path(__file__).resolve().parents[1] / "environments" / "seed_env_example.py"


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    yield from running_sim(fixed_latency_sim(seed=3, latency_ms=5.0, solve_rate=1.0))


@pytest.fixture
def compat_env(sim: SimServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Point the compat envs' config_init at the simulator; returns the report path."""
    monkeypatch.setenv("COMPAT_BASE_URL", f"{sim.base_url}/v1")
    monkeypatch.setenv("SEED_BASE_URL", f"{sim.base_url}/v1")
    monkeypatch.setenv("SEED_SERVER_TYPE", "vllm")  # configured as training envs usually are: Phase 2
    report = tmp_path / "report.jsonl"
    monkeypatch.setenv("COMPAT_REPORT", str(report))
    return report


@pytest.fixture
def host_runs() -> Iterator[HostStarter[Pump]]:
    """Hosts that exit when their run is finished (the benchmark evaluations); always stopped."""
    yield from started_hosts(Pump, exit_when_finished=True)
