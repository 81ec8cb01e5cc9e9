"""A headless host with no terminal (a Slurm or Kubernetes log) prints a progress line at a
steady interval: the counts move, and the last line agrees with the summary."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(180)


def test_headless_without_a_terminal_logs_progress_lines(sim, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env["HERMES_PROGRESS_EVERY"] = "0.2"
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
            "--openai.base_url",
            f"{sim.base_url}/v1",
            "--env.total_steps",
            "4",
            "--env.group_size",
            "2",
            "--shard",
            "1/2",
        ],
        capture_output=True,
        text=True,
        timeout=150,
        cwd=str(REPO),
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("progress status=")]
    assert len(lines) >= 2, proc.stdout[-2000:]
    received = [int(re.search(r"received=(\d+)", ln).group(1)) for ln in lines]
    assert received == sorted(received) and received[-1] >= 1  # counts only move forward
    assert all("shard=1/2" in ln for ln in lines if "status=running" in ln)
    assert "shard" in proc.stdout and "1/2 (--shard)" in proc.stdout  # the summary says which share ran
