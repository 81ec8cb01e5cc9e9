"""The sbatch recipe's environment handling, without Slurm: the script is run by bash with the
variables an array task sees, and a stand-in ``hermes-console`` that records its argv and writes
the ``listen.json`` a listening host writes. Also the cluster harness's skip reasons."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import time
from pathlib import Path

import pytest

from tests.slurm import slurm_cluster
from tests.slurm.slurm_cluster import ClusterUnavailable, SlurmCluster, ensure_installed

pytestmark = pytest.mark.timeout(120)

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "slurm" / "hermes-hosts.sbatch"

FAKE_HOST = r"""#!/bin/bash
if [ "$1" = sim ]; then echo "hermes-sim listening on http://127.0.0.1:5555"; exec sleep 60; fi
printf '%s\n' "$@" > "$FAKE_ARGV"
while [ $# -gt 0 ]; do [ "$1" = --runs-dir ] && runs=$2; shift; done
mkdir -p "$runs/run-1" && echo '{"address": "0.0.0.0:4242"}' > "$runs/run-1/listen.json"
sleep 1.5
exit 3
"""

# run-api stand-in: any HTTP answer on /status will do for the script's readiness check
FAKE_RUN_API = """#!/bin/sh
exec python3 -m http.server --bind "$2" "$4"
"""

FAKE_SCONTROL = """#!/bin/sh
echo "KillWait                = 12 sec"
"""


def _run_task(tmp_path: Path, **extra: str) -> tuple[subprocess.CompletedProcess, list[str], Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("hermes-console", FAKE_HOST), ("scontrol", FAKE_SCONTROL), ("run-api", FAKE_RUN_API)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env: dict[str, str] = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "FAKE_ARGV": str(tmp_path / "argv"),
        "SLURM_ARRAY_TASK_ID": "1",
        "SLURM_ARRAY_TASK_MIN": "0",
        "SLURM_ARRAY_TASK_COUNT": "2",
        "SLURM_ARRAY_JOB_ID": "77",
        "SLURM_JOB_ID": "79",
        "SLURM_SUBMIT_DIR": str(tmp_path),
        "HERMES_BIN": str(bin_dir / "hermes-console"),
        "HERMES_RUN_API_URL": "http://10.0.0.1:8000",
        "HERMES_OPENAI_URL": "http://10.0.0.2:9000/v1",
        **extra,
    }
    done = subprocess.run(
        ["bash", str(SCRIPT), "--env.group_size", "8"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=str(tmp_path),
    )
    argv = (tmp_path / "argv").read_text().splitlines() if (tmp_path / "argv").exists() else []
    return done, argv, tmp_path / "hermes-runs" / "77"


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_one_task_runs_a_serve_host_with_its_own_dirs_and_a_drain_inside_killwait(tmp_path):
    done, argv, job_dir = _run_task(tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode == 3, out  # the host's exit code is the task's
    assert argv[:5] == ["run", "environments.terminal_tasks", "--headless", "--mode", "serve"], argv
    assert _flag(argv, "--runs-dir") == str(job_dir / "task-1" / "runs")
    assert _flag(argv, "--record") == str(job_dir / "task-1" / "events.jsonl.gz")
    assert _flag(argv, "--drain-deadline") == "7"  # KillWait 12 s - max(5 s, 12/4 s): done before Slurm's SIGKILL
    assert _flag(argv, "--env.rollout_server_url") == "http://10.0.0.1:8000"
    assert _flag(argv, "--openai.base_url") == "http://10.0.0.2:9000/v1"
    assert argv[-2:] == ["--env.group_size", "8"] and "--shard" not in argv  # the shard comes from Slurm's vars
    assert "--listen" not in argv  # off unless HERMES_LISTEN=1
    assert "host 1 of 2 (shard 1/2)" in out and "host exited with code 3" in out
    assert (job_dir / "task-1.done").read_text().strip() == "3"


def test_listen_flags_token_and_the_attach_command(tmp_path):
    done, argv, job_dir = _run_task(tmp_path, HERMES_LISTEN="1")
    out = done.stdout + done.stderr
    token = job_dir / "listen.token"
    assert _flag(argv, "--listen") == "0.0.0.0:0" and _flag(argv, "--listen-token-file") == str(token), argv
    assert len(token.read_text().strip()) >= 32 and stat.S_IMODE(token.stat().st_mode) == 0o600
    addr = f"{socket.gethostname()}:4242"  # 0.0.0.0 in listen.json: other machines need the node's name
    assert (job_dir / "task-1.addr").read_text().strip() == addr
    assert f"attach {addr} --token-file {token}" in out, out
    assert f"attach $(cat {job_dir}/task-*.addr) --token-file {token}" in out, out


def test_task_0_starts_run_api_and_a_simulator_and_stops_them(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done, argv, job_dir = _run_task(
        tmp_path,
        SLURM_ARRAY_TASK_ID="0",
        SLURM_ARRAY_TASK_COUNT="1",
        HERMES_RUN_API_URL="",
        HERMES_OPENAI_URL="",
        HERMES_SIM="1",
        HERMES_RUN_API_BIND="127.0.0.1",
        HERMES_RUN_API_PORT=str(port),
    )
    out = done.stdout + done.stderr
    url = f"http://127.0.0.1:{port}"
    assert done.returncode == 3, out
    assert _flag(argv, "--env.rollout_server_url") == url and (job_dir / "run-api.url").read_text().strip() == url
    assert _flag(argv, "--openai.base_url") == "http://127.0.0.1:5555/v1"
    assert f"started run-api at {url}" in out
    end = time.monotonic() + 30  # the job's run-api is stopped when the task ends
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) != 0:
                break
        time.sleep(0.2)
    else:
        raise AssertionError(f"run-api still answers on {url} after the task ended")


@pytest.mark.parametrize(
    "drop,expected",
    [
        ("SLURM_ARRAY_TASK_ID", "not an array task: submit with sbatch --array"),
        ("HERMES_OPENAI_URL", "set HERMES_OPENAI_URL"),
    ],
)
def test_missing_settings_are_named(tmp_path, drop, expected):
    env_extra = {drop: ""}
    done, argv, _ = _run_task(tmp_path, **env_extra)
    assert done.returncode == 2 and expected in done.stderr, done.stderr
    assert argv == []  # no host started


def test_skip_reasons_say_what_is_missing(monkeypatch):
    monkeypatch.setattr(slurm_cluster, "missing_binaries", lambda: ["slurmctld", "munged"])
    monkeypatch.setattr(slurm_cluster.os, "geteuid", lambda: 1000)
    with pytest.raises(
        ClusterUnavailable,
        match=r"missing slurmctld, munged\) and not root: cannot apt-get install "
        r"slurm-wlm munge",
    ):
        ensure_installed()
    with pytest.raises(ClusterUnavailable, match="not root: munged must run as the munge user"):
        SlurmCluster().start()
    monkeypatch.setattr(slurm_cluster.os, "geteuid", lambda: 0)
    monkeypatch.setattr(slurm_cluster.shutil, "which", lambda name: None)
    with pytest.raises(ClusterUnavailable, match="no apt-get to install slurm-wlm munge"):
        ensure_installed()
