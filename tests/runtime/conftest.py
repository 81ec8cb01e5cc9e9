"""Live-runtime fixtures: the real simulator, a host started and always stopped."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hermes_console.sim.server import SimServer
from tests.helpers.live import HostStarter, fixed_latency_sim, running_sim, started_hosts
from tests.runtime.runtime_helpers import Pump


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    yield from running_sim(fixed_latency_sim(seed=7, latency_ms=20.0))


@pytest.fixture
def live() -> Iterator[HostStarter[Pump]]:
    """Start a host; whatever happens, stop it at the end."""
    yield from started_hosts(Pump)
