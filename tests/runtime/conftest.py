"""Live-runtime fixtures: the real simulator, a host started and always stopped."""

from __future__ import annotations

from typing import Any, Callable, Iterator, List

import pytest

from hermes_console.runtime.config import RunSpec
from hermes_console.runtime.host import RuntimeHost
from hermes_console.sim.config import LatencyConfig, SimConfig
from hermes_console.sim.server import SimServer

from runtime_helpers import Pump


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    server = SimServer(SimConfig(seed=7, latency=LatencyConfig(mode="fixed", mean_ms=20.0)))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def live(tmp_path: Any) -> Iterator[Callable[..., Pump]]:
    """Start a host; whatever happens, stop it at the end."""
    hosts: List[RuntimeHost] = []

    def start(spec: RunSpec, exit_when_finished: bool = False) -> Pump:
        host = RuntimeHost(spec, exit_when_finished=exit_when_finished)
        hosts.append(host)
        host.start()
        return Pump(host)

    yield start
    for host in hosts:
        host.stop(0.5).result(timeout=30)
        host.join(10)


