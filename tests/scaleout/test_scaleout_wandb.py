"""Serve mode with use_wandb: the wandb run takes project and group from run-api's
``/wandb_info`` (what the trainer registered) and the name run-api assigned, as
atroposlib's ``setup_wandb`` does. Oracle: the offline run read back from wandb's log."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from hermes_console_dev.fake_trainer import run_trainer
from tests.helpers.wandb_records import offline_runs, read_offline_run
from tests.scaleout.scaleout_helpers import spec_for

pytestmark = pytest.mark.timeout(180)


def test_serve_run_logs_to_the_trainers_wandb_project(tmp_path: Path, sims, run_api, live, monkeypatch):
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb-root"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    sim = sims()
    p = live(
        spec_for(
            tmp_path,
            "--openai.base_url",
            f"{sim.base_url}/v1",
            "--env.rollout_server_url",
            run_api.url,
            "--env.use_wandb",
            "true",
            "--env.total_steps",
            "2",
            mode="serve",
            max_in_flight=4,
        )
    )
    p.until(lambda s: s.trainer is not None and s.trainer.state == "waiting", 60, "waiting for the trainer")
    trainer = asyncio.run(
        run_trainer(
            run_api.url, steps=2, batch_size=8, deadline_s=90, reset=False, wandb_project="rl-proj", wandb_group="exp-7"
        )
    )
    p.pump()
    assert len(trainer.batches) == 2, (p.state.status, p.state.status_detail, p.state.wandb, p.state.trainer)
    p.until(lambda s: s.status == "finished", 90, "serve run finished")
    p.stop(2.0)

    (run_dir,) = offline_runs(tmp_path / "wandb-root")
    run = read_offline_run(run_dir)
    assert (run.project, run.group) == ("rl-proj", "exp-7")
    assert run.run_name == p.host.env.wandb_prepend  # the name run-api assigned this env
    assert run.exit_code == 0
    prefix = f"{run.run_name}_"  # atroposlib prefixes the env's metrics with its trainer name
    keys = run.keys()
    assert f"{prefix}train/rollouts/_type" in keys and f"{prefix}hermes/rollouts_per_s" in keys
    assert run.config["mode"] == "serve"
