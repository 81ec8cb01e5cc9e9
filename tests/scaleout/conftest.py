"""Scale-out fixtures: real simulators and a real `run-api`, always stopped."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hermes_console.sim.config import LatencyConfig, SimConfig
from hermes_console.sim.server import SimServer
from tests.helpers.live import HostStarter, started_hosts
from tests.scaleout.scaleout_helpers import Pump, RunAPI


def make_sim(latency_ms: float = 20.0, seed: int = 7, port: int = 0) -> SimServer:
    server = SimServer(SimConfig(seed=seed, port=port, latency=LatencyConfig(mode="fixed", mean_ms=latency_ms)))
    server.start()
    return server


@pytest.fixture
def sims() -> Iterator[Callable[..., SimServer]]:
    started: list[SimServer] = []

    def start(**kw: float) -> SimServer:
        s = make_sim(**kw)
        started.append(s)
        return s

    yield start
    for s in started:
        try:
            s.stop()
        except Exception:  # noqa: BLE001 - a test may have stopped it already
            pass


@pytest.fixture
def run_api(tmp_path: Path) -> Iterator[RunAPI]:
    api = RunAPI(tmp_path).start()
    try:
        yield api
    finally:
        api.stop()


@pytest.fixture
def live() -> Iterator[HostStarter[Pump]]:
    yield from started_hosts(Pump, exit_when_finished=True)
