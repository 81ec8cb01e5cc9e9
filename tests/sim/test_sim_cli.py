"""``python -m hermes_console.sim``: prints the URL, serves, stops on SIGINT; bad flags exit 2."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from hermes_console.sim.cli import build_parser, config_from_args, main


def test_flags_build_the_config():
    args = build_parser().parse_args(
        [
            "--port",
            "0",
            "--latency-ms",
            "20",
            "--latency-sigma",
            "0.3",
            "--tokens-per-s",
            "50",
            "--solve-rate",
            "0.9",
            "--seed",
            "4",
            "--fault",
            "http_500=0.1",
            "--fault",
            "hang=0.01",
        ]
    )
    cfg = config_from_args(args)
    assert cfg.latency.mode == "lognormal" and cfg.latency.mean_ms == 20 and cfg.latency.sigma == 0.3
    assert cfg.latency.tokens_per_s == 50 and cfg.solve_rate == 0.9 and cfg.seed == 4
    assert cfg.faults == {"http_500": 0.1, "hang": 0.01}


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--fault", "nope=1"], "unknown fault kind 'nope'"),
        (["--fault", "http_500"], "expected KIND=RATE"),
        (["--fault", "http_500=2"], "[0, 1]"),
        (["--solve-rate", "1.5"], "solve_rate"),
    ],
)
def test_bad_flags_exit_2_with_a_message(argv, needle, capsys):
    assert main(argv) == 2
    assert needle in capsys.readouterr().err


def test_module_runs_until_sigint(tmp_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "hermes_console.sim", "--port", "0", "--phase2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )
    try:
        deadline = time.monotonic() + 20
        url = None
        lines = []
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
            url = url or (m.group(1) if m else None)
            if line.startswith("Ctrl-C"):
                break
        assert url, lines
        with urllib.request.urlopen(f"{url}/health", timeout=5) as r:
            assert r.status == 200
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=10)
        assert proc.returncode == 0 and "stopped" in rest
        assert "server_type='vllm'" in "".join(lines)  # --phase2 hints
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
