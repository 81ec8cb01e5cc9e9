"""Operator actions under load (cases 14-16 of #7): quit with 256 rollouts live,
a phase switch and an on-demand evaluation while the simulator injects faults."""

from __future__ import annotations

import time

import pytest

from hermes_console.sim.config import LatencyConfig, SimConfig
from hermes_console.sim.server import SimServer
from tests.faults.faults_helpers import fault_spec, live_sandboxes, write_tasks

pytestmark = pytest.mark.timeout(900)

FAULTS = {"http_500": 0.15, "malformed_tool_json": 0.1, "unknown_tool": 0.05}


def test_quit_with_256_rollouts_live_drains_then_cancels_everything(tmp_path, run, monkeypatch):
    # 256 machines start at once next to three other test workers (and two CPU hogs in the
    # stress runs): a start that is merely slow must not become a tool error that ends the
    # rollout before the count of live ones is reached. Starting is not what this test is about.
    from environments.sandboxes import base

    monkeypatch.setattr(base, "START_TIMEOUT_S", 300.0)
    sim = SimServer(SimConfig(seed=5, latency=LatencyConfig(mode="fixed", mean_ms=50.0), max_concurrency=512))
    sim.start()
    try:
        tasks = write_tasks(tmp_path / "tasks.jsonl", ["Run this command: sleep 600"])
        spec = fault_spec(
            sim,
            tmp_path,
            "--env.terminal_timeout",
            "900",
            "--env.tool_pool_size",
            "256",
            total_steps=1000,
            group_size=8,
            max_turns=3,
            timeout_s=120,  # 256 first calls at once to the in-process simulator on a loaded box
            tasks=tasks,
            max_in_flight=32,
        )
        r = run(spec)
        r.until(
            lambda s: sum(1 for b in s.sandboxes.values() if b.state == "running") >= 256,
            480,  # 256 sandbox machines starting on a loaded 2-core box (~30 s idle)
            "256 rollouts live, each running a command in its own sandbox",
        )
        assert r.state.accounting.in_flight == 32
        assert len([x for x in r.state.rollouts.values() if x.status == "running"]) == 256
        assert len(r.own_processes()) >= 256
        t0 = time.monotonic()
        r.host.stop(1.0).result(timeout=300)
        took = time.monotonic() - t0
        assert r.host.join(15)
        r.pump()
        statuses = [e.status for e in r.of("runtime_status")]
        assert "stopping" in statuses and statuses[-1] == "stopped"
        stopping = next(e for e in r.of("runtime_status") if e.status == "stopping")
        assert "draining 32 group(s) for up to 1s" in stopping.detail
        cancelled = r.of("item_cancelled")
        assert len(cancelled) == 32 and all(e.reason == "stopped" and not e.requeued for e in cancelled)
        assert took < 300, f"stop took {took:.1f}s"  # far below the 600 s sleeps: they were killed, not waited for
        a = r.state.accounting
        assert a.received == 32 and a.cancelled == 32 and a.in_flight == 0
        closed = {e.task_id for e in r.of("sandbox_closed")}
        created = {e.task_id for e in r.of("sandbox_created")}
        assert len(created) >= 256 and created <= closed  # every sandbox reported closed
        r.stop_clean()  # already stopped: checks threads, children, sandboxes, processes
        assert live_sandboxes() == []
    finally:
        sim.stop()


def test_phase_switch_under_load_with_faults_on(sim, tmp_path, run):
    sim.set_faults(**FAULTS)
    r = run(fault_spec(sim, tmp_path, total_steps=1000, max_in_flight=3))
    r.until(lambda s: s.accounting.completed >= 2 and s.accounting.in_flight >= 1, 60, "phase 1 under load")
    r.host.switch_phase(2).result(90)  # drains the in-flight groups (they finish), then rebuilds
    r.pump()
    switch = r.of("phase_switch")
    assert [e.stage for e in switch] == ["requested", "draining", "rebuilding", "done"]
    assert switch[0].in_flight >= 1  # it really drained live groups
    assert not [e for e in r.of("item_cancelled") if e.reason == "phase switch"]  # drained, not cancelled
    assert r.state.run.phase == 2
    base = r.state.accounting.completed
    r.until(lambda s: s.accounting.completed >= base + 2, 60, "phase-2 groups under faults")
    phase2 = [e for e in r.of("group_started") if e.phase == 2]
    assert phase2
    # Faults hit phase 2 too and are shown per kind.
    r.until(lambda s: any(k.startswith("tool:") for k in s.errors_by_kind), 60, "tool faults shown")
    # Back to phase 1, cancelling what is in flight: each cancelled item is accounted and re-queued.
    r.until(lambda s: s.accounting.in_flight >= 1, 30, "groups in flight")
    r.host.switch_phase(1, cancel_in_flight=True).result(60)
    r.pump()
    assert r.state.run.phase == 1 and r.state.phase_switch.stage == "done"
    cancelled = [e for e in r.of("item_cancelled") if e.reason == "phase switch"]
    assert cancelled and all(e.requeued for e in cancelled)
    base = r.state.accounting.completed
    r.until(lambda s: s.accounting.completed >= base + 1, 60, "phase 1 again")
    r.assert_alive()
    r.assert_accounted()
    r.stop_clean(deadline=1.0)


def test_evaluate_on_demand_during_training_with_faults_on(sim, tmp_path, run):
    sim.set_faults(**FAULTS)
    r = run(fault_spec(sim, tmp_path, total_steps=1000, max_in_flight=2, timeout_s=10))
    r.until(lambda s: s.accounting.completed >= 1, 60, "training running")
    received_before = r.state.accounting.received
    metrics = r.host.evaluate().result(120)
    r.pump()
    assert 0.0 <= metrics["eval/pass_rate"] <= 1.0 and metrics["eval/total_tasks"] > 0
    finished = r.of("eval_finished")
    assert len(finished) == 1 and finished[0].error is None
    view = r.state.evals[finished[0].eval_id]
    assert view.status == "done" and view.metrics == metrics and view.samples_path
    # Training went on while the evaluation ran (its rollouts kept taking turns; intake never
    # paused), and eval rollouts are not items.
    kinds = [e.kind for e in r.events]
    start, end = kinds.index("eval_started"), kinds.index("eval_finished")
    training = {e.rollout_id for e in r.of("rollout_started") if not e.group_id.startswith("eval-")}
    during = r.events[start:end]
    assert any(e.kind == "turn_finished" and e.rollout_id in training for e in during)
    assert not [e for e in during if e.kind == "runtime_status" and e.status in ("paused", "draining")]
    r.until(lambda s: s.accounting.received > received_before, 60, "more items taken after the evaluation")
    assert not any(gid.startswith("eval-") for gid in (e.group_id for e in r.of("item_received")))
    assert not [g for g in r.state.groups.values() if g.group_id.startswith("eval-") and g.status == "running"]
    # Faults were live during it (and visible).
    assert sum(sim.stats()["faults"].values()) > 0
    r.until(lambda s: s.errors_by_kind.get("server_http_error", 0) > 0, 60, "500s shown")
    r.assert_alive()
    r.assert_accounted()
    r.stop_clean(deadline=1.0)
