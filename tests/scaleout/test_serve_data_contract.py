"""Serve mode: what a real `run-api` hands the trainer passes `check-data` (issue 11), in both phases."""

from __future__ import annotations

import asyncio
import io
import json

import pytest

from hermes_console.check_data import main as check_data
from hermes_console_dev.fake_trainer import run_trainer
from tests.scaleout.scaleout_helpers import spec_for

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("phase", [1, 2])
def test_groups_received_by_the_trainer_pass_check_data(phase, tmp_path, sims, run_api, live):
    sim = sims()
    spec = spec_for(
        tmp_path,
        "--openai.base_url",
        f"{sim.base_url}/v1",
        "--env.rollout_server_url",
        run_api.url,
        "--env.total_steps",
        "2",
        mode="serve",
        phase=phase,
        max_in_flight=2,
    )
    p = live(spec)
    p.until(lambda s: s.trainer is not None and s.trainer.state == "waiting", 60, "TrainerStatus waiting")
    trainer = asyncio.run(run_trainer(run_api.url, steps=1, batch_size=8, deadline_s=60, reset=False))
    groups = [g for batch in trainer.batches for g in batch]
    assert len(groups) == 2
    received = tmp_path / "received.jsonl"
    received.write_text("".join(json.dumps(g) + "\n" for g in groups))
    out = io.StringIO()
    code = check_data([str(received), "--tokenizer", "local", "--tools", "terminal,file", "--group-size", "4"], out=out)
    assert code == 0, out.getvalue()
    if phase == 2:
        assert all(g.get("inference_logprobs") for g in groups)  # logprobs reached the trainer and were checked
    p.until(lambda s: s.status == "finished", 60, "serve run finished")
    dh = p.state.data_health
    assert dh.rollouts >= 8 and dh.healthy, dh.problems()
