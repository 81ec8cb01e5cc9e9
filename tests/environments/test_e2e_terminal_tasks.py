"""End to end: the embedded simulator + real tools/sandboxes + atroposlib's own CLI.

Phase 1 goes through ``process`` / ``evaluate`` subprocesses exactly as a user
would run them; Phase 2 runs in-process through ManagedServer against the
simulator's vLLM-style ``/generate``. Only loopback traffic.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_console.sim import SimConfig, SimServer

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sim_url():
    sim = SimServer(SimConfig(solve_rate=1.0, seed=1))
    url = sim.start()
    yield url
    sim.stop()


def run_cli(args, cwd: Path, timeout: float = 90) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.update(
        PYTHONPATH=str(REPO),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        WANDB_MODE="disabled",
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
    )
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def read_groups(path: Path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_phase1_process_cli(sim_url, tmp_path):
    out = tmp_path / "g.jsonl"
    proc = run_cli(
        [
            "-m",
            "environments.terminal_tasks.env",
            "process",
            "--env.total_steps",
            "2",
            "--env.group_size",
            "2",
            "--env.use_wandb",
            "false",
            "--env.data_path_to_save_groups",
            str(out),
            "--openai.base_url",
            f"{sim_url}/v1",
            "--openai.model_name",
            "hermes-sim",
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    groups = read_groups(out)
    assert len(groups) == 2 and out.with_suffix(".html").exists()
    for group in groups:
        assert len(group["scores"]) == 2 and all(0.0 <= s <= 1.0 for s in group["scores"])
        assert len(group["tokens"]) == len(group["masks"]) == 2
        for tokens, masks, messages in zip(group["tokens"], group["masks"], group["messages"]):
            assert len(tokens) == len(masks) and -100 in masks
            assert any(m["role"] == "tool" for m in messages)  # tools really ran
    assert any(s == 1.0 for g in groups for s in g["scores"])  # solve_rate 1.0: the scripted agent solves tasks


def test_seed_env_runs_unchanged_in_process_mode(sim_url, tmp_path):
    out = tmp_path / "seed.jsonl"
    proc = run_cli(
        [
            str(REPO / "tests/environments/seed_env_example.py"),
            "process",
            "--env.use_wandb",
            "false",
            "--env.data_path_to_save_groups",
            str(out),
            "--openai.base_url",
            f"{sim_url}/v1",
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    groups = read_groups(out)
    assert len(groups) == 2 and all(len(g["scores"]) == 2 for g in groups)
    assert all(g["messages"][0][0]["role"] == "user" for g in groups)


def test_evaluate_cli_writes_metrics_and_samples(sim_url, tmp_path):
    eval_dir = tmp_path / "eval"
    proc = run_cli(
        [
            "-m",
            "environments.terminal_tasks.env",
            "evaluate",
            "--env.use_wandb",
            "false",
            "--env.data_dir_to_save_evals",
            str(eval_dir),
            "--openai.base_url",
            f"{sim_url}/v1",
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((eval_dir / "metrics.json").read_text())["results"]["all"]
    samples = read_groups(eval_dir / "samples.jsonl")
    from environments.terminal_tasks.tasks import load_tasks

    assert metrics["eval/total_tasks"] == len(load_tasks(split="eval")) == len(samples)
    assert 0.0 <= metrics["eval/pass_rate"] <= 1.0
    assert metrics["eval/passed_tasks"] == sum(1 for s in samples if s["passed"])
    assert all(s["messages"] for s in samples)


async def test_phase2_managed_server_tokens_line_up(sim_url, tokenizer_path, tokenizer):
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig

    from environments.terminal_tasks.env import TerminalTasksEnv

    config, _ = TerminalTasksEnv.config_init()
    config.group_size = 2
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
    env = TerminalTasksEnv(config, servers)
    assert env._use_managed_server()
    await env.setup()
    item = await env.get_next_item()
    group, _ = await env.collect_trajectories(item)
    schemas = env._tools_for_toolsets(config.enabled_toolsets)[0]
    for tokens, masks, logprobs, messages in zip(
        group["tokens"], group["masks"], group["inference_logprobs"], group["messages"]
    ):
        assert len(tokens) == len(masks) == len(logprobs) > 0
        trained = [i for i, m in enumerate(masks) if m != -100]
        assert trained and all(masks[i] == tokens[i] for i in trained)
        assert all(logprobs[i] == 1.0 for i, m in enumerate(masks) if m == -100)  # prompt positions
        assert all(logprobs[i] <= 0.0 for i in trained)
        text = tokenizer.decode(tokens)
        prompt = tokenizer.apply_chat_template(messages[:2], tools=schemas, tokenize=False, add_generation_prompt=True)
        assert text.startswith(prompt)
        # The whole conversation is in the one sequence, exactly as the messages render (issue 11).
        rendered = tokenizer.apply_chat_template(messages, tools=schemas, tokenize=False)
        assert text == rendered
        # <tool_call> text in the raw completions became executed tool calls; an assistant message whose
        # sampled text the template cannot re-render from tool_calls keeps that text and parsed_tool_calls
        assert "<tool_call>" in text and any(m["role"] == "tool" for m in messages)
        assert all(
            m.get("tool_calls") or m.get("parsed_tool_calls")
            for m in messages
            if m["role"] == "assistant" and "<tool_call>" in (m.get("content") or "")
        )
    assert group["scores"] == [1.0, 1.0]
