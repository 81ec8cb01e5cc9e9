"""Docker faults through the whole stack: the simulator's policy issues the commands, the
terminal tool runs them in each rollout's container. The engine going away mid-run (and
coming back, as a restart does) gives the model a clear error naming the engine or the
container, never a hang; every item is accounted; nothing is left in the engine.

The engine "restart" is played by a relay socket in front of the real engine (the test's
DOCKER_HOST): stopping it cuts every exec stream and refuses new calls, and the run's
containers are killed through the real engine, as a restart without live-restore does."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from faults_helpers import fault_spec, write_tasks

from tests.docker_support import EngineProxy, docker, engine_socket, managed_containers, needs_engine, sandbox_image
from tests.runtime.runtime_helpers import our_threads

pytestmark = [needs_engine, pytest.mark.timeout(180)]


def test_engine_restart_mid_run_is_a_clear_error_and_items_are_accounted(sim, tmp_path, run, monkeypatch):
    image = sandbox_image()
    proxy = EngineProxy(Path(f"/tmp/hc-proxy-{tmp_path.name[-12:]}.sock"), engine_socket())
    proxy.start()
    before = set(managed_containers())
    monkeypatch.setenv("DOCKER_HOST", proxy.host)
    monkeypatch.setenv("TERMINAL_DOCKER_IMAGE", image)
    tasks = write_tasks(tmp_path / "tasks.jsonl", ["Run this command: sleep 4; echo finished"])
    spec = fault_spec(
        sim,
        tmp_path,
        "--env.terminal_backend",
        "docker",
        "--env.terminal_timeout",
        "30",
        total_steps=6,
        max_turns=3,
        timeout_s=20,
        tasks=tasks,
    )
    r = run(spec)
    try:
        # commands in flight in at least two containers: then the engine goes away
        r.until(lambda s: len([e for e in r.of("sandbox_created")]) >= 2, 90, "two containers up")
        time.sleep(1.0)
        ours = [c for c in managed_containers() if c not in before]
        proxy.stop()
        if ours:
            docker("kill", *ours, check=False)  # what a restart does to running containers
        time.sleep(1.0)
        proxy.start()  # the engine is back
        r.until_done_items(6, 150)
        r.assert_alive()
        r.assert_accounted()
        errors = [row.error or "" for row in r.state.tool_rows if row.error]
        clear = [
            e
            for e in errors
            if "docker backend:" in e
            and ("not running any more" in e or "stopped answering" in e or "no Docker engine answered" in e)
        ]
        assert clear, errors[:10]
        assert not any("did not start within" in e for e in errors), errors[:10]  # the cause, not a symptom
        # items whose rollout met the outage are dropped with that cause, not kept as reward-0 data
        drops = [e for e in r.of("item_dropped")]
        assert r.state.accounting.dropped_total == len(drops) and r.state.accounting.in_flight == 0
        # the engine is back: a new container works
        from environments.sandboxes.docker import DockerSandbox
        from environments.sandboxes.settings import SandboxSettings

        box = DockerSandbox("after", SandboxSettings(sandbox_root=tmp_path / "after", docker_image=image))
        try:
            assert box.execute("echo back", 30).output == "back\n"
        finally:
            box.cleanup()
        r.threads_before |= {t for t in our_threads() if t.startswith("engine-proxy")}  # the test's relay
        r.stop_clean()
    finally:
        proxy.stop()
    left = [c for c in managed_containers() if c not in before]
    assert left == [], left


def test_operator_kill_and_timeout_mid_command_on_docker(sim, tmp_path, run, monkeypatch):
    """A TERM-proof command in two containers: the operator kills one sandbox (its container is
    removed), the other's 4 s timeout kills the command; nothing survives, the item completes."""
    import json

    before = set(managed_containers())
    monkeypatch.setenv("TERMINAL_DOCKER_IMAGE", sandbox_image())
    cmd = "trap '' TERM; sleep 60; echo survived"
    tasks = write_tasks(tmp_path / "tasks.jsonl", [f"Run this command: {cmd}"])
    spec = fault_spec(
        sim, tmp_path, "--env.terminal_backend", "docker", "--env.terminal_timeout", "4", total_steps=1, tasks=tasks
    )
    r = run(spec)
    r.until(
        lambda s: sum(1 for b in s.sandboxes.values() if b.running_command and "trap" in b.running_command) >= 2,
        60,
        "both rollouts running the TERM-proof command",
    )
    victim = next(b.task_id for b in r.state.sandboxes.values() if b.running_command and "trap" in b.running_command)
    assert r.host.kill_sandbox(victim).result(timeout=30) is True
    r.until(lambda s: s.sandboxes.get(victim) is None or s.sandboxes[victim].state == "closed", 30, "victim closed")
    r.until_done_items(1, 60)
    r.assert_alive()
    assert any(e.task_id == victim and e.reason == "killed" for e in r.of("sandbox_closed"))
    timeouts = r.tool_rows(error_kind="timeout")
    assert timeouts and all(x.exit_code == 124 and x.duration_s < 30 for x in timeouts)
    outputs = [
        json.loads(m["content"]).get("output", "")
        for line in Path(r.state.run.jsonl_path).read_text().splitlines()
        for conv in json.loads(line).get("messages") or []
        for m in conv
        if m.get("role") == "tool"
    ]
    assert outputs and not any("survived" in o for o in outputs)  # what the command printed, not its text
    assert r.state.accounting.completed == 1
    r.stop_clean()
    assert [c for c in managed_containers() if c not in before] == []
