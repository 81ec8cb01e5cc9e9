"""The local backend and the shared bash session (behaviour 28 + output/kill hygiene)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from environments.sandboxes.base import ExecResult, SandboxClosedError
from environments.sandboxes.local import LocalSandbox, sandbox_child_env
from environments.sandboxes.settings import SandboxSettings
from tests.helpers.proc_oracle import live_pids_with, wait_until_gone

U = f"{os.getpid():07d}"  # fixed width: makes sleep fingerprints unique per test process

pytestmark = pytest.mark.timeout(120)  # a hang detector: the tests' own waits (up to 30 s) fail first


@pytest.fixture
def box(tmp_path: Path) -> Iterator[LocalSandbox]:
    sb = LocalSandbox("task-local", SandboxSettings(sandbox_root=tmp_path, kill_grace=0.3))
    yield sb
    sb.cleanup()


def test_exit_code_and_output(box: LocalSandbox) -> None:
    result = box.execute("echo hello; exit 3", 5)
    assert isinstance(result, ExecResult)
    assert result.output == "hello\n"
    assert result.exit_code == 3
    assert not result.timed_out
    assert result.duration_s > 0


def test_stderr_is_merged_in_order(box: LocalSandbox) -> None:
    result = box.execute("echo out; echo err >&2; echo out2", 5)
    assert result.output == "out\nerr\nout2\n"


def test_workspace_is_home_and_initial_cwd(box: LocalSandbox) -> None:
    assert box.host_workspace is not None and box.host_workspace.is_dir()
    assert box.cwd() == box.workspace == str(box.host_workspace)
    result = box.execute('pwd; echo "$HOME"', 5)
    assert result.output == f"{box.workspace}\n{box.workspace}\n"


def test_cwd_persists_after_cd(box: LocalSandbox) -> None:
    assert box.execute("mkdir -p a/b && cd a/b", 5).exit_code == 0
    assert box.execute("pwd", 5).output.strip() == f"{box.workspace}/a/b"
    assert box.cwd() == f"{box.workspace}/a/b"
    box.execute("cd ..", 5)
    assert box.cwd() == f"{box.workspace}/a"


def test_cwd_persists_even_when_command_exits_nonzero(box: LocalSandbox) -> None:
    box.execute("mkdir d; cd d; false", 5)
    assert box.cwd() == f"{box.workspace}/d"
    # `exit` ends the persistent shell: a fresh one takes over in the cwd the command left
    # (as `bash -c 'cd /; exit 7'` followed by the next command in a terminal would not, but an
    # agent's session should: the machine is the same)
    assert box.execute("cd /; exit 7", 5).exit_code == 7
    assert box.execute("pwd", 5).output == "/\n"


def test_exports_persist_and_unset_persists(box: LocalSandbox) -> None:
    box.execute("export FOO='two words' BAR=1", 5)
    assert box.execute('echo "$FOO|$BAR"', 5).output == "two words|1\n"
    box.execute("unset BAR", 5)
    assert box.execute('echo "${BAR-unset}"', 5).output == "unset\n"
    # one persistent shell: plain (unexported) shell variables persist too (was: a new bash per call)
    box.execute("LOCALVAR=x", 5)
    assert box.execute('echo "${LOCALVAR-none}"', 5).output == "x\n"


def test_stdin_data_is_piped(box: LocalSandbox) -> None:
    result = box.execute("cat > f.txt && wc -c < f.txt && cat f.txt", 5, stdin_data="héllo\nworld\n")
    assert result.output.splitlines() == ["13", "héllo", "world"]
    assert (box.host_workspace / "f.txt").read_text() == "héllo\nworld\n"


def test_large_stdin_does_not_deadlock(box: LocalSandbox) -> None:
    data = "x" * 3_000_000
    result = box.execute("wc -c", 10, stdin_data=data)
    assert result.output.strip() == "3000000"


def test_no_stdin_means_eof_not_hang(box: LocalSandbox) -> None:
    result = box.execute("cat; echo done", 5)
    assert result.output == "done\n"


def test_heredoc_and_multiline_commands(box: LocalSandbox) -> None:
    result = box.execute("cat <<'EOF' > h.txt\nline $1\nEOF\ncat h.txt", 5)
    assert result.output == "line $1\n"


def test_syntax_error_reports_nonzero(box: LocalSandbox) -> None:
    result = box.execute("if then fi", 5)
    assert result.exit_code != 0
    assert "syntax error" in result.output


def test_timeout_returns_124_and_kills_background_and_foreground(box: LocalSandbox) -> None:
    started = time.monotonic()
    result = box.execute(f"echo before; sleep 311.{U}5 & sleep 311.{U}6", 0.5)
    elapsed = time.monotonic() - started
    assert result.exit_code == 124
    assert result.timed_out
    assert result.output.startswith("before\n") and result.output.endswith("\n[Command timed out after 0.5s]")
    assert elapsed < 60  # cut by the timeout, far below the sleeps' 311 s
    assert wait_until_gone(f"sleep 311.{U}") == []


def test_timeout_kills_a_child_that_ignores_sigterm(box: LocalSandbox) -> None:
    result = box.execute(f"bash -c 'trap \"\" TERM; sleep 312.{U}5' & trap '' TERM; sleep 312.{U}6", 0.3)
    assert result.exit_code == 124
    assert wait_until_gone(f"sleep 312.{U}") == []


def test_timeout_kills_children_that_left_the_group(box: LocalSandbox) -> None:
    result = box.execute(f"setsid sleep 314.{U}5 & sleep 314.{U}6", 0.3)
    assert result.exit_code == 124
    assert wait_until_gone(f"sleep 314.{U}") == []


def test_session_usable_after_timeout(box: LocalSandbox) -> None:
    box.execute("cd /tmp", 5)
    box.execute("sleep 5", 0.2)
    assert box.execute("pwd", 5).output == "/tmp\n"


def test_output_flood_is_bounded_and_fast(tmp_path: Path) -> None:
    sb = LocalSandbox("flood", SandboxSettings(sandbox_root=tmp_path, output_limit_bytes=100_000))
    try:
        result = sb.execute("head -c 100000000 /dev/zero | tr '\\0' a; echo; echo END", 120)
    finally:
        sb.cleanup()
    assert result.exit_code == 0
    assert len(result.output) < 110_000
    assert "output truncated" in result.output
    assert result.output.startswith("aaaa")
    assert result.output.endswith("a\nEND\n")  # the tail survives
    assert not result.timed_out


def test_background_grandchild_holding_pipe_does_not_hang(box: LocalSandbox) -> None:
    result = box.execute(f"sleep 315.{U}5 & echo started", 30)
    assert result.exit_code == 0 and not result.timed_out  # returned without waiting for the grandchild
    assert result.output == "started\n"
    box.cleanup()
    assert wait_until_gone(f"sleep 315.{U}5") == []


def test_cleanup_kills_fork_burst_and_removes_dirs(box: LocalSandbox) -> None:
    result = box.execute(
        f"for i in $(seq 200); do sleep 316.{U}5 & done; echo spawned", 60
    )  # 200 forks: slow under load
    assert result.output == "spawned\n"
    deadline = time.monotonic() + 30  # the shell returns before every child has exec'd sleep
    while len(live_pids_with(f"sleep 316.{U}5")) < 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(live_pids_with(f"sleep 316.{U}5")) == 200
    assert len(box.process_tree()) >= 200
    workspace = box.host_workspace
    box.cleanup()
    assert wait_until_gone(f"sleep 316.{U}5") == []
    assert not workspace.exists()
    box.cleanup()  # idempotent
    with pytest.raises(SandboxClosedError):
        box.execute("true", 1)


def test_cleanup_while_command_runs_returns_130(box: LocalSandbox) -> None:
    import threading

    results: list = []
    t = threading.Thread(
        target=lambda: results.append(box.execute(f"sleep 317.{U}5", 90))
    )  # ended by cleanup, not by this
    t.start()
    deadline = time.monotonic() + 30
    while not live_pids_with(f"sleep 317.{U}5") and time.monotonic() < deadline:
        time.sleep(0.02)
    box.cleanup()
    t.join(30)
    assert not t.is_alive()
    assert results[0].exit_code == 130
    assert "killed" in results[0].output


def test_process_tree_reports_running_processes(box: LocalSandbox) -> None:
    started = box.execute(f"sleep 318.{U}5 &", 30)
    assert started.exit_code == 0 and not started.timed_out, started.output
    # the shell returns before its background child has exec'd sleep (it shows as a bash
    # fork until then): poll until /proc has the sleep, then ask the sandbox for its tree
    deadline = time.monotonic() + 30
    while not live_pids_with(f"sleep 318.{U}5") and time.monotonic() < deadline:
        time.sleep(0.02)
    tree = box.process_tree()
    sleeps = [p for p in tree if f"sleep 318.{U}5" in p.command]
    assert len(sleeps) == 1, [p.command for p in tree]
    assert sleeps[0].state in ("S", "R")
    assert sleeps[0].elapsed_s >= 0
    assert sleeps[0].ppid > 0


def test_bad_arguments_name_the_problem(box: LocalSandbox) -> None:
    with pytest.raises(TypeError, match="command must be a str"):
        box.execute(["ls"], 5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout must be a positive"):
        box.execute("ls", 0)
    with pytest.raises(TypeError, match="stdin_data must be a str"):
        box.execute("cat", 5, stdin_data=b"x")  # type: ignore[arg-type]


def test_child_env_scrubs_secrets_keeps_basics() -> None:
    env = sandbox_child_env(
        {
            "PATH": "/usr/bin",
            "LANG": "C.UTF-8",
            "OPENAI_API_KEY": "sk-x",
            "OPENAI_BASE_URL": "http://x",
            "MY_SECRET_TOKEN": "t",
            "AWS_REGION": "eu",
            "HF_HOME": "/x",
            "WANDB_API_KEY": "w",
            "GITHUB_TOKEN": "g",
            "HOME": "/root",
        },
        home="/ws",
        sandbox_id="sid",
    )
    assert env["PATH"] == "/usr/bin" and env["LANG"] == "C.UTF-8"
    assert env["HOME"] == "/ws"
    for gone in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "MY_SECRET_TOKEN",
        "AWS_REGION",
        "HF_HOME",
        "WANDB_API_KEY",
        "GITHUB_TOKEN",
    ):
        assert gone not in env


def test_two_sandboxes_have_separate_workspaces(tmp_path: Path) -> None:
    a = LocalSandbox("same", SandboxSettings(sandbox_root=tmp_path))
    b = LocalSandbox("same", SandboxSettings(sandbox_root=tmp_path))
    try:
        assert a.workspace != b.workspace
        a.execute("echo a > file", 5)
        assert b.execute("cat file", 5).exit_code != 0
    finally:
        a.cleanup()
        b.cleanup()


def test_bounded_output_keeps_head_and_tail() -> None:
    from environments.sandboxes.capture import BoundedOutput

    buf = BoundedOutput(10)
    buf.feed(b"0123456789")
    assert buf.text() == "0123456789" and buf.dropped == 0
    for _ in range(1000):
        buf.feed(b"abcdefghij")
    buf.feed(b"TAIL!")
    text = buf.text()
    assert text.startswith("01234") and text.endswith("hiTAIL!"[-5:])
    assert f"{buf.total - 10} of {buf.total} bytes omitted" in text
    with pytest.raises(ValueError, match="output limit"):
        BoundedOutput(1)


def test_local_sandbox_satisfies_the_protocol(box: LocalSandbox) -> None:
    from environments.sandboxes.base import Sandbox

    assert isinstance(box, Sandbox)
    assert box.backend == "local"
