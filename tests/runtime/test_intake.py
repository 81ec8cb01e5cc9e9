"""Intake gate on the real env + simulator: pause drains, resume, cancel accounts
every item (re-queued), and stop leaves no thread, task or child process."""

from __future__ import annotations

import asyncio
import threading

import pytest

from environments.terminal_tasks.env import TerminalTasksEnv
from tests.runtime.runtime_helpers import identity, make_spec, our_threads, wait_no_children


class CountingEnv(TerminalTasksEnv):
    """The real env, counting get_next_item calls (the gate's observable)."""

    name = "terminal-tasks-counting"

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.calls = 0
        self.taken: list = []

    async def get_next_item(self):
        self.calls += 1
        item = await super().get_next_item()
        self.taken.append(item)
        return item


def test_pause_resume_cancel_and_clean_stop(sim, tmp_path, live):
    threads_before = set(our_threads())
    p = live(make_spec(sim, tmp_path, "--env.total_steps", "1000", env=CountingEnv, max_in_flight=3))
    p.until(lambda s: s.accounting.received >= 3 and s.status == "running", 30, "3 groups in flight")
    env = p.host.env

    # ---- pause: no new get_next_item once the command is acknowledged; in-flight groups finish
    p.host.pause().result(5)
    calls_at_pause = env.calls
    received_at_pause = p.state.accounting.received
    p.until(lambda s: s.accounting.in_flight == 0 and s.status == "paused", 30, "drained after pause")
    p.sleep(0.5)
    assert env.calls == calls_at_pause
    assert p.state.accounting.received == received_at_pause
    assert (
        p.state.accounting.completed + p.state.accounting.dropped_total + p.state.accounting.failed == received_at_pause
    )
    statuses = [e.status for e in p.of("runtime_status")]
    assert "draining" in statuses and statuses[-1] == "paused"

    # ---- resume: intake again
    p.host.resume().result(5)
    p.until(lambda s: s.accounting.in_flight >= 2, 30, "groups in flight after resume")
    assert env.calls > calls_at_pause

    # ---- cancel: every in-flight item accounted as cancelled and re-queued
    n = p.host.cancel_in_flight().result(30)
    assert n >= 1
    p.pump()
    cancelled = p.of("item_cancelled")
    assert len(cancelled) == n and all(e.requeued for e in cancelled)
    assert len({e.group_id for e in cancelled}) == n
    assert identity(p.state, p.events) is None
    # re-queued items are taken again (from the backlog, not get_next_item)
    p.until(lambda s: s.accounting.received >= received_at_pause + n + 1, 30, "re-queued items restarted")
    assert not env.backlog or len(env.backlog) < n

    # ---- stop: drain briefly, cancel the rest, nothing left behind
    p.stop(deadline=0.2)
    assert p.state.status == "stopped"
    assert identity(p.state, p.events) is None and p.state.accounting.in_flight == 0
    assert not [t for t in threading.enumerate() if t.name == "hermes-runtime"]
    assert set(our_threads()) <= threads_before, our_threads()
    assert wait_no_children() == []
    assert p.host._loop.is_closed()
    from environments import sandboxes

    assert [s for s in sandboxes.list_sandboxes() if s.state != "closed"] == []


def test_sandbox_commands_server_stats_and_logs(sim, tmp_path, live):
    from environments import sandboxes

    p = live(make_spec(sim, tmp_path, "--env.total_steps", "1000", max_in_flight=2, stats_interval_s=0.2))
    p.until(lambda s: s.accounting.completed >= 1, 60, "a group completed")
    p.host.pause().result(5)
    # ServerStats: one row per phase-1 server, counting real requests
    p.until(lambda s: bool(s.servers) and s.servers[0]["requests"] > 0, 60, "server stats")
    row = p.state.servers[0]
    assert row["url"] == f"{sim.base_url}/v1" and row["server_type"] == "openai" and row["healthy"] is True
    assert row["latency_ms_p50"] is not None and row["errors"] == 0

    # operator commands on a real sandbox
    box = sandboxes.get_sandbox("ops-probe")
    box.execute("cd /tmp 2>/dev/null || true; echo hi > probe.txt", timeout=10)
    details = p.host.sandbox_details("ops-probe").result(10)
    assert details.task_id == "ops-probe" and details.state in ("idle", "running")
    assert details.cwd and isinstance(details.process_tree, list)
    assert any("probe.txt" in c.command for c in details.recent_commands)
    out = p.host.run_in_sandbox("ops-probe", "echo diag-$((6*7))", 5).result(10)
    assert out.exit_code == 0 and "diag-42" in out.output
    new_lifetime = p.host.extend_sandbox("ops-probe", 60).result(10)
    assert new_lifetime >= 60
    assert p.host.kill_sandbox("ops-probe").result(10) is True
    p.until(
        lambda s: s.sandboxes.get("ops-probe") is not None and s.sandboxes["ops-probe"].state == "closed",
        10,
        "killed sandbox closed",
    )
    assert p.state.sandboxes["ops-probe"].closed_reason == "killed"
    with pytest.raises(KeyError, match="sandbox nope is closed"):
        p.host.sandbox_details("nope").result(10)

    # log records reach the event stream instead of the terminal
    import logging

    logging.getLogger("environments.test_probe").error("probe error 123")
    p.until(lambda s: any(r.message == "probe error 123" for r in s.logs), 60, "log record")


