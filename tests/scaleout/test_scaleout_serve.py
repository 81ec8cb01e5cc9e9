"""Serve mode against atroposlib's real `run-api` (a subprocess on a free loopback
port) and the stand-in trainer: registration wait, pacing to total_steps, the
trainer panel figures, a failed send accounted as failed, clear config errors."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from hermes_console.runtime.intake import IntakeGate
from hermes_console.runtime.trainer import GROUP_SIZE_ONE_WARNING, Pacing, TrainerLink
from hermes_console.runtime.trainer_api import EnvStatus
from hermes_console_dev.fake_trainer import run_trainer
from tests.scaleout.scaleout_helpers import identity_holds, link_env_config, spec_for

pytestmark = pytest.mark.timeout(120)


def _serve_spec(tmp_path: Path, sim, api, *flags: str, **kw):
    return spec_for(
        tmp_path,
        "--openai.base_url",
        f"{sim.base_url}/v1",
        "--env.rollout_server_url",
        api.url,
        *flags,
        mode="serve",
        **kw,
    )


def test_serve_registers_waits_paces_to_total_steps_and_finishes(tmp_path, sims, run_api, live):
    sim = sims()
    p = live(_serve_spec(tmp_path, sim, run_api, "--env.total_steps", "3", max_in_flight=4))
    p.until(lambda s: s.trainer is not None and s.trainer.state == "waiting", 60, "TrainerStatus waiting")
    assert p.state.status == "running" and p.state.accounting.received == 0  # waiting, not working, not hung

    trainer = asyncio.run(run_trainer(run_api.url, steps=3, batch_size=8, deadline_s=60, reset=False))
    assert len(trainer.batches) == 3
    for batch in trainer.batches:
        assert [len(g["tokens"]) for g in batch] == [4, 4] and {g["env_id"] for g in batch} == {0}

    p.until(lambda s: s.status == "finished", 60, "serve run finished at total_steps")
    # The host left run-api on its way out (/disconnect-env, not cut short by the driver's stop):
    # an env registered now is the only one connected, so run-api gives it the whole weight.
    watcher = run_api.register_env()
    assert run_api.env_weight(watcher) == pytest.approx(1.0)
    assert not [e for e in p.of("log_record") if e.level == "WARNING" and "left" in e.message]
    states = [e.state for e in p.of("trainer_status")]
    assert states[0] == "waiting" and "registered" in states and states[-1] == "finished"
    t = p.state.trainer
    assert t is not None and t is p.of("trainer_status")[-1]
    assert (t.batch_size, t.group_size, t.total_steps, t.env_id) == (8, 4, 3, 0)
    assert t.env_weight == 1.0 and t.unallocated_fraction == 1.0 and t.warning is None
    assert t.send_errors == 0 and t.wait_trainer_s > 0
    # paced: exactly the 3 batches x 2 groups the trainer needs, nothing thrown away
    assert t.groups_sent == p.state.accounting.completed == 6
    assert identity_holds(p) and p.state.accounting.failed == 0
    lines = Path(tmp_path / "run" / "groups.jsonl").read_text().splitlines()
    assert len(lines) == 6  # the jsonl keeps what was sent
    # The API's step reached the panel (queue sizes are sampled once a second, so a fast
    # trainer may empty the queue between polls: not asserted here).
    assert max(e.current_step for e in p.of("trainer_status")) >= 1


def test_failed_send_is_item_failed_not_completed(tmp_path, sims, run_api, live, monkeypatch):
    from hermes_console.runtime import trainer as trainer_mod

    monkeypatch.setattr(trainer_mod, "SEND_RETRY_WINDOW_S", 2.0)  # how long an unsent group is held for the API
    sim = sims(latency_ms=40.0)
    p = live(_serve_spec(tmp_path, sim, run_api, "--env.total_steps", "40", max_in_flight=3))
    p.until(lambda s: s.trainer is not None and s.trainer.state == "waiting", 60, "waiting")
    asyncio.run(run_trainer(run_api.url, steps=1, batch_size=8, deadline_s=1, reset=False))  # starts the trainer
    p.until(lambda s: s.trainer.groups_sent >= 1 and s.accounting.in_flight >= 1, 60, "a group sent, more in flight")
    run_api.stop()  # the trainer API dies mid-run, for good
    # A post cut by the kill itself is "send_unknown" (it may have been stored); posts after
    # it are refused, held for the retry window, then "send" (provably not delivered).
    p.until(lambda s: s.errors_by_kind["item_send"] >= 1, 60, "a send fails")
    [failed, *_] = [e for e in p.of("item_failed") if e.error_kind == "send"]
    assert {e.error_kind for e in p.of("item_failed")} <= {"send", "send_unknown"}
    assert "not delivered: trainer API unreachable for 2s" in failed.error
    assert run_api.url in failed.error and "unreachable" in failed.error
    assert failed.group_id not in {e.group_id for e in p.of("item_completed")}
    p.until(lambda s: s.trainer.state == "unreachable" and s.trainer.send_errors >= 1, 30, "trainer unreachable")
    assert p.state.trainer.last_send_error.startswith(("not delivered", "delivery unknown"))
    assert p.state.groups[failed.group_id].status == "failed"
    kept = Path(tmp_path / "run" / "groups.jsonl").read_text().splitlines()
    assert len(kept) >= p.state.accounting.completed + 1  # the failed group is still on disk
    # The live host may be appending the next group's line as we read: complete lines only.
    spooled = [json.loads(x) for x in Path(tmp_path / "run" / "unsent.jsonl").read_text().split("\n")[:-1]]
    assert failed.group_id in {r["group_id"] for r in spooled}
    assert "not_sent" in {r["outcome"] for r in spooled} and {r["outcome"] for r in spooled} <= {"not_sent", "unknown"}
    assert identity_holds(p)


def test_group_size_above_batch_size_is_a_clear_error(tmp_path, sims, run_api, live):
    sim = sims()
    p = live(_serve_spec(tmp_path, sim, run_api, "--env.total_steps", "2"))
    p.until(lambda s: s.trainer is not None and s.trainer.state == "waiting", 60, "waiting")
    asyncio.run(run_trainer(run_api.url, steps=1, batch_size=2, deadline_s=1, reset=False))
    p.until(lambda s: s.status == "error", 60, "the run stops with an error")
    assert "group_size (4) is larger than the trainer's batch_size (2)" in p.state.status_detail
    assert p.state.trainer.state == "error"


# --------------------------------------------------------------------------- pacing rules (pure)


def _pacing(**kw) -> Pacing:
    base = dict(group_size=4, batch_size=8, max_batches_offpolicy=3, total_steps=10)
    return Pacing(**{**base, **kw})


def test_backpressure_follows_atropos_rule():
    p = _pacing()
    assert not p.backpressure(EnvStatus(queue_size=5))  # 20 < 24 sequences
    assert p.backpressure(EnvStatus(queue_size=6))  # 24 >= 3 batches x 8
    assert not _pacing(max_batches_offpolicy=0).backpressure(EnvStatus(queue_size=100))
    assert _pacing(batch_size=-1).backpressure(EnvStatus())  # no batch size known: hold
    # min_batch_allocation: keep working until the own share is queued
    mba = _pacing(min_batch_allocation=0.5)
    assert not mba.backpressure(EnvStatus(queue_size=6, self_queue_size=1, max_group_size=4))
    assert mba.backpressure(EnvStatus(queue_size=6, self_queue_size=3, max_group_size=4))


def test_admission_counts_in_flight_and_stops_at_the_target():
    p = _pacing(total_steps=2)
    assert p.admits(EnvStatus(), in_flight=3)  # 3 groups = 12 < 16 sequences needed
    assert not p.admits(EnvStatus(), in_flight=4)  # 4 groups cover 2 batches
    assert not p.admits(EnvStatus(queue_size=2), in_flight=2)
    assert p.admits(EnvStatus(current_step=1, queue_size=1), in_flight=0)
    assert not _pacing(total_steps=100).admits(EnvStatus(queue_size=4), in_flight=2)  # off-policy cap
    assert not p.target_reached(EnvStatus(queue_size=3))
    assert p.target_reached(EnvStatus(queue_size=4))  # everything needed is queued
    assert p.target_reached(EnvStatus(current_step=2))
    assert p.target_reached(EnvStatus(current_step=1, queue_size=2))


def test_group_size_one_warns_that_atropos_under_counts(tmp_path):
    cfg = link_env_config(group_size=1)
    env = SimpleNamespace(config=cfg, env_id=0)
    link = TrainerLink(env, IntakeGate(lambda: 0, 1), tmp_path)
    fields = link._fields()
    assert fields["warning"] == GROUP_SIZE_ONE_WARNING and "under-counts" in fields["warning"]
    cfg.group_size = 4
    assert link._fields()["warning"] is None
    assert json.dumps(fields)  # plain data: it goes into event logs
