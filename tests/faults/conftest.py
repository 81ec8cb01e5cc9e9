"""Fault-suite fixtures: one simulator per module (faults reset per test), a host
started and always stopped, and process-global sandbox settings put back."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hermes_console.sim.server import SimServer
from tests.faults.faults_helpers import FaultRun, restore_env, snapshot_env
from tests.helpers.live import HostStarter, fixed_latency_sim, running_sim, started_hosts


@pytest.fixture(scope="module")
def fsim() -> Iterator[SimServer]:
    yield from running_sim(fixed_latency_sim(seed=11, latency_ms=10.0, hang_max_s=60.0))


@pytest.fixture
def sim(fsim: SimServer) -> Iterator[SimServer]:
    fsim.set_faults(replace=True)
    yield fsim
    fsim.set_faults(replace=True)


@pytest.fixture(autouse=True)
def _sandbox_settings() -> Iterator[None]:
    from environments.sandboxes import reset_configuration

    saved = snapshot_env()
    yield
    restore_env(saved)
    reset_configuration()


@pytest.fixture
def run() -> Iterator[HostStarter[FaultRun]]:
    """Start a host (UI-style: stays up after the run until stopped); always stopped at the end."""
    yield from started_hosts(FaultRun)
