"""Fixtures for the simulator tests: one shared server per module, tool schemas, tasks."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes_console.sim import SimConfig, SimServer
from tests.sim.sim_helpers import TOOL_NAMES, tool_schema


@pytest.fixture(scope="session")
def sim_tools() -> list[dict[str, Any]]:
    return [tool_schema(n) for n in TOOL_NAMES]


@pytest.fixture(scope="session")
def terminal_tasks() -> list[dict[str, Any]]:
    path = Path(__file__).resolve().parents[2] / "environments" / "terminal_tasks" / "tasks.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    """A thread-mode simulator shared by a module (no faults; tests that set faults reset them)."""
    server = SimServer(SimConfig(seed=7, solve_rate=0.6))
    server.start()
    try:
        yield server
    finally:
        server.stop()
