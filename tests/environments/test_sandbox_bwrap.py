"""bwrap backend: session behaviour, timeouts, argv, registry integration, clear errors."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from environments import sandboxes as sb
from environments.sandboxes import bwrap as bwrap_mod
from environments.sandboxes.bwrap import VIEW_STATE, VIEW_WORKSPACE, BwrapSandbox, build_bwrap_argv, check_bwrap
from environments.sandboxes.settings import SandboxSettings
from tests.helpers.proc_oracle import live_pids_with, wait_until_gone

U = f"{os.getpid():07d}"  # fixed width: makes sleep fingerprints unique per test process

pytestmark = pytest.mark.timeout(120)  # a hang detector: the tests' own waits (up to 30 s) fail first


@pytest.fixture
def box(tmp_path: Path) -> Iterator[BwrapSandbox]:
    sandbox = BwrapSandbox("task-bwrap", SandboxSettings(sandbox_root=tmp_path, kill_grace=0.3))
    yield sandbox
    sandbox.cleanup()


def test_basic_exec_and_view(box: BwrapSandbox) -> None:
    assert box.workspace == "/workspace" and box.cwd() == "/workspace"
    result = box.execute('echo out; echo err >&2; echo "$HOME"; pwd; exit 5', 5)
    assert result.output == "out\nerr\n/workspace\n/workspace\n"
    assert result.exit_code == 5


def test_cwd_and_exports_persist(box: BwrapSandbox) -> None:
    box.execute("mkdir -p a/b && cd a/b && export GREETING='hi there'", 5)
    assert box.cwd() == "/workspace/a/b"
    assert box.execute('pwd; echo "$GREETING"', 5).output == "/workspace/a/b\nhi there\n"


def test_workspace_is_the_host_dir(box: BwrapSandbox) -> None:
    box.execute("echo data > f.txt", 5, stdin_data=None)
    assert (box.host_workspace / "f.txt").read_text() == "data\n"
    (box.host_workspace / "from_host.txt").write_text("hello")
    assert box.execute("cat from_host.txt", 5).output == "hello"


def test_stdin_data(box: BwrapSandbox) -> None:
    assert box.execute("tr a-z A-Z", 5, stdin_data="abc\n").output == "ABC\n"


def test_timeout_kills_the_whole_namespace(box: BwrapSandbox) -> None:
    started = time.monotonic()
    result = box.execute(f"trap '' TERM; sleep 321.{U}5 & sleep 321.{U}6", 0.4)
    assert result.exit_code == 124 and result.timed_out
    assert result.output.endswith("[Command timed out after 0.4s]")
    assert time.monotonic() - started < 60  # cut by the timeout, far below the sleeps' 321 s
    assert wait_until_gone(f"sleep 321.{U}") == []


def test_background_processes_live_until_cleanup(box: BwrapSandbox) -> None:
    # one machine per sandbox (was: a bwrap per command, whose end killed its background jobs)
    result = box.execute(f"sleep 322.{U}5 & echo bg", 30)
    assert result.output == "bg\n" and not result.timed_out  # did not wait for the background job
    assert box.execute("echo next", 5).output == "next\n"
    assert box.has_background_processes()
    box.cleanup()
    assert wait_until_gone(f"sleep 322.{U}5") == []


def test_to_host_path_maps_workspace(box: BwrapSandbox) -> None:
    ws = box.host_workspace
    assert box.to_host_path("/workspace/x.txt") == ws / "x.txt"
    box.execute("mkdir d && cd d", 5)
    assert box.to_host_path("y") == ws / "d" / "y"
    assert box.to_host_path("~/z") == ws / "z"
    with pytest.raises(sb.PathEscapeError):
        box.to_host_path("/etc/passwd")
    with pytest.raises(sb.PathEscapeError):
        box.to_host_path(str(ws / "x"))  # host paths mean nothing inside the sandbox


def test_process_tree_sees_the_running_command(box: BwrapSandbox) -> None:
    import threading

    t = threading.Thread(target=box.execute, args=(f"sleep 323.{U}5", 90))  # ended by cleanup
    t.start()
    try:
        deadline = time.monotonic() + 30
        while not live_pids_with(f"sleep 323.{U}5") and time.monotonic() < deadline:
            time.sleep(0.02)
        commands = [p.command for p in box.process_tree()]
        assert any(f"sleep 323.{U}5" in c for c in commands)
        # the machine itself (bwrap, init, shell) is reported by shell_state(), not as agent work
        assert not any(c.startswith(("bwrap", "/usr/bin/bwrap")) for c in commands)
        assert box.shell_state()["shell_pid"] is not None and box.shell_state()["busy"]
    finally:
        box.cleanup()
        t.join(30)
    assert wait_until_gone(f"sleep 323.{U}5") == []


def test_argv_builder_shapes_the_sandbox() -> None:
    argv = build_bwrap_argv(
        bwrap="/usr/bin/bwrap",
        host_workspace="/h/ws",
        host_state="/h/st",
        network=False,
        env={"HOME": "/workspace", "A": "1"},
        command=["bash", "-c", "true"],
        system_binds=["--ro-bind", "/usr", "/usr"],
    )
    joined = " ".join(argv)
    assert argv[0] == "/usr/bin/bwrap"
    assert argv[-4:] == ["--", "bash", "-c", "true"]
    for piece in (
        "--ro-bind /usr /usr",
        "--tmpfs /tmp",
        "--proc /proc",
        "--dev /dev",
        f"--bind /h/ws {VIEW_WORKSPACE}",
        f"--bind /h/st {VIEW_STATE}",
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--setenv HOME /workspace",
        "--setenv A 1",
        "--chdir /workspace",
    ):
        assert piece in joined
    assert "--share-net" not in argv
    net = build_bwrap_argv(
        bwrap="b", host_workspace="w", host_state="s", network=True, env={}, command=["x"], system_binds=[]
    )
    assert "--share-net" in net and net.index("--share-net") > net.index("--unshare-all")


def test_system_binds_follow_host_layout() -> None:
    binds = bwrap_mod._system_binds()
    assert binds[:3] == ["--ro-bind", "/usr", "/usr"]
    if os.path.islink("/bin"):
        # a read-only mount, not a symlink on the writable root (the model could replace a symlink)
        assert ["--ro-bind", os.path.realpath("/bin"), "/bin"] == binds[
            binds.index("/bin") - 2 : binds.index("/bin") + 1
        ]
    if os.path.exists("/etc/shadow"):
        assert "/etc/shadow" in binds


def test_missing_bwrap_says_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(sb.SandboxUnavailable, match=r"not found on PATH.*apt-get install bubblewrap"):
        BwrapSandbox("x", SandboxSettings(sandbox_root=tmp_path))


def test_failing_bwrap_says_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(bwrap_mod, "_probe_ok", {})
    with pytest.raises(sb.SandboxUnavailable, match=r"failed to start.*No permissions.*apt-get install bubblewrap"):
        check_bwrap(False, str(fake))


def test_registry_creates_bwrap_sandboxes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERMINAL_ENV", "bwrap")
    sb.reset_configuration()
    sb.configure(sandbox_root=tmp_path)
    try:
        box = sb.get_sandbox("reg-bwrap")
        assert box.backend == "bwrap"
        assert box.execute("echo hi > f; cat f", 5).output == "hi\n"
        assert sb.get_sandbox_info("reg-bwrap").workspace == "/workspace"
    finally:
        sb.shutdown()
        sb.reset_configuration()
