"""Phase 1 -> 2 -> 1 under load (real token ids in phase 2, real tokenization in
phase 1), an evaluation while training runs, and 10 round trips that leak nothing."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from hermes_console.runtime.errors import EvalBusy
from tests.runtime.runtime_helpers import identity, make_spec


def _rows_by_phase(p):
    """jsonl rows paired with the phase of the group that wrote them (writes happen in completion order)."""
    phase_of = {e.group_id: e.phase for e in p.of("group_started")}
    rows = [json.loads(x) for x in Path(p.state.run.jsonl_path).read_text().splitlines()]
    completed = p.of("item_completed")
    assert len(rows) == len(completed)
    return [(phase_of[e.group_id], row) for e, row in zip(completed, rows)]


def _check_tokens(row, tokenizer, phase):
    for tokens, masks, messages in zip(row["tokens"], row["masks"], row["messages"]):
        assert len(tokens) == len(masks) and len(tokens) > 16
        assert all(isinstance(t, int) for t in tokens)
        assert masks[0] == -100, "the prompt must be masked"
        trained = [m for m in masks if m != -100]
        assert trained, f"phase {phase}: nothing to train on"
        assert all(m == t for m, t in zip(masks, tokens) if m != -100)
        text = tokenizer.decode(tokens)
        user = next(m["content"] for m in messages if m["role"] == "user")
        assert user[:60] in text, f"phase {phase}: tokens do not decode to the conversation"
        assert len(set(tokens)) > 10, "placeholder tokens"


def test_phase_switch_under_load_and_eval_while_running(sim, tmp_path, live, tokenizer):
    p = live(make_spec(sim, tmp_path, "--env.total_steps", "1000", max_in_flight=4))
    p.until(lambda s: s.accounting.completed >= 2, 60, "2 phase-1 groups")

    p.host.switch_phase(2).result(60)
    p.pump()
    stages = [e.stage for e in p.of("phase_switch")]
    assert stages == ["requested", "draining", "rebuilding", "done"]
    assert p.state.run.phase == 2 and p.host.driver.phase == 2
    assert all(server.config.server_type == "vllm" for server in p.host.env.server.servers)
    base = p.state.accounting.completed
    p.until(lambda s: s.accounting.completed >= base + 2 and s.status == "running", 60, "2 phase-2 groups")

    # evaluate while training continues; a second request is refused clearly
    fut = p.host.evaluate()
    second = p.host.evaluate()
    with pytest.raises(EvalBusy, match="already running"):
        second.result(10)
    metrics = fut.result(90)
    assert metrics and all(isinstance(v, (int, float)) for v in metrics.values())
    p.pump()
    finished = p.of("eval_finished")[-1]
    assert finished.error is None and finished.metrics == metrics
    eval_dir = Path(p.state.run.jsonl_path).parent / "evals" / finished.eval_id
    assert json.loads((eval_dir / "metrics.json").read_text())["results"]["all"] == metrics
    assert (eval_dir / "samples.jsonl").exists() and finished.samples_path == str(eval_dir / "samples.jsonl")
    assert p.of("eval_progress") and p.of("eval_progress")[-1].done >= 1
    assert not [g for g in p.state.active_groups() if g.group_id.startswith("eval-")]

    p.host.switch_phase(1).result(60)
    base = p.state.accounting.completed
    p.until(lambda s: s.accounting.completed >= base + 1, 60, "phase-1 group after switching back")
    p.stop(deadline=10)
    assert identity(p.state, p.events) is None

    by_phase = _rows_by_phase(p)
    assert {ph for ph, _ in by_phase} == {1, 2}
    for phase, row in by_phase:
        _check_tokens(row, tokenizer, phase)
    finished_rollouts = p.of("rollout_finished")
    p2 = [r for r in finished_rollouts if r.phase == 2]
    p1 = [r for r in finished_rollouts if r.phase == 1]
    assert p2 and all(r.node_count >= 1 and not r.placeholder_tokens for r in p2 if r.error is None)
    assert p1 and not any(r.placeholder_tokens for r in p1)


def test_ten_round_trips_leak_no_task_client_or_thread(sim, tmp_path, live):
    p = live(make_spec(sim, tmp_path, "--env.total_steps", "1000", max_in_flight=2))
    p.until(lambda s: s.accounting.received >= 2, 60, "groups started")
    p.host.pause().result(5)
    p.until(lambda s: s.accounting.in_flight == 0, 60, "drained")
    before = p.host.diagnostics().result(5)
    threads_before = threading.active_count()
    managers = []
    for _ in range(10):
        for phase in (2, 1):
            p.host.switch_phase(phase).result(30)
            managers.append(p.host.env.server)
    after = p.host.diagnostics().result(5)
    assert after.tasks == before.tasks
    assert threading.active_count() <= threads_before
    assert after.phase == 1
    # every replaced manager had its HTTP clients closed
    for old in managers[:-1]:
        for server in old.servers:
            assert server.openai.is_closed()
            session = getattr(server, "_session", None)  # the lean chat path's pool (Phase 1)
            assert session is None or session.closed
    p.pump()
    assert [e.stage for e in p.of("phase_switch")].count("done") == 20
    assert p.state.status == "paused"


def test_failed_switch_names_the_cause_and_keeps_the_old_phase(sim, tmp_path, live):
    p = live(
        make_spec(
            sim,
            tmp_path,
            "--env.total_steps",
            "1000",
            "--phase2.tokenizer_name",
            str(tmp_path / "no-tokenizer"),
            max_in_flight=2,
        )
    )
    p.until(lambda s: s.accounting.received >= 1, 60, "running")
    assert any(
        "phase2[0].tokenizer_name" in r.message and "is not a local directory" in r.message for r in p.state.logs
    )
    with pytest.raises(Exception, match="no-tokenizer"):
        p.host.switch_phase(2, cancel_in_flight=True).result(60)
    p.pump()
    last = p.of("phase_switch")[-1]
    assert last.stage == "failed" and "could not build phase 2 servers" in last.detail
    assert p.host.driver.phase == 1 and p.state.run.phase == 1
    assert all(server.config.server_type == "openai" for server in p.host.env.server.servers)
    cancelled = p.of("item_cancelled")
    assert cancelled and all(e.requeued for e in cancelled)
    received = p.state.accounting.received
    p.until(lambda s: s.accounting.received > received, 30, "intake resumed after the failed switch")
    assert identity(p.state, p.events) is None
