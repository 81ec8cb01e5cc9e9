"""Stops keep everything (issue 19, point 1-2): a real headless CLI subprocess against a
simulator slow enough that groups are in flight when the stop comes.

Oracles (independent of the runtime's own counters): the gzip event log read with gzip+json,
the lines of groups.jsonl, and the rule that every item received has exactly one outcome.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_console.sim.config import LatencyConfig, SimConfig
from hermes_console.sim.server import SimServer
from tests.faults.cli_stop_helpers import (
    SIGNALS,
    CliRun,
    Outcome,
    assert_every_item_accounted,
    completed_after_stop,
    final_status,
    read_record,
    start_run,
    whole_lines,
)

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def slow_sim(module_slow_sim: SimServer) -> Iterator[SimServer]:
    module_slow_sim.set_faults(replace=True)
    yield module_slow_sim
    module_slow_sim.set_faults(replace=True)


@pytest.fixture(scope="module")
def module_slow_sim() -> Iterator[SimServer]:
    """300 ms per reply: a group takes a second or more, so a stop always meets groups in flight."""
    server = SimServer(SimConfig(seed=5, latency=LatencyConfig(mode="fixed", mean_ms=300.0), hang_max_s=90.0))
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


def _hangs(sim: SimServer) -> int:
    return int(sim.stats()["faults"].get("hang", 0))


def _check_stop(r: CliRun, code: int, expect_code: int) -> Outcome:
    """What every stop ends with: the exit code, whole files, every item in exactly one outcome."""
    out = r.output()
    assert code == expect_code, out[-3000:]
    events = read_record(r.record)  # a complete gzip stream, every line whole JSON
    o = assert_every_item_accounted(events)
    assert final_status(events) == "stopped", out[-3000:]
    assert r.groups_written() == o.count("item_completed"), out[-3000:]
    whole_lines(r.dropped)
    assert "Traceback" not in out, out[-3000:]
    return o


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_every_stop_signal_drains_and_accounts_everything(slow_sim, tmp_path, name):
    sig = SIGNALS[name]
    r = start_run(tmp_path, slow_sim.base_url, "--max-in-flight", "3", "--drain-deadline", "45")
    try:
        r.until(lambda: r.groups_written() >= 2, "2 groups written")
        r.signal(sig)
        code = r.wait_exit()
    finally:
        r.kill()
    # nothing failed or cancelled: a SIGTERM (the scheduler's stop, done) exits 0, the others 128+N
    o = _check_stop(r, code, 0 if sig == signal.SIGTERM else 128 + sig)
    assert o.count("item_failed") == 0 and o.count("item_cancelled") == 0, o.by_kind


def test_drain_deadline_hit_cancels_the_rest_and_accounts_it(slow_sim, tmp_path):
    r = start_run(tmp_path, slow_sim.base_url, "--max-in-flight", "3", "--drain-deadline", "1")
    try:
        r.until(lambda: r.groups_written() >= 2, "2 groups written")
        hung = _hangs(slow_sim)
        slow_sim.set_faults(hang=1.0)  # every new request hangs: the drain cannot finish in time
        r.until(lambda: _hangs(slow_sim) > hung, "a request hanging")
        r.signal(signal.SIGTERM)
        code = r.wait_exit()
    finally:
        r.kill()
    o = _check_stop(r, code, 128 + signal.SIGTERM)
    assert o.count("item_cancelled") >= 1, o.by_kind


@pytest.mark.parametrize("second", ["SIGHUP", "SIGINT", "SIGTERM"])
def test_second_signal_forces_the_stop_and_the_process_exits(slow_sim, tmp_path, second):
    r = start_run(tmp_path, slow_sim.base_url, "--max-in-flight", "3", "--drain-deadline", "300")
    try:
        r.until(lambda: r.groups_written() >= 2, "2 groups written")
        hung = _hangs(slow_sim)
        slow_sim.set_faults(hang=1.0)  # the graceful drain would wait for the hang
        r.until(lambda: _hangs(slow_sim) > hung, "a request hanging")
        r.signal(signal.SIGINT)
        r.until(lambda: "SIGINT: stopping" in r.output(), "the first stop acknowledged")
        r.signal(SIGNALS[second])
        code = r.wait_exit()  # within 60 s although the drain deadline is 300 s
    finally:
        r.kill()
    o = _check_stop(r, code, 128 + signal.SIGINT)
    assert o.count("item_cancelled") >= 1, o.by_kind


def test_serve_mode_stop_sends_every_group_that_finishes_during_the_drain(slow_sim, tmp_path, run):
    from tests.faults.faults_helpers import fault_spec
    from tests.helpers.run_api import TrainerAPI, queued_groups, register_trainer

    with TrainerAPI() as api:
        register_trainer(api.url, batch_size=64, steps=100)
        r = run(
            fault_spec(
                slow_sim,
                tmp_path,
                "--env.rollout_server_url",
                api.url,
                total_steps=100,
                group_size=2,
                mode="serve",
                max_in_flight=3,
                timeout_s=20,
            )
        )
        r.until(lambda s: s.accounting.completed >= 1 and s.accounting.in_flight >= 2, 60, "groups in flight")
        r.stop(30.0)
        r.assert_accounted()
        a = r.state.accounting
        assert a.failed == 0 and a.cancelled == 0, a
        statuses = [e for e in r.events if e.kind in ("runtime_status", "item_completed")]
        stop_at = next(i for i, e in enumerate(statuses) if e.kind == "runtime_status" and e.status == "stopping")
        assert any(e.kind == "item_completed" for e in statuses[stop_at:]), "no group finished in the drain"
        # The trainer API (atroposlib's own count) holds every group the console calls kept.
        assert queued_groups(api.url) == a.completed
        assert len(whole_lines(Path(r.state.run.jsonl_path))) == a.completed
        r.stop_clean()
