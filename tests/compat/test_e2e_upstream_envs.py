"""Envs written for the original layer, run end to end unchanged: through the console's
host against the embedded simulator, and through atroposlib's own CLI (which bypasses
our loader, so the import hook must come with ``import environments``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes_console.runtime.config import RunSpec
from tests.compat.conftest import ENVS, SEED_ENV
from tests.helpers.live import HostStarter, started_hosts
from tests.runtime.runtime_helpers import Pump

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture
def live() -> Iterator[HostStarter[Pump]]:
    yield from started_hosts(Pump, exit_when_finished=True)


def _spec(env_file: str, tmp_path: Path, *flags: str) -> RunSpec:
    return RunSpec(
        env=str(ENVS / env_file),
        mode="process",
        runs_dir=str(tmp_path),
        flags=["--env.data_path_to_save_groups", str(tmp_path / "run" / "groups.jsonl"), *flags],
    )


def _run_to_end(p: Pump) -> None:
    p.until(lambda s: s.status in ("finished", "failed", "stopped"), 90, "the run to finish")
    assert p.state.status == "finished", f"{p.state.status}: {p.state.status_detail}"


def _requests(sim) -> dict[str, int]:
    return dict(sim.stats()["requests"])


def _diff(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) - before.get(k, 0)}


def _groups(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "run" / "groups.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _report(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_seed_only_env_with_vllm_config_runs_and_shows_phase_2(sim, compat_env, live, tmp_path):
    before = _requests(sim)
    p = live(_spec(str(SEED_ENV), tmp_path))
    _run_to_end(p)
    used = _diff(_requests(sim), before)
    # what ran (the simulator saw token-level /generate calls, no chat) is what was shown
    assert used.get("generate_vllm", 0) > 0 and not any(k.startswith("chat") for k in used), used
    [configured] = p.of("run_configured")
    assert configured.phase == 2 and configured.servers[0].startswith("vllm ")
    assert {e.phase for e in p.of("group_started")} == {2}
    groups = _groups(tmp_path)
    assert len(groups) == 2 and all(len(g["scores"]) == 2 for g in groups)
    assert any(s == 1.0 for g in groups for s in g["scores"])  # solve_rate 1.0: tasks really solved


def test_env_using_every_upstream_name_runs_unchanged(sim, compat_env, live, tmp_path):
    p = live(_spec("upstream_names_env.py", tmp_path))
    _run_to_end(p)
    report = _report(compat_env)
    [setup] = [r for r in report if r.get("setup")]
    assert setup["qwen"] == ["terminal"] and setup["qwen_is_openai"] and setup["hermes_class"]
    assert setup["parser_listed"] and "terminal" in setup["schemas"] and "read_file" in setup["schemas"]
    assert "terminal" in setup["toolset_terminal"] and setup["valid_file"] and setup["distribution"]
    assert setup["sampled"] == ["file", "terminal"] and setup["todo_total"] == 1 and setup["budget"] == 1500

    # Phase 2 without vLLM: the agent loop parsed the model's text with the upstream-style
    # parser (only parse(), openai objects); the tool calls it found really ran.
    parsed = [name for r in report for name in r.get("parser_calls", [])]
    assert parsed and set(parsed) <= {"terminal", "write_file", "read_file", "patch", "search_files"}
    rewards = [r for r in report if r.get("reward")]
    assert len(rewards) == 4  # 2 groups x 2 rollouts
    for r in rewards:
        assert r["overrides"] == {"docker_image": "compat/image:1", "cwd": "/app"}
        assert r["active_env"] and r["raw_is_str"] and r["direct"] == "direct\n"
        assert r["stored"] == "x" * 10 and r["tool_names"]
    groups = _groups(tmp_path)
    assert len(groups) == 2 and any(s == 1.0 for g in groups for s in g["scores"])
    # overrides are cleared after use: nothing left in the registry
    from environments.task_overrides import list_task_env_overrides

    assert list_task_env_overrides() == {}


def test_upstream_env_through_atroposlib_cli(sim, tmp_path):
    """`python env.py process ...` as a user runs it: no hermes-console loader involved."""
    out = tmp_path / "groups.jsonl"
    report = tmp_path / "report.jsonl"
    env = dict(os.environ)
    env.update(
        PYTHONPATH=str(REPO),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        WANDB_MODE="disabled",
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
        COMPAT_BASE_URL=f"{sim.base_url}/v1",
        COMPAT_SERVER_TYPE="openai",
        COMPAT_REPORT=str(report),
    )
    proc = subprocess.run(
        [
            sys.executable,
            str(ENVS / "upstream_names_env.py"),
            "process",
            "--env.use_wandb",
            "false",
            "--env.total_steps",
            "1",
            "--env.data_path_to_save_groups",
            str(out),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    groups = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    assert len(groups) == 1 and len(groups[0]["scores"]) == 2
    rewards = [r for r in _report(report) if r.get("reward")]
    assert len(rewards) == 2 and all(r["overrides"]["cwd"] == "/app" and r["direct"] == "direct\n" for r in rewards)
