"""A finished rollout's sandbox stops at once; the slow rest of its cleanup waits for a thread.

When hundreds of rollouts end together their cleanups queue for the cleanup pool. The
processes of each sandbox (a job the model left running included) must stop when the
rollout ends, not when a pool thread gets to it; the rest (waiting for them to go,
removing the dirs, the closed event) may wait.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from environments import events
from environments import hermes_base_env as base_env
from environments import sandboxes as sb
from environments.sandboxes import procfs, registry
from environments.sandboxes.base import KILLED_EXIT_CODE
from environments.tool_context import ToolContext
from tests.helpers.sandboxes import command_in_flight
from tests.helpers.waits import finishes, wait_for

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(autouse=True)
def isolated_registry(tmp_path: Path) -> Iterator[None]:
    sb.reset_configuration()
    sb.configure(backend="local", sandbox_root=tmp_path, lifetime=300, reaper_interval=5, kill_grace=0.2)
    yield
    sb.shutdown()
    sb.reset_configuration()


@pytest.fixture
def busy_cleanup_pool() -> Iterator[threading.Event]:
    """Every cleanup thread held until the test sets the returned event."""
    release = threading.Event()
    held = [base_env._cleanup_pool.submit(release.wait, 60) for _ in range(base_env._CLEANUP_WORKERS)]
    yield release
    release.set()
    for f in held:
        f.result(timeout=60)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return False


def _background(ctx: ToolContext, command: str) -> int:
    started = json.loads(ctx.call_tool("terminal", {"command": command, "background": True}))
    return int(started["pid"])


def test_a_finished_rollouts_processes_stop_while_every_cleanup_thread_is_busy(
    busy_cleanup_pool: threading.Event,
) -> None:
    ctx = ToolContext("rollout-done")
    burner = _background(ctx, "while :; do :; done")  # what a model leaves running: it burns CPU
    sleeper = _background(ctx, "sleep 600")
    ws = Path(sb.get_sandbox(ctx.task_id).host_workspace)
    assert _alive(burner) and _alive(sleeper)

    cleanup = base_env._start_cleanup(ctx)
    assert wait_for(lambda: not _alive(burner) and not _alive(sleeper)), (
        "the sandbox's processes kept running until a cleanup thread was free"
    )
    assert not cleanup.done(), "the test meant to hold every cleanup thread"
    assert sb.get_sandbox_info(ctx.task_id) is None  # detached: a new get makes a fresh one
    assert ws.exists()  # the slow half (removing the dirs) waits for its thread

    busy_cleanup_pool.set()
    cleanup.result(timeout=60)
    assert not ws.exists()


def test_the_slow_half_still_reports_the_close_and_removes_everything() -> None:
    got: list[events.Event] = []
    events.add_observer(got.append)
    try:
        ctx = ToolContext("two-halves")
        pid = _background(ctx, "sleep 600")
        ws = Path(sb.get_sandbox(ctx.task_id).host_workspace)
        rest = ctx.begin_cleanup()
        assert wait_for(lambda: not _alive(pid))
        assert not [e for e in got if isinstance(e, events.SandboxClosed)]  # reported by the rest
        rest()
        closed = [(e.task_id, e.reason) for e in got if isinstance(e, events.SandboxClosed)]
        assert closed == [("two-halves", "cleanup")] and not ws.exists()
        rest()  # idempotent, as cleanup is
        ctx.cleanup()
        assert len([e for e in got if isinstance(e, events.SandboxClosed)]) == 1
    finally:
        events.remove_observer(got.append)


def test_using_the_context_after_the_stop_gets_a_fresh_sandbox() -> None:
    ctx = ToolContext("used-again")
    first = sb.get_sandbox(ctx.task_id)
    rest = ctx.begin_cleanup()
    again = json.loads(ctx.call_tool("terminal", {"command": "echo fresh"}))
    assert again["output"] == "fresh\n" and again["exit_code"] == 0
    assert sb.get_sandbox(ctx.task_id).workspace != first.workspace
    rest()
    ctx.cleanup()


def test_a_command_in_flight_returns_killed_and_the_machine_is_not_restarted() -> None:
    box = sb.get_sandbox("in-flight")
    # "running" is shown before the machine is up: on a loaded box the stop can land while
    # the command's thread still holds the machine lock, starting the machine
    t, result = command_in_flight("in-flight", "sleep 60", 50)
    rest = registry.stop_vm("in-flight")
    try:
        t.join(30)
        assert not t.is_alive() and result[0].exit_code == KILLED_EXIT_CODE
        assert box._inner.machine_restarts == 0 and box._inner.shell_restarts == 0
    finally:
        rest()


def test_a_stop_while_the_machine_starts_still_ends_the_command_that_started_it() -> None:
    box = sb.get_sandbox("starting-cmd")
    inner = box._inner
    result: list[object] = []
    with inner._lock:  # the command's thread is starting the machine (holds the lock)
        t = threading.Thread(target=lambda: result.append(box.execute("sleep 60", 50)))
        t.start()
        assert wait_for(lambda: sb.get_sandbox_info("starting-cmd").state == "running")
        rest = registry.stop_vm("starting-cmd")  # cannot signal anything yet
    try:
        t.join(30)
        assert not t.is_alive() and result[0].exit_code == KILLED_EXIT_CODE
    finally:
        rest()
    assert not procfs.sandbox_processes(inner._marker, (), ())


def test_the_stop_never_waits_for_a_machine_starting_in_another_thread() -> None:
    box = sb.get_sandbox("starting")
    pid = int(box.execute("sleep 600 >/dev/null 2>&1 & echo $!", 30).output.strip())
    inner = box._inner
    with inner._lock:  # what another thread holds while it starts the machine
        assert finishes(inner.kill_now), "the early stop waited for the machine lock"
        assert inner.kill_now() is False and _alive(pid)  # left to the cleanup
    inner.cleanup()
    assert wait_for(lambda: not _alive(pid))


def test_a_context_that_overrides_cleanup_gets_its_own_cleanup_in_the_pool() -> None:
    called: list[str] = []

    class CustomContext(ToolContext):
        def cleanup(self) -> None:
            called.append(threading.current_thread().name)
            super().cleanup()

    ctx = CustomContext("custom-cleanup")
    pid = _background(ctx, "sleep 600")
    base_env._start_cleanup(ctx).result(timeout=60)
    assert called and called[0].startswith("hermes-cleanup")
    assert not _alive(pid) and sb.get_sandbox_info(ctx.task_id) is None


def test_the_early_kill_is_one_pass_and_the_cleanup_catches_what_forked_after() -> None:
    ctx = ToolContext("forker")
    # a loop that keeps forking: one signal pass may miss a child born after the pass
    _background(ctx, "while :; do sleep 600 & sleep 0.01; done")
    inner = sb.get_sandbox(ctx.task_id)._inner
    assert wait_for(lambda: len(procfs.sandbox_processes(inner._marker, (), ())) > 3)
    rest = ctx.begin_cleanup()
    rest()
    assert not procfs.sandbox_processes(inner._marker, (), ())


def test_the_early_kill_reaches_a_setsid_double_forked_process(busy_cleanup_pool: threading.Event) -> None:
    """What a model does to outlive its rollout: a new session, and a parent that exits
    (the orphan is nobody's child of ours). The cgroup still holds it, so the early kill
    alone (every cleanup thread held) ends it."""
    ctx = ToolContext("escapee")
    _background(ctx, "setsid sh -c 'sleep 600 >/dev/null 2>&1 & echo $! > escapee.pid'")
    pid_file = Path(sb.get_sandbox(ctx.task_id).host_workspace) / "escapee.pid"
    assert wait_for(lambda: pid_file.exists() and pid_file.read_text().strip())
    pid = int(pid_file.read_text().strip())
    assert wait_for(lambda: _alive(pid))
    cleanup = base_env._start_cleanup(ctx)
    assert wait_for(lambda: not _alive(pid)), "the setsid'd orphan outlived the rollout's end"
    assert not cleanup.done()
    busy_cleanup_pool.set()
    cleanup.result(timeout=60)
