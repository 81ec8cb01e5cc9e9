"""``hermes-console check-data``: clean on our real runs, each problem kind caught on corrupted data."""

from __future__ import annotations

import copy
import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_console.check_data import KINDS
from hermes_console.check_data import main as check_data
from hermes_console.sim import SimConfig, SimServer

REPO = Path(__file__).resolve().parents[2]
TOOLSETS = "terminal,file"  # terminal_tasks' enabled_toolsets


@pytest.fixture(scope="module")
def sim_url():
    sim = SimServer(SimConfig(solve_rate=0.5, seed=5))
    url = sim.start()
    yield url
    sim.stop()


def process_run(sim_url: str, tmp: Path, *target: str, extra: tuple = ()) -> Path:
    """Groups written by atroposlib's own ``process`` command (Phase 1), as a user runs it."""
    out = tmp / "groups.jsonl"
    env = dict(
        os.environ,
        PYTHONPATH=str(REPO),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        WANDB_MODE="disabled",
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
    )
    proc = subprocess.run(
        [
            sys.executable,
            *target,
            "process",
            "--env.use_wandb",
            "false",
            *extra,
            "--env.data_path_to_save_groups",
            str(out),
            "--openai.base_url",
            f"{sim_url}/v1",
        ],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def phase1_file(sim_url, tmp_path_factory) -> Path:
    return process_run(
        sim_url,
        tmp_path_factory.mktemp("p1"),
        "-m",
        "environments.terminal_tasks.env",
        extra=("--env.total_steps", "2", "--env.group_size", "2", "--openai.model_name", "hermes-sim"),
    )


@pytest.fixture(scope="module")
def phase2_file(sim_url, tokenizer_path, tmp_path_factory) -> Path:
    """One Phase 2 group (real ManagedServer on the simulator's /generate) as atroposlib writes it."""
    import asyncio

    from tests.data.test_phase2_trajectory import make_env

    async def collect():
        env = make_env(sim_url, tokenizer_path, group_size=2)
        await env.setup()
        return (await env.collect_trajectories(await env.get_next_item()))[0]

    group = asyncio.run(collect())
    out = tmp_path_factory.mktemp("p2") / "groups.jsonl"
    out.write_text(json.dumps(dict(group)) + "\n")
    return out


def run(path: Path, *extra: str):
    buf = io.StringIO()
    code = check_data([str(path), *extra], out=buf)
    return code, buf.getvalue()


def test_our_phase1_run_is_clean(phase1_file):
    code, text = run(phase1_file, "--tokenizer", "local", "--tools", TOOLSETS, "--group-size", "2")
    assert code == 0, text
    assert "2 groups, 4 rollouts" in text and "no problems" in text


def test_our_phase2_group_is_clean(phase2_file):
    code, text = run(phase2_file, "--tokenizer", "local", "--tools", TOOLSETS)
    assert code == 0, text


def test_seed_only_env_is_clean_in_both_phases(sim_url, tokenizer_path, tmp_path):
    """An env written only against the seed API, unchanged: process mode, and Phase 2 in process."""
    import asyncio
    import importlib.util

    seed = REPO / "tests" / "environments" / "seed_env_example.py"
    code, text = run(process_run(sim_url, tmp_path, str(seed)), "--tokenizer", "local", "--tools", TOOLSETS)
    assert code == 0, text

    from atroposlib.envs.server_handling.server_baseline import APIServerConfig

    spec = importlib.util.spec_from_file_location("seed_env_example_p2", seed)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config, _ = module.SeedTerminalEnv.config_init()
    servers = [
        APIServerConfig(
            base_url=f"{sim_url}/v1",
            model_name="hermes-sim",
            api_key="x",
            server_type="vllm",
            tokenizer_name=tokenizer_path,
            health_check=False,
            timeout=30,
        )
    ]

    async def collect():
        env = module.SeedTerminalEnv(config, servers)
        await env.setup()
        return (await env.collect_trajectories(await env.get_next_item()))[0]

    p2 = tmp_path / "seed-p2.jsonl"
    p2.write_text(json.dumps(dict(asyncio.run(collect()))) + "\n")
    code, text = run(p2, "--tokenizer", "local", "--tools", TOOLSETS, "--group-size", "2")
    assert code == 0, text


def test_cli_entry_point_and_missing_file(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "hermes_console", "check-data", str(tmp_path / "nope.jsonl")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    assert proc.returncode == 2 and "nope.jsonl is not a file" in proc.stderr


def _corrupt(group: dict, kind: str) -> list:
    """Lines that carry exactly one problem of ``kind`` (built from a good group)."""
    g = copy.deepcopy(group)
    t0, m0 = g["tokens"][0], g["masks"][0]
    trained = next(j for j, m in enumerate(m0) if m != -100)
    masked = next(j for j, m in enumerate(m0) if m == -100)
    if kind == "bad_line":
        return ["{not json"]
    if kind == "missing_field":
        del g["masks"]
    elif kind == "length_mismatch":
        m0.pop()
    elif kind == "mask_value":
        m0[trained] = t0[trained] + 1
    elif kind == "nothing_trained":
        g["masks"][0] = [-100] * len(t0)
    elif kind == "logprob_masked":
        g["inference_logprobs"][0][masked] = -0.5
    elif kind == "logprob_trained":
        g["inference_logprobs"][0][trained] = 0.5
    elif kind == "score_not_finite":
        g["scores"][0] = math.nan
    elif kind == "group_size":
        for key in ("tokens", "masks", "scores", "messages", "inference_logprobs"):
            if key in g:
                g[key] = g[key][:1]
        return [json.dumps(group), json.dumps(g)]
    elif kind == "duplicate_group":
        return [json.dumps(group), json.dumps(group)]
    elif kind == "decode_mismatch":
        g["messages"][0][1]["content"] += " (edited after the fact)"
    elif kind == "mask_spans":
        # train the tool output: a trainer would learn text the model never wrote
        tool_start = next(j for j in range(trained, len(m0)) if m0[j] == -100)
        m0[tool_start : tool_start + 6] = t0[tool_start : tool_start + 6]
    return [json.dumps(g)]


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_problem_kind_is_reported(kind, phase1_file, phase2_file, tmp_path):
    source = phase2_file if kind.startswith("logprob") else phase1_file
    good = json.loads(source.read_text().splitlines()[0])
    bad = tmp_path / f"{kind}.jsonl"
    bad.write_text("\n".join(_corrupt(good, kind)) + "\n")
    code, text = run(bad, "--tokenizer", "local", "--tools", TOOLSETS)
    assert code == 1, text
    reported = [line.split()[0] for line in text.splitlines()[2:] if line.split() and line.split()[0] in KINDS]
    assert reported == [kind], text
