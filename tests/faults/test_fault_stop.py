"""Stops keep everything (issue 19, point 1-2): a real headless CLI subprocess against a
simulator slow enough that groups are in flight when the stop comes.

Oracles (independent of the runtime's own counters): the gzip event log read with gzip+json,
the lines of groups.jsonl, and the rule that every item received has exactly one outcome.
"""

from __future__ import annotations

import signal
from typing import Iterator

import pytest

from cli_stop_helpers import (
    assert_every_item_accounted,
    completed_after_stop,
    read_record,
    start_run,
)
from hermes_console.sim.config import LatencyConfig, SimConfig
from hermes_console.sim.server import SimServer

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def slow_sim() -> Iterator[SimServer]:
    """300 ms per reply: a group takes a second or more, so a stop always meets groups in flight."""
    server = SimServer(SimConfig(seed=5, latency=LatencyConfig(mode="fixed", mean_ms=300.0)))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_headless_ctrl_c_keeps_every_group_that_finishes_during_the_drain(slow_sim, tmp_path):
    r = start_run(tmp_path, slow_sim.base_url, "--max-in-flight", "4", "--drain-deadline", "45")
    try:
        r.until(lambda: r.groups_written() >= 3, "3 groups written")
        r.signal(signal.SIGINT)
        code = r.wait_exit()
    finally:
        r.kill()
    out = r.output()
    assert code == 130, out[-3000:]
    events = read_record(r.record)
    o = assert_every_item_accounted(events)
    failed = [e for e in events if e["kind"] == "item_failed"]
    assert not failed, failed[:3]
    # A 45 s drain is far more than these groups need: nothing is cancelled.
    assert o.count("item_cancelled") == 0, out[-3000:]
    assert completed_after_stop(events) >= 1, "no group was in flight at the stop: the test proved nothing"
    # Every group the log calls kept is a whole line in groups.jsonl, and nothing else is there.
    assert r.groups_written() == o.count("item_completed")
    assert "is closed" not in out
