"""Fault-suite fixtures: one simulator per module (faults reset per test), a host
started and always stopped, and process-global sandbox settings put back."""

from __future__ import annotations

from typing import Any, Callable, Iterator, List

import pytest

from hermes_console.runtime.config import RunSpec
from hermes_console.runtime.host import RuntimeHost
from hermes_console.sim.config import LatencyConfig, SimConfig
from hermes_console.sim.server import SimServer

from faults_helpers import FaultRun, restore_env, snapshot_env


@pytest.fixture(scope="module")
def fsim() -> Iterator[SimServer]:
    server = SimServer(SimConfig(seed=11, latency=LatencyConfig(mode="fixed", mean_ms=10.0), hang_max_s=60.0))
    server.start()
    try:
        yield server
    finally:
        server.stop()


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
def run(tmp_path: Any) -> Iterator[Callable[..., FaultRun]]:
    """Start a host (UI-style: stays up after the run until stopped); always stopped at the end."""
    hosts: List[RuntimeHost] = []

    def start(spec: RunSpec, exit_when_finished: bool = False) -> FaultRun:
        host = RuntimeHost(spec, exit_when_finished=exit_when_finished)
        hosts.append(host)
        r = FaultRun(host)
        host.start()
        return r

    yield start
    for host in hosts:
        host.stop(0.5).result(timeout=60)
        host.join(10)
