"""Bad input at the edges, through the real CLI: a clear message naming what was wrong
and what was expected, a non-zero exit, and never a traceback."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers.cli import CLI

pytestmark = pytest.mark.timeout(90)
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def sim_url():
    from hermes_console.sim.server import SimServer

    with SimServer() as sim:
        yield f"{sim.base_url}/v1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _malformed_yaml(tmp: Path, url: str) -> tuple[list[str], list[str]]:
    cfg = tmp / "bad.yaml"
    cfg.write_text("env:\n  group_size: [1, 2\nopenai:\n  base_url: x\n")
    return ["environments.terminal_tasks", "--config", str(cfg)], [str(cfg), "not valid YAML", "line 2"]


def _unknown_field(tmp: Path, url: str) -> tuple[list[str], list[str]]:
    cfg = tmp / "cfg.yaml"
    cfg.write_text(f"env:\n  group_sise: 4\nopenai:\n  base_url: {url}\n")
    return ["environments.terminal_tasks", "--config", str(cfg)], ["unknown field 'group_sise'", "group_size"]


def _unknown_flag(tmp: Path, url: str) -> tuple[list[str], list[str]]:
    return ["environments.terminal_tasks", "--env.total_stepz", "3", "--openai.base_url", url], [
        "--env.total_stepz",
        "unknown field",
        "total_steps",
    ]


def _no_env_class(tmp: Path, url: str) -> tuple[list[str], list[str]]:
    f = tmp / "not_an_env.py"
    f.write_text("def helper():\n    return 42\n")
    return [str(f), "--openai.base_url", url], ["defines no env class", "BaseEnv"]


def _dataset_missing(tmp: Path, url: str) -> tuple[list[str], list[str]]:
    missing = tmp / "nope" / "tasks.jsonl"
    return ["environments.terminal_tasks", "--env.dataset_name", str(missing), "--openai.base_url", url], [
        "setup() raised",
        "terminal tasks file not found",
        str(missing),
        "expected a JSONL file",
    ]


def _dataset_malformed(tmp: Path, url: str) -> tuple[list[str], list[str]]:
    bad = tmp / "tasks.jsonl"
    bad.write_text(
        '{"task_id": "a", "split": "train", "prompt": "p", "setup": [], '
        '"check": {"type": "command_exit_zero", "command": "true"}}\n{"task_id": "b", "split": \n'
    )
    return ["environments.terminal_tasks", "--env.dataset_name", str(bad), "--openai.base_url", url], [
        "setup() raised",
        f"{bad}:2",
        "not valid JSON",
        "one JSON object per line",
    ]


def _unreachable(tmp: Path, url: str) -> tuple[list[str], list[str]]:
    dead = f"http://127.0.0.1:{_free_port()}/v1"
    return ["environments.terminal_tasks", "--openai.base_url", dead], [
        dead,
        "is not reachable",
        "expected an OpenAI-compatible server",
    ]


CASES: list[Callable[[Path, str], tuple[list[str], list[str]]]] = [
    _malformed_yaml,
    _unknown_field,
    _unknown_flag,
    _no_env_class,
    _dataset_missing,
    _dataset_malformed,
    _unreachable,
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__.strip("_"))
def test_bad_input_gets_a_clear_message_and_non_zero_exit(case, tmp_path, sim_url):
    args, expected = case(tmp_path, sim_url)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env["COLUMNS"] = "500"  # rich wraps the message at the terminal width; keep paths whole
    proc = subprocess.run(
        [*CLI, "run", *args, "--headless", "--runs-dir", str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=str(tmp_path),
        env=env,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-2000:]
    assert "Traceback" not in out, out[-3000:]
    flat = " ".join(out.split())
    for needle in expected:
        assert needle in flat, f"{needle!r} missing from:\n{out[-2000:]}"
