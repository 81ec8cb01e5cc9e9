"""An unusable sandbox backend (issue 19, point 6): a sandbox root nothing can be created in
stops intake with a clear fatal error and a non-zero exit, instead of producing reward-0
groups that look like training data. Through the real CLI."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.faults.cli_stop_helpers import REPO, assert_every_item_accounted, cli_env, read_record, whole_lines

pytestmark = pytest.mark.timeout(180)


def test_unusable_sandbox_root_stops_intake_fatally_and_keeps_nothing(sim, tmp_path):
    groups = tmp_path / "run" / "groups.jsonl"
    record = tmp_path / "events.jsonl.gz"
    env = cli_env()
    env["TERMINAL_SANDBOX_ROOT"] = "/proc/sys/hermes-no-such-dir"  # /proc/sys refuses new entries, even to root
    env["TERMINAL_ENV"] = "local"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "hermes_console",
            "run",
            "environments.terminal_tasks",
            "--headless",
            "--runs-dir",
            str(tmp_path),
            "--record",
            str(record),
            "--openai.base_url",
            f"{sim.base_url}/v1",
            "--openai.timeout",
            "10",
            "--env.data_path_to_save_groups",
            str(groups),
            "--env.total_steps",
            "40",
            "--env.group_size",
            "2",
            "--env.max_agent_turns",
            "3",
            "--max-in-flight",
            "4",
        ],
        capture_output=True,
        text=True,
        timeout=150,
        cwd=str(REPO),
        env=env,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "rollouts all failed" in out and "intake stopped" in out, out[-3000:]
    assert "/proc/sys/hermes-no-such-dir" in out  # the cause names the root
    assert "Traceback" not in out
    assert whole_lines(groups) == []  # no reward-0 group kept
    o = assert_every_item_accounted(read_record(record))
    assert o.count("item_completed") == 0
    assert 0 < len(o.received) < 40, len(o.received)  # stopped early, not after every item
    assert o.count("item_dropped") >= 1
