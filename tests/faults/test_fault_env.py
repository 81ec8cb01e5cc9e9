"""Faults in the env author's code and in the output sink (cases 9-13 of #7)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.faults.fault_envs import BlockingRewardEnv, NextItemRaisesEnv, RewardRaisesEnv, SetupRaisesEnv
from tests.faults.faults_helpers import fault_spec
from tests.helpers.cli import CLI
from tests.helpers.waits import wait_for

pytestmark = pytest.mark.timeout(120)
REPO = Path(__file__).resolve().parents[2]


def test_compute_reward_raises_scores_zero_and_shows_the_cause(sim, tmp_path, run):
    r = run(fault_spec(sim, tmp_path, total_steps=2, env=RewardRaisesEnv))
    r.until_done_items(2, 60)
    r.assert_alive()
    broken = [x for x in r.state.rollouts.values() if x.reward_error]
    assert len(broken) == 2  # every other of the 4 rollouts
    assert all("KeyError" in x.reward_error and "expected_output" in x.reward_error and x.reward == 0.0 for x in broken)
    assert r.state.errors_by_kind["reward_error"] == 2
    assert sum("compute_reward raised: KeyError" in t for t in r.stream_texts("error")) == 2
    assert any(log.level == "ERROR" and "compute_reward failed" in log.message for log in r.state.logs)
    # The group is still scored and kept: a broken reward never kills the group.
    assert r.state.accounting.completed == 2 and r.state.accounting.failed == 0
    r.assert_accounted()
    r.assert_jsonl_complete()
    r.stop_clean()


def test_blocking_reward_shows_as_loop_lag_and_never_stalls_the_observer(sim, tmp_path, run):
    env = BlockingRewardEnv.held()
    r = run(fault_spec(sim, tmp_path, total_steps=2, group_size=1, env=env))
    ticks: list[float] = []
    stop = threading.Event()

    def ui_thread() -> None:
        # What the UI does: drain the host at a steady tick; it must never wait on the env loop.
        while not stop.is_set():
            r.pump()
            ticks.append(time.monotonic())
            time.sleep(0.02)

    t = threading.Thread(target=ui_thread, name="fake-ui")
    t.start()
    try:
        try:
            assert env.entered.wait(60), "no reward was computed"
            n = len(ticks)
            # The env loop stays blocked until after this check: the drain cannot be waiting for it.
            assert wait_for(lambda: len(ticks) >= n + 10), "the UI-side drain stalled while the env loop was blocked"
            time.sleep(1.0)  # keep the loop blocked at least this long (a lower bound) for the heartbeat
        finally:
            env.release.set()
        end = time.monotonic() + 60
        while time.monotonic() < end and r.state.accounting.completed < 2:
            time.sleep(0.05)
    finally:
        stop.set()
        t.join(10)
    assert r.state.accounting.completed == 2
    # The host's heartbeat saw the block (held for over a second) ...
    r.until(lambda s: s.loop_lag_max_ms >= 800, 30, "the block reached the console as loop lag")
    assert max(e.lag_ms for e in r.of("loop_lag")) >= 800
    # Commands are answered once the block ends, and the lag falls back: the run recovered.
    r.assert_alive()
    r.until(lambda s: s.loop_lag_ms < 200, 60, "lag back to normal")
    r.assert_accounted()
    r.assert_jsonl_complete()
    r.stop_clean()


def test_setup_raises_in_the_console(sim, tmp_path, run):
    r = run(fault_spec(sim, tmp_path, env=SetupRaisesEnv))
    r.until(lambda s: s.status == "error", 30, "error status")
    assert "setup() raised RuntimeError: could not open the task database" in r.state.status_detail
    assert "Traceback" not in r.state.status_detail
    # The console stays up (UI mode): commands are answered, nothing was taken.
    r.assert_alive()
    assert r.state.accounting.received == 0
    r.stop_clean()


def _cli(*args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, cwd=str(REPO), env=env)


def test_setup_raises_headless_cli_exits_non_zero(sim, tmp_path):
    proc = _cli(
        "run",
        f"{REPO}/tests/faults/fault_envs.py:SetupRaisesEnv",
        "--headless",
        "--openai.base_url",
        f"{sim.base_url}/v1",
        "--runs-dir",
        str(tmp_path),
        "--env.data_path_to_save_groups",
        str(tmp_path / "g.jsonl"),
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "setup() raised RuntimeError: could not open the task database" in out
    assert "Traceback" not in out


def test_get_next_item_raises_stops_intake_keeps_in_flight_work(sim, tmp_path, run):
    r = run(fault_spec(sim, tmp_path, total_steps=10, env=NextItemRaisesEnv, max_in_flight=3))
    r.until(lambda s: s.status == "error", 60, "error status")
    detail = r.state.status_detail
    assert "get_next_item()" in detail and "Input/output error reading shard 7" in detail, detail
    assert "Traceback" not in detail
    # The 3 good items were taken and none of their work was thrown away.
    a = r.state.accounting
    assert a.received == 3 and a.in_flight == 0
    assert a.cancelled == 0, a
    assert a.completed == 3, a
    assert any(log.level == "ERROR" and "get_next_item()" in log.message for log in r.state.logs)
    r.assert_alive()  # UI mode: the console stays up to show it
    r.assert_accounted()
    r.assert_jsonl_complete()
    r.stop_clean()


@pytest.mark.parametrize("where", ["file-in-the-way", "read-only-dir"])
def test_jsonl_target_unwritable_is_a_clear_start_error(sim, tmp_path, run, where):
    if where == "file-in-the-way":
        blocker = tmp_path / "not-a-dir"
        blocker.write_text("a file where the run directory should be\n")
        target, expect = blocker / "groups.jsonl", "is a file, not a directory"
    else:
        # /proc/sys refuses new files even to root (tests run as root here, so chmod proves nothing).
        target, expect = Path("/proc/sys/hermes-fault-test/groups.jsonl"), "is not writable"
    spec = fault_spec(sim, tmp_path, total_steps=1)
    spec.flags[spec.flags.index("--env.data_path_to_save_groups") + 1] = str(target)
    r = run(spec)
    r.until(lambda s: s.status == "error", 30, "error status")
    detail = r.state.status_detail
    assert "env.data_path_to_save_groups" in detail and str(target) in detail and expect in detail, detail
    assert "Traceback" not in detail
    assert r.state.accounting.received == 0
    r.stop_clean()


class _DiskFull:
    """Stands in for the jsonl file object: the disk fills after ``room`` lines."""

    def __init__(self, inner: Any, room: int) -> None:
        self.inner, self.room = inner, room

    def write(self, text: str) -> int:
        if self.room <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= 1
        return self.inner.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_disk_full_keeps_what_was_written_and_reports_it(sim, tmp_path, run):
    r = run(fault_spec(sim, tmp_path, total_steps=8, max_in_flight=2))
    r.until(
        lambda s: s.status in ("running",) and r.host.driver is not None and r.host.driver.writer is not None,
        30,
        "running",
    )
    writer = r.host.driver.writer
    with writer._lock:
        writer._fp = _DiskFull(writer._fp, room=2)
    r.until(lambda s: s.status == "error" or s.accounting.failed >= 1, 60, "the sink failure")
    # The run ends with the error once the groups still in flight are done: wait for both.
    r.until(lambda s: s.accounting.in_flight == 0 and s.status == "error", 60, "in-flight settled, run stopped")
    failed = r.of("item_failed")
    assert failed and all("No space left on device" in e.error for e in failed), failed
    assert r.state.status == "error" and "No space left on device" in r.state.status_detail
    assert any(log.level == "ERROR" and "No space left" in log.message for log in r.state.logs)
    # What was written stays, whole, and matches what the console counted as completed.
    lines = Path(r.state.run.jsonl_path).read_text().splitlines()
    assert len(lines) == r.state.accounting.completed == 2
    assert all(json.loads(line)["scores"] is not None for line in lines)
    # Intake stopped: the run does not keep burning rollouts it cannot save.
    assert r.state.accounting.received < 8
    r.assert_alive()
    r.assert_accounted()
    r.stop_clean()
