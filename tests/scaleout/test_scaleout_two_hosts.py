"""The worked example of docs/scaling-out.md, as processes: one `run-api`, one
simulator, two headless `hermes-console run --mode serve` hosts and the stand-in
trainer. Both hosts get a share of the weight, both send groups, all exit 0."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers.cli import REPO
from tests.scaleout.scaleout_helpers import VENV_BIN, child_env, read_events

pytestmark = pytest.mark.timeout(150)

STEPS = 6


def test_two_headless_hosts_share_one_trainer(tmp_path, sims, run_api):
    sim = sims(latency_ms=80.0)
    hosts = []
    for name in ("a", "b"):
        argv = [
            str(VENV_BIN / "hermes-console"),
            "run",
            "environments.terminal_tasks",
            "--mode",
            "serve",
            "--headless",
            "--runs-dir",
            str(tmp_path / name),
            "--record",
            str(tmp_path / f"{name}.jsonl"),
            "--env.rollout_server_url",
            run_api.url,
            "--env.total_steps",
            str(STEPS),
            "--openai.base_url",
            f"{sim.base_url}/v1",
        ]
        log = open(tmp_path / f"host-{name}.log", "w")
        hosts.append((name, subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=child_env()), log))
    try:
        trainer = subprocess.run(
            [
                sys.executable,
                "-m",
                "hermes_console_dev.fake_trainer",
                "--api",
                run_api.url,
                "--steps",
                str(STEPS),
                "--batch-size",
                "8",
                "--deadline-s",
                "100",
                "--no-reset",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=child_env(),
            cwd=str(REPO),  # a dev tool: run from the checkout
        )
        assert trainer.returncode == 0, trainer.stdout + trainer.stderr
        summary = json.loads(trainer.stdout.strip().splitlines()[-1])
        assert summary["batches"] == STEPS and summary["env_ids"] == [0, 1]
        codes = {name: proc.wait(90) for name, proc, _ in hosts}
    finally:
        for _, proc, log in hosts:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            log.close()
    logs = {name: (tmp_path / f"host-{name}.log").read_text() for name, _, _ in hosts}
    assert codes == {"a": 0, "b": 0}, logs

    for name, _, _ in hosts:
        events = read_events(tmp_path / f"{name}.jsonl")
        trainer_events = [e for e in events if e["kind"] == "trainer_status"]
        assert trainer_events[0]["state"] in ("waiting", "registered")  # the trainer may start first
        assert trainer_events[-1]["state"] == "finished", (name, trainer_events[-1])
        # two envs with the same max_token_length share the trainer evenly
        assert any(abs(e["env_weight"] - 0.5) < 1e-6 for e in trainer_events), name
        last = trainer_events[-1]
        assert last["groups_sent"] >= 1 and last["send_errors"] == 0, (name, last)
        completed = [e for e in events if e["kind"] == "item_completed"]
        assert len(completed) == last["groups_sent"]
        [jsonl] = list((tmp_path / name).glob("*/groups.jsonl"))
        assert len(jsonl.read_text().splitlines()) == len(completed)
        assert [e for e in events if e["kind"] == "runtime_status"][-1]["status"] == "finished"
