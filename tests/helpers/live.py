"""Fixture bodies for tests that run the real runtime: an embedded simulator and hosts
that are always stopped. Each folder's conftest picks its own simulator settings and
pump class; the start/stop discipline is written once, here."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from hermes_console.runtime.config import RunSpec
from hermes_console.runtime.host import RuntimeHost
from hermes_console.sim.config import LatencyConfig, SimConfig
from hermes_console.sim.server import SimServer

PumpT = TypeVar("PumpT")


def fixed_latency_sim(seed: int, latency_ms: float, **config: Any) -> SimConfig:
    return SimConfig(seed=seed, latency=LatencyConfig(mode="fixed", mean_ms=latency_ms), **config)


def running_sim(config: SimConfig) -> Iterator[SimServer]:
    """Body of a simulator fixture: ``yield from running_sim(...)``."""
    server = SimServer(config)
    server.start()
    try:
        yield server
    finally:
        server.stop()


class HostStarter(Generic[PumpT]):
    """Starts hosts wrapped in a pump (built before the host starts, so it sees the
    state before the run: threads, processes); stop_all() stops and joins every one."""

    def __init__(self, pump: Callable[[RuntimeHost], PumpT], exit_when_finished: bool) -> None:
        self._pump = pump
        self._exit_when_finished = exit_when_finished
        self.hosts: list[RuntimeHost] = []

    def __call__(self, spec: RunSpec, exit_when_finished: bool | None = None) -> PumpT:
        exit_flag = self._exit_when_finished if exit_when_finished is None else exit_when_finished
        host = RuntimeHost(spec, exit_when_finished=exit_flag)
        self.hosts.append(host)
        pumped = self._pump(host)
        host.start()
        return pumped

    def stop_all(self) -> None:
        for host in self.hosts:
            host.stop(0.5).result(timeout=60)
            host.join(10)


def started_hosts(
    pump: Callable[[RuntimeHost], PumpT], exit_when_finished: bool = False
) -> Iterator[HostStarter[PumpT]]:
    """Body of a host fixture: ``yield from started_hosts(Pump)``; every host is stopped at the end."""
    starter = HostStarter(pump, exit_when_finished)
    try:
        yield starter
    finally:
        starter.stop_all()