class FlakyEnv(TerminalTasksEnv):
    """Every third group raises: the run goes on and the failure carries its cause."""

    name = "terminal-tasks-flaky"

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.n = 0

    async def collect_trajectories(self, item):
        self.n += 1
        if self.n % 3 == 0:
            raise ValueError(f"reward model unavailable for item {self.n}")
        return await super().collect_trajectories(item)


def test_a_failing_group_never_stops_the_run(sim, tmp_path, live):
    p = live(make_spec(sim, tmp_path, "--env.total_steps", "6", env=FlakyEnv, max_in_flight=2), exit_when_finished=True)
    p.until(lambda s: s.status == "finished", 60, "finished")
    failed = p.of("item_failed")
    assert len(failed) == 2
    assert all(
        e.error_kind == "exception" and e.error.startswith("ValueError: reward model unavailable") for e in failed
    )
    assert p.state.accounting.completed == 4 and identity(p.state, p.events) is None


def test_a_pause_closes_intake_at_once_even_while_the_runtime_loop_is_busy(sim, tmp_path, live):
    """The key press itself closes the gate: with the runtime loop stuck in a long step (a
    flood, a slow env call), the pause is acknowledged at once and no item is taken after it;
    the status follows once the loop is free."""
    p = live(make_spec(sim, tmp_path, "--env.total_steps", "1000", env=CountingEnv, max_in_flight=3))
    p.until(lambda s: s.accounting.received >= 3 and s.status == "running", 30, "3 groups in flight")
    env = p.host.env
    loop = p.host._loop
    busy, free = threading.Event(), threading.Event()

    def stuck() -> None:  # runs on the runtime loop and holds it
        busy.set()
        free.wait(30)

    loop.call_soon_threadsafe(stuck)
    assert busy.wait(10)
    try:
        ack = p.host.pause()
        assert ack.done() and ack.exception() is None  # acknowledged while the loop is still stuck
        assert not p.host.driver.gate.open
        calls_at_pause = env.calls
    finally:
        free.set()
    p.until(lambda s: s.accounting.in_flight == 0 and s.status == "paused", 30, "drained after pause")
    p.sleep(0.5)
    assert env.calls == calls_at_pause
    p.host.resume().result(5)
    p.until(lambda s: s.accounting.in_flight >= 1 and s.status == "running", 30, "running after resume")
    p.stop(deadline=0.2)


class SlowItemEnv(CountingEnv):
    """get_next_item waits for the test (a slow dataset, a remote queue) once asked to."""

    name = "terminal-tasks-slow-item"

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.hold_next = threading.Event()  # set: the next call waits until `release` is set
        self.waiting = threading.Event()
        self.release = threading.Event()

    async def get_next_item(self):
        if self.hold_next.is_set():
            self.hold_next.clear()
            self.waiting.set()
            while not self.release.is_set():
                await asyncio.sleep(0.01)
        return await super().get_next_item()


def test_an_item_fetched_while_intake_closed_waits_in_the_backlog_and_no_group_starts(sim, tmp_path, live):
    """A pause (or a trainer outage) that lands while get_next_item runs: the item it returns
    starts no group until intake opens again, and is not lost."""
    p = live(make_spec(sim, tmp_path, "--env.total_steps", "1000", env=SlowItemEnv, max_in_flight=1))
    p.until(lambda s: s.accounting.received >= 1, 30, "a group started")
    env = p.host.env
    env.hold_next.set()
    assert env.waiting.wait(60), "the next get_next_item never started"
    p.host.pause().result(5)  # closes the gate while the fetch is still running
    received_at_pause = p.state.accounting.received
    env.release.set()
    p.until(lambda s: s.accounting.in_flight == 0 and s.status == "paused", 60, "drained after pause")
    p.sleep(0.5)
    assert p.state.accounting.received == received_at_pause, "a group started after the pause"
    assert len(env.backlog) == 1 and env.backlog[0] == env.taken[-1]  # kept for later, not dropped
    held = env.taken[-1]
    p.host.resume().result(5)
    p.until(lambda s: s.accounting.received > received_at_pause, 60, "intake again after resume")
    assert not env.backlog or env.backlog[0] != held  # the kept item went first
    p.stop(deadline=0.2)
