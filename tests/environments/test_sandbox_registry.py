"""Session registry: isolation, creation lock, reaper, lifetimes, events (behaviours 29-31)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from environments import events
from environments import sandboxes as sb
from environments.sandboxes import registry
from environments.sandboxes.base import SandboxClosedError
from tests.helpers.sandboxes import command_in_flight
from tests.helpers.waits import finishes, wait_for

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def isolated_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in ("TERMINAL_ENV", "TERMINAL_TIMEOUT", "TERMINAL_LIFETIME_SECONDS", "TERMINAL_NETWORK"):
        monkeypatch.delenv(var, raising=False)
    sb.reset_configuration()
    sb.configure(backend="local", sandbox_root=tmp_path, lifetime=300, reaper_interval=0.05, kill_grace=0.2)
    yield
    sb.shutdown()
    sb.reset_configuration()
    assert registry.reaper_thread() is None
    assert not [t for t in threading.enumerate() if t.name == "hermes-sandbox-reaper"]


@pytest.fixture
def recorded() -> Iterator[list[events.Event]]:
    got: list[events.Event] = []
    events.add_observer(got.append)
    yield got
    events.remove_observer(got.append)


def test_same_task_id_same_sandbox_different_ids_different_workspaces() -> None:
    a1 = sb.get_sandbox("task-a")
    a2 = sb.get_sandbox("task-a")
    b = sb.get_sandbox("task-b")
    assert a1 is a2
    assert a1.workspace != b.workspace
    a1.execute("echo secret-a > only_a.txt", 5)
    assert b.execute("cat only_a.txt", 5).exit_code != 0
    assert sb.get_sandbox(None) is sb.get_sandbox("default")


def test_sixteen_threads_racing_create_exactly_one(monkeypatch: pytest.MonkeyPatch) -> None:
    created: list[str] = []
    real = registry.create_sandbox

    def slow_create(key, settings):
        created.append(key)
        time.sleep(0.2)  # a slow backend start widens the race window
        return real(key, settings)

    monkeypatch.setattr(registry, "create_sandbox", slow_create)
    barrier = threading.Barrier(16)
    got: list[object] = []

    def worker() -> None:
        barrier.wait()
        got.append(sb.get_sandbox("race"))

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert created == ["race"]
    assert len(got) == 16 and all(g is got[0] for g in got)
    assert registry._creating == {}  # per-key locks are dropped once nobody waits


def test_slow_creation_of_one_key_does_not_block_others(monkeypatch: pytest.MonkeyPatch) -> None:
    real = registry.create_sandbox
    release = threading.Event()

    entered = threading.Event()

    def create(key, settings):
        if key == "slow":
            entered.set()
            release.wait(30)
        return real(key, settings)

    monkeypatch.setattr(registry, "create_sandbox", create)
    t = threading.Thread(target=sb.get_sandbox, args=("slow",))
    t.start()
    assert entered.wait(30)
    try:
        # "slow" stays held until after this check: "fast" cannot be waiting for it.
        assert finishes(lambda: sb.get_sandbox("fast").execute("true", 30)), "'fast' waited for 'slow' creation"
    finally:
        release.set()
        t.join(30)


def test_cleanup_vm_is_idempotent_and_removes() -> None:
    box = sb.get_sandbox("c1")
    workspace = box.host_workspace
    assert workspace.exists()
    sb.cleanup_vm("c1")
    assert not workspace.exists()
    assert sb.get_sandbox_info("c1") is None
    sb.cleanup_vm("c1")
    sb.cleanup_vm("never-existed")
    with pytest.raises(SandboxClosedError, match="closed"):
        box.execute("true", 1)
    fresh = sb.get_sandbox("c1")
    assert fresh is not box and fresh.workspace != box.workspace


def test_cleanup_all_environments_returns_count() -> None:
    for i in range(3):
        sb.get_sandbox(f"all-{i}")
    assert sb.cleanup_all_environments() == 3
    assert sb.list_sandboxes() == []
    assert sb.cleanup_all_environments() == 0


def test_reaper_reaps_idle_and_spares_running(recorded: list[events.Event]) -> None:
    sb.configure(lifetime=0.4)
    idle = sb.get_sandbox("idle")
    busy = sb.get_sandbox("busy")
    idle_ws = idle.host_workspace
    result: list[object] = []
    # The busy command runs until the test says so, however long the reaper takes.
    t = threading.Thread(
        target=lambda: result.append(busy.execute("while [ ! -f go ]; do sleep 0.05; done; echo survived", 60))
    )
    t.start()
    assert wait_for(lambda: getattr(sb.get_sandbox_info("busy"), "state", None) == "running")
    assert wait_for(lambda: sb.get_sandbox_info("idle") is None)
    assert wait_for(lambda: not idle_ws.exists())  # removal follows the detach, outside the lock
    info = sb.get_sandbox_info("busy")
    assert info is not None and info.state == "running"
    (busy.host_workspace / "go").touch()
    t.join(60)
    assert result[0].output == "survived\n"  # a long foreground command was not reaped mid-run
    closed = [e for e in recorded if isinstance(e, events.SandboxClosed)]
    assert [(e.task_id, e.reason) for e in closed][:1] == [("idle", "idle_reaped")]
    # after the command ends the busy one goes idle and is reaped in turn
    assert wait_for(lambda: sb.get_sandbox_info("busy") is None)


def test_activity_is_stamped_at_command_start_and_end() -> None:
    sb.configure(lifetime=1.0)  # the window between the command's end and the check below
    box = sb.get_sandbox("stamps")
    before = sb.get_sandbox_info("stamps").last_activity
    box.execute("sleep 1.5", 30)  # longer than the lifetime
    info = sb.get_sandbox_info("stamps")
    assert info is not None, "reaped while (or right after) running"
    assert info.last_activity >= before + 1.5


def test_extend_lifetime_keeps_it_alive(recorded: list[events.Event]) -> None:
    # 2 s (was 0.3 s): on a loaded box the reaper could take "extended" before it was extended
    sb.configure(lifetime=2.0)
    sb.get_sandbox("short")
    sb.get_sandbox("extended")
    assert sb.extend_lifetime("extended", 30) == pytest.approx(32.0)
    assert wait_for(lambda: sb.get_sandbox_info("short") is None)
    time.sleep(0.3)  # "extended" was created just after "short": now past its original lifetime too
    info = sb.get_sandbox_info("extended")
    assert info is not None and info.lifetime_s == pytest.approx(32.0)
    changed = [e for e in recorded if isinstance(e, events.SandboxLifetimeChanged)]
    assert [(e.task_id, e.lifetime_s) for e in changed] == [("extended", pytest.approx(32.0))]
    with pytest.raises(KeyError, match="no live sandbox"):
        sb.extend_lifetime("nope", 10)
    with pytest.raises(ValueError, match="positive"):
        sb.extend_lifetime("extended", -5)


def test_background_process_counts_as_activity() -> None:
    sb.configure(lifetime=0.2)
    box = sb.get_sandbox("bg")
    box.execute("sleep 120 & echo $! > bg.pid", 30)  # lives until the test kills it
    time.sleep(0.5)  # well past the lifetime, many reaper passes
    assert sb.get_sandbox_info("bg") is not None
    pid = int((box.host_workspace / "bg.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: sb.get_sandbox_info("bg") is None)


def test_slow_cleanup_runs_outside_the_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    box = sb.get_sandbox("slow-clean")
    inner = box._inner
    real_cleanup = inner.cleanup
    entered, release = threading.Event(), threading.Event()

    def slow_cleanup() -> None:
        entered.set()
        release.wait(30)
        real_cleanup()

    monkeypatch.setattr(inner, "cleanup", slow_cleanup)
    t = threading.Thread(target=sb.cleanup_vm, args=("slow-clean",))
    t.start()
    assert entered.wait(30)
    try:
        # The cleanup stays held until after this check: the other key cannot be waiting for it.
        assert finishes(lambda: (sb.get_sandbox("other").execute("true", 30), sb.list_sandboxes())), (
            "another key waited for a cleanup running under the lock"
        )
    finally:
        release.set()
        t.join(30)


def test_kill_sandbox_stops_running_command(recorded: list[events.Event]) -> None:
    t, result = command_in_flight("victim", "sleep 30", 20)
    info = sb.get_sandbox_info("victim")
    assert info.running_command == "sleep 30" and info.running_timeout_s == 20
    assert info.running_since is not None and info.idle_s() == 0.0
    assert sb.kill_sandbox("victim") is True
    t.join(5)
    assert result[0].exit_code == 130
    assert sb.kill_sandbox("victim") is False
    closed = [e for e in recorded if isinstance(e, events.SandboxClosed)]
    assert [(e.task_id, e.reason) for e in closed] == [("victim", "killed")]


def test_run_diagnostic_is_not_agent_activity() -> None:
    box = sb.get_sandbox("diag")
    box.execute("mkdir sub && cd sub && export X=1", 5)
    before = sb.get_sandbox_info("diag")
    time.sleep(0.05)
    result = sb.run_diagnostic("diag", "pwd; echo $X; cd /; export X=2")
    # the verifier runner: the agent's cwd, the sandbox's initial environment (not the agent's
    # shell state, which the model controls; was: the agent's exports)
    assert result.output == f"{box.workspace}/sub\n\n"
    after = sb.get_sandbox_info("diag")
    assert after.last_activity == before.last_activity
    assert len(after.recent_commands) == len(before.recent_commands)
    assert box.cwd() == f"{box.workspace}/sub"  # diagnostics don't move the agent
    assert box.execute("echo $X", 5).output == "1\n"
    with pytest.raises(KeyError):
        sb.run_diagnostic("missing", "true")


def test_recent_commands_bounded_and_redacted() -> None:
    sb.configure(recent_commands=5)
    box = sb.get_sandbox("hist")
    for i in range(8):
        box.execute(f"echo {i}", 5)
    box.execute("echo OPENAI_API_KEY=sk-abcdefghijklmnopqrstuvwxyz123456", 5)
    recent = sb.get_sandbox_info("hist").recent_commands
    assert len(recent) == 5
    assert [r.command for r in recent[:4]] == ["echo 4", "echo 5", "echo 6", "echo 7"]
    assert "sk-abc" not in recent[-1].command and "sk-abc" not in recent[-1].output_head
    assert recent[-1].exit_code == 0 and recent[-1].duration_s >= 0


def test_events_emitted_and_redacted(recorded: list[events.Event]) -> None:
    box = sb.get_sandbox("ev")
    box.execute("echo OPENAI_API_KEY=sk-abcdefghijklmnopqrstuvwxyz123456", 5)
    box.execute("sleep 2", 0.2)
    sb.cleanup_vm("ev")
    kinds = [e.kind for e in recorded]
    assert kinds == [
        "sandbox_created",
        "sandbox_command_started",
        "sandbox_command_finished",
        "sandbox_command_started",
        "sandbox_command_finished",
        "sandbox_closed",
    ]
    created = recorded[0]
    assert created.task_id == "ev" and created.backend == "local" and created.workdir == box.workspace
    started, finished = recorded[1], recorded[2]
    for text in (started.command, finished.command, finished.output_head):
        assert "OPENAI_API_KEY=" in text and "sk-abc" not in text
    assert finished.exit_code == 0
    assert recorded[4].timed_out and recorded[4].exit_code == 124
    assert recorded[5].reason == "cleanup" and recorded[5].error is None


def test_list_sandboxes_snapshot() -> None:
    sb.get_sandbox("l1")
    sb.get_sandbox("l2").execute("true", 5)
    infos = sb.list_sandboxes()
    assert [i.task_id for i in infos] == ["l1", "l2"]
    assert all(i.state == "idle" and i.backend == "local" and i.lifetime_s == 300 for i in infos)
    assert infos[1].recent_commands[0].command == "true"
    assert infos[0].idle_s() >= 0


def test_close_listener_called() -> None:
    seen: list[tuple] = []

    def listener(task: str, reason: str) -> None:
        seen.append((task, reason))

    sb.add_close_listener(listener)
    try:
        sb.get_sandbox("listen")
        sb.cleanup_vm("listen")
    finally:
        sb.remove_close_listener(listener)  # other modules' listeners must survive
    assert seen == [("listen", "cleanup")]


def test_shutdown_stops_thread_and_cleans(recorded: list[events.Event]) -> None:
    box = sb.get_sandbox("sd")
    assert registry.reaper_thread() is not None and registry.reaper_thread().is_alive()
    assert sb.shutdown() == 1
    assert registry.reaper_thread() is None
    assert not box.host_workspace.exists()
    assert recorded[-1].kind == "sandbox_closed" and recorded[-1].reason == "exit"


def test_bad_task_ids_and_unknown_backend() -> None:
    with pytest.raises(TypeError, match="task_id must be a str"):
        sb.get_sandbox(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="task_id is empty"):
        sb.get_sandbox("  ")
    with pytest.raises(ValueError, match="unknown terminal backend 'podman'.*local, bwrap, docker"):
        sb.configure(backend="podman")


@pytest.mark.parametrize("backend", ["modal", "daytona", "ssh", "singularity", "vercel_sandbox"])
def test_unavailable_backends_explain(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # refused when the config is read (configure / TERMINAL_ENV), naming the supported ones
    with pytest.raises(ValueError, match=f"'{backend}' is not available in hermes-console.*use local, bwrap or docker"):
        sb.configure(backend=backend)
    monkeypatch.setenv("TERMINAL_ENV", backend)
    with pytest.raises(ValueError, match="TERMINAL_ENV"):
        sb.current_settings()
    monkeypatch.delenv("TERMINAL_ENV")
    assert sb.list_sandboxes() == []


def test_managed_sandbox_satisfies_the_protocol() -> None:
    box = sb.get_sandbox("proto")
    assert isinstance(box, sb.Sandbox)
    assert box.task_id == "proto" and box.backend == "local"
    assert box.to_host_path("x") == box.host_workspace / "x"
    assert box.process_tree() == []
    box.cleanup()
    assert box.closed and sb.get_sandbox_info("proto") is None


def test_find_sandbox_never_creates() -> None:
    assert sb.find_sandbox("never-made") is None
    assert sb.get_sandbox_info("never-made") is None  # still nothing after the lookup
    made = sb.get_sandbox("found-me")
    try:
        found = sb.find_sandbox("found-me")
        assert found is not None and found.task_id == made.task_id
    finally:
        sb.cleanup_vm("found-me")
    assert sb.find_sandbox("found-me") is None


@pytest.mark.parametrize("close", ["cleanup_vm", "stop_vm then the rest"])
def test_a_closed_sandbox_is_freed_by_reference_counting(close: str) -> None:
    """A sandbox's objects (machine, channels, cgroup, command records) hung off a reference
    cycle (the registry entry and its handle): only a full garbage collection freed them, and
    with hundreds of rollouts' worth that took 200-250 ms with the GIL held (BENCHMARKS.md,
    P2). They now go when the last handle does, the collector off."""
    import gc
    import weakref

    handle = sb.get_sandbox("task-gc")
    assert handle.execute("echo hi", 5).exit_code == 0
    inner = weakref.ref(handle._inner)
    gc.collect()
    gc.disable()
    try:
        if close == "cleanup_vm":
            sb.cleanup_vm("task-gc")
        else:
            rest = registry.stop_vm("task-gc")
            rest()
            del rest
        del handle
        assert inner() is None
    finally:
        gc.enable()
