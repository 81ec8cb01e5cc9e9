"""Sandboxes as persistent machines (issue 12), on real local and bwrap sandboxes.

Oracles: /proc (processes by the sandbox's marker in their environ, by fingerprint),
a loopback HTTP request answered from inside the sandbox, the reward a TerminalBench-
style verifier writes, the host filesystem (workspace, cgroup dirs)."""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from environments import sandboxes as sb
from environments.sandboxes.bwrap import BwrapSandbox
from environments.sandboxes.local import LocalSandbox
from environments.sandboxes.settings import SandboxSettings
from environments.task_overrides import clear_task_env_overrides, register_task_env_overrides
from environments.tool_context import ToolContext
from environments.tools.terminal import terminal_tool
from tests.docker_support import sandbox_image
from tests.helpers.proc_oracle import live_pids_with, wait_until_gone

U = f"{os.getpid():07d}"
pytestmark = pytest.mark.timeout(60)
BACKENDS = ["local", "bwrap", "docker"]
MACHINES = ("bwrap", "docker")  # a whole machine: absolute paths anywhere are the sandbox's own
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap not installed")


def _make(backend: str, root: Path, task: str = "machine") -> sb.BashSessionSandbox:
    settings = SandboxSettings(sandbox_root=root, kill_grace=0.3)
    if backend == "docker":
        from environments.sandboxes.docker import DockerSandbox

        return DockerSandbox(task, settings.model_copy(update={"docker_image": sandbox_image()}))
    return LocalSandbox(task, settings) if backend == "local" else BwrapSandbox(task, settings)


@pytest.fixture(params=BACKENDS)
def box(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[sb.BashSessionSandbox]:
    if request.param == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bwrap not installed")
    sandbox = _make(request.param, tmp_path)
    yield sandbox
    sandbox.cleanup()


def _marked(sandbox_id: str) -> list[int]:
    """Live processes whose environment carries this sandbox's marker (read from /proc)."""
    needle = f"HERMES_SANDBOX_ID={sandbox_id}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
            with open(f"/proc/{name}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in env and state not in ("Z", "X"):
            found.append(int(name))
    return found


def _wait(cond, within: float = 30.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


# --------------------------------------------------------------------------- state persists


def test_state_persists_across_commands(box: sb.BashSessionSandbox) -> None:
    scratch = "/opt/hermes-test" if box.backend in MACHINES else "opt"  # local cannot write the host's /opt
    r = box.execute(
        f"mkdir -p {scratch} && echo opt-data > {scratch}/f && echo tmp-data > /tmp/hermes-{U}-{box.sandbox_id} "
        "&& export MACHINE_VAR=kept && SHELL_ONLY=also && mkdir -p sub && cd sub",
        10,
    )
    assert r.exit_code == 0, r.output
    out = box.execute(
        f"cat ../{scratch}/f 2>/dev/null || cat {scratch}/f; cat /tmp/hermes-{U}-{box.sandbox_id}; "
        'echo "$MACHINE_VAR $SHELL_ONLY"; pwd',
        10,
    )
    assert out.output == f"opt-data\ntmp-data\nkept also\n{box.workspace}/sub\n"
    assert box.cwd() == f"{box.workspace}/sub"
    if box.backend == "local":
        os.unlink(f"/tmp/hermes-{U}-{box.sandbox_id}")


def test_background_server_answers_on_loopback(box: sb.BashSessionSandbox) -> None:
    port = 20000 + os.getpid() % 20000
    started = box.execute(f"python3 -m http.server {port} --bind 127.0.0.1 >srv.log 2>&1 &", 10)
    assert started.exit_code == 0 and started.duration_s < 10
    probe = (
        'python3 -c "import time,urllib.request\n'
        "for _ in range(300):\n"
        "    try:\n"
        f"        print(urllib.request.urlopen('http://127.0.0.1:{port}/', timeout=2).status); break\n"
        '    except OSError: time.sleep(0.1)"'
    )
    assert box.execute(probe, 45).output.strip() == "200"
    assert any("http.server" in p.command for p in box.process_tree())
    assert box.has_background_processes()


def test_terminal_tool_runs_a_detached_server(tmp_path: Path) -> None:
    sb.reset_configuration()
    sb.configure(backend="bwrap" if shutil.which("bwrap") else "local", sandbox_root=tmp_path)
    task = f"tool-{uuid.uuid4().hex[:6]}"
    try:
        out = terminal_tool(f"sleep 301.{U}7 >/dev/null 2>&1 &", timeout=10, task_id=task)
        assert out["exit_code"] == 0 and out["error"] is None, out
        # it outlived its command (waited for: the shell returns before the job has exec'd sleep)
        assert _wait(lambda: len(live_pids_with(f"sleep 301.{U}7")) == 1)
        assert terminal_tool("echo next", timeout=10, task_id=task)["output"] == "next\n"
        bg = terminal_tool(f"sleep 301.{U}8", background=True, task_id=task)  # refused on bwrap before
        assert bg["exit_code"] == 0 and bg["pid"] > 0, bg
        assert _wait(lambda: len(live_pids_with(f"sleep 301.{U}8")) == 1)
    finally:
        sb.cleanup_vm(task)
        sb.reset_configuration()
    assert wait_until_gone(f"sleep 301.{U}", 10) == []


# --------------------------------------------------------------------------- timeouts


def test_timeout_kills_only_the_command(box: sb.BashSessionSandbox) -> None:
    box.execute(f"export KEEP=1; cd /tmp; sleep 302.{U}1 >/dev/null 2>&1 &", 10)
    result = box.execute(f"trap '' TERM; sleep 302.{U}2; echo survived", 1)
    assert result.timed_out and result.exit_code == 124
    assert "survived" not in result.output
    assert wait_until_gone(f"sleep 302.{U}2", 10) == []
    assert _wait(lambda: len(live_pids_with(f"sleep 302.{U}1")) == 1)  # the earlier background job lives on
    after = box.execute('echo "$KEEP"; pwd', 10)
    assert after.output == "1\n/tmp\n"  # same shell: exports and cwd kept
    assert box.shell_restarts == 0


def test_timeout_of_a_loop_in_the_shell_itself_recovers(box: sb.BashSessionSandbox) -> None:
    box.execute("cd /tmp", 10)
    result = box.execute("while :; do :; done", 1)
    assert result.timed_out
    assert box.execute("pwd; echo ok", 10).output == "/tmp\nok\n"


# --------------------------------------------------------------------------- shell death


def test_shell_death_is_recovered_and_reported(box: sb.BashSessionSandbox) -> None:
    seen: list[tuple] = []
    box.on_restart = lambda what, why: seen.append((what, why))
    box.execute(f"mkdir -p d; cd d; sleep 303.{U}1 >/dev/null 2>&1 &", 10)
    first = box.shell_state()["shell_pid"]
    dead = box.execute("kill -9 $$", 10)
    assert "fresh shell took over" in dead.output
    assert box.execute("pwd; echo alive", 10).output == f"{box.workspace}/d\nalive\n"
    assert box.shell_restarts == 1 and seen == [("shell", "exit 137")]
    assert box.shell_state()["shell_pid"] not in (None, first)
    assert _wait(lambda: len(live_pids_with(f"sleep 303.{U}1")) == 1)  # the machine (and its jobs) survived


# --------------------------------------------------------------------------- cleanup


def test_cleanup_under_load_leaves_no_process_no_dir(box: sb.BashSessionSandbox) -> None:
    box.execute(
        f"for i in 1 2 3 4 5; do sleep 304.{U}$i >/dev/null 2>&1 & done; setsid sleep 304.{U}9 >/dev/null 2>&1 &", 10
    )
    assert _wait(lambda: len(live_pids_with(f"sleep 304.{U}")) == 6)
    groups = box._cgroup.paths() if box._cgroup is not None else []
    assert _marked(box.sandbox_id)  # the oracle sees the machine
    box.cleanup()
    assert wait_until_gone(f"sleep 304.{U}", 10) == []
    assert _wait(lambda: _marked(box.sandbox_id) == [], 10)
    host_ws = box.host_workspace if box.backend != "docker" else box._host_ws  # docker: bind-mounted host dir
    assert host_ws is not None and not host_ws.exists()
    assert not any(os.path.exists(g) for g in groups)


# --------------------------------------------------------------------------- verifier flow


@pytest.fixture(params=BACKENDS)
def registry_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bwrap not installed")
    extra = {"docker_image": sandbox_image()} if request.param == "docker" else {}
    sb.reset_configuration()
    sb.configure(backend=request.param, sandbox_root=tmp_path / "root", kill_grace=0.3, **extra)
    yield request.param
    sb.shutdown()
    sb.reset_configuration()


TEST_SH = """#!/bin/bash
mkdir -p {logs}
if [ "$(cat {answer} 2>/dev/null)" = "42" ]; then echo 1 > {logs}/reward.txt; else echo 0 > {logs}/reward.txt; fi
"""


def _paths(backend: str) -> dict:
    if backend in MACHINES:  # the TerminalBench layout: absolute paths anywhere in the machine
        return {"tests": "/tests", "logs": "/logs/verifier", "answer": "/app/answer.txt"}
    return {"tests": "tests", "logs": "logs/verifier", "answer": "app/answer.txt"}  # local: under the workspace


def _score(ctx: ToolContext, backend: str, tmp_path: Path) -> float:
    """What a TerminalBench-style compute_reward does: upload the tests dir, write
    test.sh, run it, download the verifier logs, read the reward."""
    p = _paths(backend)
    local_tests = tmp_path / f"tests-{uuid.uuid4().hex[:6]}"
    local_tests.mkdir()
    (local_tests / "data.txt").write_text("fixture\n")
    assert all(r["exit_code"] == 0 for r in ctx.upload_dir(str(local_tests), p["tests"]))
    # the file tools see only the workspace; the verifier writes test.sh like upstream does, by upload
    script = tmp_path / f"test-{uuid.uuid4().hex[:6]}.sh"
    script.write_text(TEST_SH.format(logs=p["logs"], answer=p["answer"]))
    assert ctx.upload_file(str(script), f"{p['tests']}/test.sh")["exit_code"] == 0
    run = ctx.terminal(f"bash {p['tests']}/test.sh", timeout=60)
    assert run["exit_code"] == 0, run
    out = tmp_path / f"reward-{uuid.uuid4().hex[:6]}.txt"
    got = ctx.download_file(f"{p['logs']}/reward.txt", str(out))
    assert got.get("success"), got
    return float(out.read_text().strip())


def test_verifier_flow_scores_solved_1_and_unsolved_0(registry_backend: str, tmp_path: Path) -> None:
    answer = _paths(registry_backend)["answer"]
    solved, unsolved = ToolContext(f"solved-{U}"), ToolContext(f"unsolved-{U}")
    try:
        solved.terminal(f"mkdir -p $(dirname {answer}) && echo 42 > {answer}")
        unsolved.terminal(f"mkdir -p $(dirname {answer}) && echo 41 > {answer}")
        assert _score(solved, registry_backend, tmp_path) == 1.0
        assert _score(unsolved, registry_backend, tmp_path) == 0.0
    finally:
        solved.cleanup()
        unsolved.cleanup()


def test_a_model_tampering_with_bash_does_not_score_an_unsolved_task(registry_backend: str, tmp_path: Path) -> None:
    """The model's shell state (a `bash` function, PATH, exports) and, on bwrap, attempts to
    replace /usr/bin/bash or /bin must not change what the reward code runs."""
    task = f"tamper-{U}"
    logs = _paths(registry_backend)["logs"]
    evil = f"mkdir -p {logs}; echo 1 > {logs}/reward.txt"
    attack = (
        f"mkdir -p evil && printf '#!/bin/sh\\n{evil}\\n' > evil/bash && chmod +x evil/bash; "
        f'export PATH="$PWD/evil:$PATH"; bash() {{ {evil}; }}; export -f bash; alias bash="{evil};:"; true'
    )
    if registry_backend == "bwrap":
        # ONLY inside bwrap: on local these would hit the host's own /bin and /usr/bin
        attack += (
            "; cp evil/bash /usr/bin/bash 2>/dev/null; rm -rf /bin 2>/dev/null; "
            "mkdir -p /bin 2>/dev/null && cp evil/bash /bin/bash 2>/dev/null; true"
        )
    out = terminal_tool(attack, timeout=30, task_id=task)
    assert out["exit_code"] == 0, out
    assert terminal_tool("bash -c true; cat " + f"{logs}/reward.txt", timeout=30, task_id=task)["output"].strip() == "1"
    ctx = ToolContext(task)
    try:
        assert _score(ctx, registry_backend, tmp_path) == 0.0
    finally:
        ctx.cleanup()


def test_a_model_redefining_file_commands_cannot_forge_what_the_reward_downloads(
    registry_backend: str, tmp_path: Path
) -> None:
    """``download_file`` is reward code: the bytes it brings back must be the file's, whatever
    the model defined in its own shell. The model's persistent shell keeps functions across
    commands, so a download run there would read through the model's ``tail``/``head``/
    ``base64``/``wc``/``cat`` (here: each prints a forged reward of 1 for an unsolved task)."""
    task = f"forge-{U}"
    p = _paths(registry_backend)
    forged = "MQo="  # base64 of "1\n"
    attack = (
        f"mkdir -p $(dirname {p['answer']}) && echo 41 > {p['answer']}; "
        f"tail() {{ printf '1\\n'; }}; head() {{ printf '1\\n'; }}; base64() {{ echo {forged}; }}; "
        "wc() { echo 2; }; cat() { echo 1; }; export -f tail head base64 wc cat; true"
    )
    out = terminal_tool(attack, timeout=30, task_id=task)
    assert out["exit_code"] == 0, out
    assert (
        terminal_tool("echo hi | base64", timeout=30, task_id=task)["output"].strip() == forged
    )  # the functions are live
    ctx = ToolContext(task)
    try:
        assert _score(ctx, registry_backend, tmp_path) == 0.0
    finally:
        ctx.cleanup()


_FORGERS = (
    "tail() { printf '1\\n'; }; head() { printf '1\\n'; }; base64() { echo MQo=; }; wc() { echo 2; }; "
    'cat() { echo 1; }; stat() { echo 2; }; realpath() { echo "$3"; }; tar() { :; }; find() { :; }; '
    "export -f tail head base64 wc cat stat realpath tar find; true"
)


def test_reward_side_file_tools_and_call_tool_run_none_of_the_models_functions(registry_backend: str) -> None:
    """``ToolContext.read_file``/``search``/``call_tool`` are reward code too. On docker the file
    tools are commands: run in the agent's shell they would go through the model's functions
    (each forging a reward of 1 here); the reward side runs them in the verifier runner."""
    task = f"forge-read-{U}"
    out = terminal_tool(f"echo 41 > answer.txt; {_FORGERS}", timeout=30, task_id=task)
    assert out["exit_code"] == 0, out
    assert terminal_tool("cat answer.txt", timeout=30, task_id=task)["output"].strip() == "1"  # the functions are live
    ctx = ToolContext(task)
    try:
        got = ctx.read_file("answer.txt")
        assert got.get("content") == "1|41", got
        assert json.loads(ctx.call_tool("terminal", {"command": "cat answer.txt"}))["output"] == "41\n"
        hits = ctx.search("41")
        assert "answer.txt" in json.dumps(hits), hits
        job = json.loads(ctx.call_tool("terminal", {"command": "cat answer.txt > bg.txt", "background": True}))
        assert job["exit_code"] == 0, job
        assert _wait(lambda: ctx.read_text("bg.txt").get("content") == "41\n", within=10)
        # the model's own tools still run in its shell, functions and all
        assert terminal_tool("cat answer.txt", timeout=30, task_id=task)["output"].strip() == "1"
    finally:
        ctx.cleanup()


def test_reward_side_file_access_stops_what_the_agent_left_running_first(registry_backend: str) -> None:
    """Reward code reading a file from the host (local, bwrap) runs no command, yet a loop the
    model left could still be rewriting what it reads: the first reward-side access after agent
    commands stops the agent's leftovers, as the first verifier command does (oracle: /proc)."""
    task = f"stop-read-{U}"
    ctx = ToolContext(task)
    try:
        box = sb.get_sandbox(task)
        box.execute("echo 0 > flag.txt", 10)
        box.execute("nohup setsid bash -c 'while :; do echo 1 > flag.txt; sleep 0.005; done' >/dev/null 2>&1 &", 10)
        assert _wait(lambda: any("while :" in p.command for p in box.process_tree()))
        ctx.read_file("flag.txt")
        assert not [p for p in box.process_tree() if "while :" in p.command]
        assert box.shell_state()["agent_processes_stopped"] >= 1
        box.execute("echo 0 > flag.txt", 10)
        time.sleep(0.05)
        assert ctx.read_file("flag.txt")["content"] == "1|0"  # nothing rewrites it any more
    finally:
        ctx.cleanup()


def test_read_text_reads_what_the_verifier_would_on_every_backend(registry_backend: str, tmp_path: Path) -> None:
    """A workspace file (host-read on local and bwrap, commands on docker) and, on the machines,
    a file outside the workspace (the verifier's commands): the stored text, exactly, and the
    model's shell functions decide nothing (oracle: the uploaded bytes)."""
    task = f"read-text-{U}"
    payload = "\x1b[1mbold\x1b[0m ghp_abcdefghijklmnopqrstuvwxyz0123456789AB\n"
    src = tmp_path / "p.txt"
    src.write_text(payload)
    ctx = ToolContext(task)
    try:
        out = terminal_tool(_FORGERS, timeout=30, task_id=task)
        assert out["exit_code"] == 0, out
        places = ["answer.txt"] + (
            [f"{_paths(registry_backend)['tests']}/p.txt"] if registry_backend in MACHINES else []
        )
        for place in places:
            assert ctx.upload_file(str(src), place)["exit_code"] == 0
            assert ctx.read_text(place) == {"content": payload, "bytes": len(payload.encode())}, place
    finally:
        ctx.cleanup()


def test_read_text_refuses_what_the_model_planted_quickly_and_never_reads_the_host(
    registry_backend: str, tmp_path: Path
) -> None:
    """``read_text`` on what the model can write: a sparse file over the read limit, a FIFO, a link to
    /dev/zero, a link to a host file outside the sandbox, and a double-forked setsid loop that
    keeps swapping the answer for a link. Each read returns at once with an error or the
    sandbox's own view; the host file's content never comes back (local runs as the host: no
    boundary there, so that one is checked on bwrap and docker only)."""
    secret = tmp_path / "host-secret.txt"
    secret.write_text("HOST-SECRET\n")
    task = f"plant-{U}"
    plant = (
        "truncate -s 5M big.txt; mkfifo pipe; ln -s /dev/zero zero; "
        f"ln -s {secret} leak.txt; echo 41 > answer.txt; "
        "( setsid bash -c 'while :; do ln -sfn /dev/zero answer.txt; echo 41 > answer.tmp; "
        "mv -f answer.tmp answer.txt; done' >/dev/null 2>&1 & ) ; true"
    )
    out = terminal_tool(plant, timeout=30, task_id=task)
    assert out["exit_code"] == 0, out
    ctx = ToolContext(task)
    try:
        for path in ("big.txt", "pipe", "zero"):
            started = time.monotonic()
            got = ctx.read_text(path, limit=1 << 20)
            assert "error" in got and time.monotonic() - started < 10, (path, got)
        leak = ctx.read_text("leak.txt")
        if registry_backend != "local":
            assert "HOST-SECRET" not in json.dumps(leak), leak
        # the swapping loop was stopped before the first read: the answer holds still now
        box = sb.get_sandbox(task)
        assert not [p for p in box.process_tree() if "while :" in p.command]
        first = ctx.read_text("answer.txt")
        time.sleep(0.1)
        assert ctx.read_text("answer.txt") == first
    finally:
        ctx.cleanup()


# --------------------------------------------------------------------------- overrides


def test_overrides_apply_per_task_and_are_cleared(registry_backend: str) -> None:
    register_task_env_overrides(f"ovr-{U}", {"cwd": "/app", "modal_image": "ignored:latest"})
    try:
        box = sb.get_sandbox(f"ovr-{U}")
        other = sb.get_sandbox(f"plain-{U}")
        want = "/app" if registry_backend in MACHINES else f"{box.workspace}/app"
        assert box.execute("pwd", 10).output == f"{want}\n" and box.cwd() == want
        assert other.execute("pwd", 10).output == f"{other.workspace}\n"  # another task: untouched
        sb.cleanup_vm(f"ovr-{U}")
    finally:
        clear_task_env_overrides(f"ovr-{U}")
    again = sb.get_sandbox(f"ovr-{U}")
    assert again.execute("pwd", 10).output == f"{again.workspace}\n"  # cleared: the default again


@needs_bwrap
def test_rootfs_override_is_the_read_only_lower_layer(tmp_path: Path) -> None:
    rootfs = tmp_path / "image"
    (rootfs / "app").mkdir(parents=True)
    (rootfs / "app" / "from-image.txt").write_text("image file\n")
    (rootfs / "usr").symlink_to("/usr")  # the image's system: the host's, for the test
    for name in ("bin", "lib", "lib64"):
        if os.path.isdir(f"/{name}"):
            (rootfs / name).symlink_to(os.path.realpath(f"/{name}"))
    sb.reset_configuration()
    sb.configure(backend="bwrap", sandbox_root=tmp_path / "root")
    register_task_env_overrides(f"img-{U}", {"rootfs": str(rootfs), "cwd": "/app"})
    try:
        box = sb.get_sandbox(f"img-{U}")
        out = box.execute(
            "cat from-image.txt; { echo x > from-image.txt; } 2>/dev/null || echo read-only; "
            "mkdir -p /elsewhere && echo w > /elsewhere/f && cat /elsewhere/f",
            10,
        )
        assert out.output == "image file\nread-only\nw\n"
        assert (rootfs / "app" / "from-image.txt").read_text() == "image file\n"
    finally:
        clear_task_env_overrides(f"img-{U}")
        sb.shutdown()
        sb.reset_configuration()


def test_bad_rootfs_is_a_clear_error(tmp_path: Path) -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("bwrap not installed")
    with pytest.raises(sb.SandboxUnavailable, match="rootfs override .* is not a directory with a usr/"):
        BwrapSandbox("bad", SandboxSettings(sandbox_root=tmp_path), rootfs=str(tmp_path / "missing"))


# --------------------------------------------------------------------------- failure shape


def test_failed_terminal_call_has_the_upstream_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    from environments.tools import sandbox_access

    class Broken:
        backend = "local"
        workspace = "/w"

        def execute(self, *a, **k):
            raise sb.SandboxUnavailable("bwrap backend: bwrap failed to start")

    monkeypatch.setattr(sandbox_access, "get_sandbox", lambda tid: Broken())
    out = terminal_tool("echo hi", timeout=5, task_id="x")
    assert out["output"] == "" and out["exit_code"] == -1 and "bwrap failed to start" in out["error"]


# --------------------------------------------------------------------------- console view


def test_restart_is_an_event_and_the_drilldown_shows_shell_and_overrides(registry_backend: str) -> None:
    from environments import events
    from hermes_console.runtime import sandbox_ops

    got: list[events.Event] = []
    events.add_observer(got.append)
    task = f"view-{U}"
    register_task_env_overrides(task, {"cwd": "/srv/task"})
    try:
        box = sb.get_sandbox(task)
        box.execute("kill -9 $$", 10)
        restarts = [e for e in got if isinstance(e, events.SandboxShellRestarted)]
        assert [(e.task_id, e.what, e.reason) for e in restarts] == [(task, "shell", "exit 137")]
        view = sandbox_ops.details(task)
        assert view.shell.shell_restarts == 1 and view.shell.shell_pid
        assert view.overrides == {"cwd": "/srv/task"}
    finally:
        events.remove_observer(got.append)
        clear_task_env_overrides(task)


def test_a_killed_verifier_runner_is_replaced(box: sb.BashSessionSandbox) -> None:
    """Same uid: the model can kill the verifier runner. Reward code then gets a clear failure
    once, and the next call a fresh machine, never a silent success."""
    runner = box._verifier.shell_pid
    assert runner is not None
    box.execute(f"kill -9 {runner if box.backend == 'local' else box._verifier.reported_pid}", 10)
    first = box.execute("echo verified", 10, isolated=True)
    assert first.exit_code != 0 or first.output == "verified\n"
    assert box.execute("echo verified", 10, isolated=True).output == "verified\n"


@needs_bwrap
def test_bwrap_machine_has_no_capabilities_to_remount_the_system(tmp_path: Path) -> None:
    """As root, bwrap keeps all capabilities unless told; with them the model could unmount
    /bin or remount the host's /usr read-write and replace what the verifier runs."""
    box = BwrapSandbox("caps", SandboxSettings(sandbox_root=tmp_path))
    try:
        caps = box.execute("grep CapEff /proc/self/status", 10).output.split()[-1]
        assert int(caps, 16) == 0
        # (no remount+write probe here: on a broken build it would write to the host's /usr)
        tried = box.execute("umount /bin 2>/dev/null && echo UNMOUNTED || echo refused; ls /bin/bash", 10)
        assert tried.output == "refused\n/bin/bash\n"
        # nor can it leave its cgroup (cleanup relies on that: it kills the cgroup, no /proc sweep):
        # no cgroupfs inside, and mounting one is refused
        leave = box.execute(
            "cat /proc/mounts | grep -c cgroup; mkdir -p /mnt/cg; "
            "mount -t cgroup -o pids none /mnt/cg 2>/dev/null && echo MOUNTED",
            10,
        )
        assert leave.output == "0\n", leave.output
        if box._cgroup is not None and box._cgroup.has_pids:  # oracle: the host's view of the group
            assert box._cgroup_inescapable() and box._agent.shell_pid in box._cgroup.pids()
    finally:
        box.cleanup()


def test_shell_killed_between_commands_does_not_swallow_the_next(box: sb.BashSessionSandbox) -> None:
    from environments.sandboxes import procfs

    box.execute("cd /tmp", 10)
    shell = box._agent.shell_pid
    os.kill(shell, 9)  # e.g. the OOM killer, while no command runs
    assert _wait(lambda: not procfs.alive(shell), 30)
    # let INIT report the death (its "D" line on the status pipe) before the next command:
    # wait until the pipe is readable, without consuming it (a fixed sleep lost on a loaded box)
    import select

    probe = select.poll()
    probe.register(box._agent.sfd, select.POLLIN)
    assert probe.poll(30_000), "INIT never reported the killed shell"
    assert box.execute("echo after; pwd", 30).output == "after\n/tmp\n"
    assert box.shell_restarts == 1


# --------------------------------------------------------------------------- live output


def test_a_killed_shell_leaves_only_records_on_the_status_pipe(box: sb.BashSessionSandbox) -> None:
    """INIT's own note on a killed child ("bash: 12 Killed ...") must not reach the status
    pipe: the host would wake on it before the D record (on docker the two arrive apart) and
    send the next command to a dying shell."""
    from environments.sandboxes import procfs

    box.execute("true", 10)
    ch = box._agent
    shell = ch.shell_pid
    os.kill(shell, 9)
    assert _wait(lambda: not procfs.alive(shell), 30)
    raw = b""
    end = time.monotonic() + 30
    while b"\nR " not in b"\n" + raw and time.monotonic() < end:  # up to the fresh shell's R
        import select

        probe = select.poll()
        probe.register(ch.sfd, select.POLLIN)
        if probe.poll(200):
            raw += os.read(ch.sfd, 4096)
    lines = [ln for ln in raw.decode(errors="replace").splitlines() if ln]
    assert lines and lines[0].startswith("D "), lines
    assert all(ln[:2] in ("D ", "R ") for ln in lines), lines


SLOW = (
    "echo first-line; while [ ! -e go ]; do sleep 0.05; done; "
    "head -c 300000 /dev/zero | tr '\\0' x; echo; echo last-line; while [ ! -e stop ]; do sleep 0.05; done"
)


def test_live_output_of_the_running_command_grows_and_is_bounded(box: sb.BashSessionSandbox) -> None:
    """The drill-down's live tail: what the running command printed so far, read while it
    runs (the test gates its progress with files, so nothing depends on timing)."""
    import threading

    from environments.sandboxes.base import LIVE_TAIL_LIMIT

    assert box.live_output() is None
    result: list[sb.ExecResult] = []
    runner = threading.Thread(target=lambda: result.append(box.execute(SLOW, 60)))
    runner.start()
    try:
        assert _wait(lambda: "first-line" in ((box.live_output() or {}).get("tail") or ""))
        live = box.live_output()
        assert live is not None and live["command"] == SLOW and runner.is_alive()
        host_ws = box.host_workspace if box.backend != "docker" else box._host_ws  # docker: bind-mounted host dir
        (host_ws / "go").touch()
        assert _wait(lambda: "last-line" in ((box.live_output() or {}).get("tail") or ""))
        live = box.live_output()
        assert live is not None and runner.is_alive()
        assert live["bytes"] >= 300000 + len("first-line\nlast-line\n")
        assert len(live["tail"].encode()) <= LIVE_TAIL_LIMIT and live["tail"].endswith("x\nlast-line\n")
    finally:
        host_ws = box.host_workspace if box.backend != "docker" else box._host_ws
        (host_ws / "stop").touch()
        runner.join(60)
    assert result and result[0].exit_code == 0 and result[0].output.endswith("last-line\n")
    assert box.live_output() is None


# --------------------------------------------------------------------------- a command that ends its shell


def test_a_command_that_ends_its_shell_keeps_the_machine(box: sb.BashSessionSandbox) -> None:
    """`exit`, `set -e`, `exec`, `kill $$`, `ulimit -n`, a readonly frame variable: the
    command ends with its status, the machine (files, background jobs) survives, a fresh
    shell takes over with the exports and cwd the dying one left, nothing runs twice."""
    box.execute("sleep 300 >/dev/null 2>&1 &", 10)
    assert _wait(lambda: any("sleep 300" in p.command for p in box.process_tree()))
    d = "/tmp/ends" if box.backend == "bwrap" else f"{box.workspace}/ends"
    r = box.execute(f"mkdir -p {d}; echo kept > {d}/f; export A=1; cd {d}; echo bye; exit 3", 10)
    assert (r.exit_code, r.output) == (3, "bye\n")  # like `bash -c`: no note for a plain exit
    assert box.execute("echo A=$A; pwd; cat f", 10).output == f"A=1\n{d}\nkept\n"
    r = box.execute("set -e; export B=2; cd /; false; echo not-reached", 10)
    assert (r.exit_code, r.output) == (1, "")
    assert box.execute("echo B=$B; pwd", 10).output == "B=2\n/\n"
    assert box.execute("exec true", 10).exit_code == 0
    r = box.execute("kill $$", 10)
    assert r.exit_code == 143 and "The shell ended (killed by signal 15)" in r.output
    r = box.execute("ulimit -n 3", 10)
    assert r.exit_code == 198 and "unable to run commands" in r.output
    assert box.execute("readonly __h_seq", 10).exit_code == 0
    r = box.execute(f"echo ran >> {d}/once", 10)  # the broken shell cannot read this frame
    assert r.exit_code == 196 and "unable to run commands" in r.output
    assert box.execute(f"echo again; cat {d}/once 2>/dev/null | wc -l", 10).output == "again\n0\n"  # never run late
    assert box.shell_restarts == 6 and box.machine_restarts == 0
    assert any("sleep 300" in p.command for p in box.process_tree())  # the background job lived through it all


def test_output_cannot_forge_the_trailer_and_no_child_holds_the_status_pipe(box: sb.BashSessionSandbox) -> None:
    """The trailer travels on its own pipe with a per-sandbox nonce: text that looks like
    one on stdout/stderr is output; descendants of the shell do not hold the status pipe
    (oracle: /proc/<pid>/fd links vs the pipe inode the host reads), nor see the nonce."""
    ch = box._agent
    status_pipe = f"pipe:[{os.fstat(ch.sfd).st_ino}]"
    fake = f"T {ch.nonce[:8]}00 999 0 /etc"
    r = box.execute(
        f"printf '{fake}\\n'; printf '{fake}\\n' >&2; printf '\\nF{ch.nonce[:4]} 9 4 0 0\\nexit'; exit 5", 10
    )
    assert r.exit_code == 5 and r.output.count(fake) == 2
    assert box.execute("exec 7>/dev/null 1>/dev/null 2>&1; echo hidden", 10).output == ""
    assert box.execute("echo visible; pwd", 10).output == f"visible\n{box.cwd()}\n"
    box.execute("sleep 300 >/dev/null 2>&1 &", 10)
    assert _wait(lambda: any("sleep 300" in p.command for p in box.process_tree()))
    for proc in box.process_tree():
        links = []
        for fd in os.listdir(f"/proc/{proc.pid}/fd"):
            try:
                links.append(os.readlink(f"/proc/{proc.pid}/fd/{fd}"))
            except OSError:
                pass
        assert status_pipe not in links, (proc, links)
    seen = box.execute("cat /proc/$$/cmdline /proc/$$/environ | tr '\\0' ' '; bash -c 'echo ${__h_n:-unset}'", 10)
    assert ch.nonce not in seen.output and seen.output.endswith("unset\n")


# --------------------------------------------------------------------------- the verifier vs the model's leftovers


def test_a_process_the_model_left_cannot_rewrite_the_verifiers_reward(registry_backend: str, tmp_path: Path) -> None:
    """Reward code runs with the model's uid in the model's machine. An unsolved task whose
    model left a loop that keeps writing 1 into the verifier's reward.txt must still score 0:
    what the agent left running is stopped before the first reward command (oracle: /proc)."""
    logs = _paths(registry_backend)["logs"]
    answer = _paths(registry_backend)["answer"]
    task = f"cheat-{U}"
    ctx = ToolContext(task)
    try:
        ctx.terminal(f"mkdir -p $(dirname {answer}) && echo 41 > {answer}")
        forge = f"while :; do mkdir -p {logs} 2>/dev/null; echo 1 > {logs}/reward.txt; sleep 0.005; done"
        ctx_box = sb.get_sandbox(task)
        ctx_box.execute(f"nohup setsid bash -c '{forge}' >/dev/null 2>&1 &", 10)
        sandbox_id = ctx_box._inner.sandbox_id
        assert _wait(lambda: any("while :" in p.command for p in ctx_box.process_tree()))
        assert _score(ctx, registry_backend, tmp_path) == 0.0
        assert not [p for p in ctx_box.process_tree() if "while :" in p.command]
        assert ctx_box.shell_state()["agent_processes_stopped"] >= 1
        # the machine is otherwise intact: the agent's shell, files and cwd
        assert ctx_box.execute(f"cat {answer}", 10).output == "41\n"
        assert len(_marked(sandbox_id)) >= 2  # init + shell (+ verifier runner) still there
    finally:
        ctx.cleanup()


def test_verifier_keeps_the_agents_service_when_told(tmp_path: Path) -> None:
    settings = SandboxSettings(sandbox_root=tmp_path, kill_grace=0.3, verifier_stops_agent=False)
    box = LocalSandbox("service", settings)
    try:
        box.execute("sleep 300 >/dev/null 2>&1 &", 10)
        assert box.execute("echo verify", 10, isolated=True).output == "verify\n"
        # The backgrounded job shows as "sleep 300" once its fork has exec'd: on a loaded
        # box that can come after the verifier ran, so look for a few seconds.
        deadline = time.monotonic() + 5.0
        while not any("sleep 300" in p.command for p in box.process_tree()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert any("sleep 300" in p.command for p in box.process_tree())
    finally:
        box.cleanup()


# docker starts its runner as an exec of its own (docker exec passes only stdio)
@pytest.mark.parametrize("box", ["local", "bwrap"], indirect=True)
def test_the_verifier_runner_is_a_fork_of_init_that_keeps_nothing_of_it(box: sb.BashSessionSandbox) -> None:
    """A bash exec'd and initialised per sandbox for the reward's runner cost ~2 ms of CPU;
    INIT forks it instead. Oracle: /proc -- the runner's command line and binary are INIT's
    (no exec happened), it is INIT's child and reports its own pid (not INIT's, which a
    subshell's $$ would give), and its commands see none of INIT's arguments or nonce."""
    from environments.sandboxes import procfs

    runner = box._verifier.shell_pid
    assert runner is not None
    st = procfs.read_stat(runner)
    assert st is not None
    init = st.ppid
    assert runner not in (init, box._agent.shell_pid)
    assert Path(f"/proc/{runner}/cmdline").read_bytes() == Path(f"/proc/{init}/cmdline").read_bytes()
    assert os.readlink(f"/proc/{runner}/exe") == os.readlink(f"/proc/{init}/exe")
    probe = 'echo "[$#][${1-}][${__h_n-unset}][${__h_vs-unset}]"'
    assert box.execute(probe, 10, isolated=True).output == "[0][][unset][unset]\n"
    assert box.execute("echo verified", 10, isolated=True).output == "verified\n"


STEAL_AND_PLANT = r"""
rp={runner}
n=$(grep -E 'rw-p' /proc/$rp/maps | while read range perms rest; do
  s=$((16#${{range%%-*}})); e=$((16#${{range##*-}}))
  dd if=/proc/$rp/mem bs=4096 skip=$((s/4096)) count=$(((e-s)/4096)) 2>/dev/null
done | tr -c 'a-f0-9' '\n' | grep -E '^[0-9a-f]{{32}}$' | head -1)
[ -n "$n" ] && echo STOLEN
for seq in $(seq 0 40); do printf 'T %s %s 0 /\n' "$n" "$seq" > /proc/$rp/fd/2; done 2>/dev/null
printf 'FORGED\n' > /proc/$rp/fd/1 2>/dev/null
( sleep 0.5; while :; do
    printf 'FORGED\n' > /proc/$rp/fd/1
    for seq in 1 2 3 4; do printf 'T %s %s 0 /\n' "$n" "$seq" > /proc/$rp/fd/2; done
    sleep 0.01
  done ) >/dev/null 2>&1 &
echo PLANTED
"""


def test_a_model_that_reads_the_runners_nonce_and_writes_into_its_pipes_cannot_forge_a_reward_result(
    box: sb.BashSessionSandbox,
) -> None:
    """Same uid, no Yama: the agent's commands can read the verifier runner's memory through
    /proc/<pid>/mem (its nonce with it) and open its pipes through /proc/<pid>/fd. Forged
    trailers and output planted beforehand are dropped before each reward command, and the
    writer left running is stopped before the first (verifier_stops_agent, the default)."""
    runner = box._verifier.reported_pid
    assert runner is not None
    planted = box.execute(STEAL_AND_PLANT.format(runner=runner), 30).output
    assert "PLANTED" in planted, planted
    if box.backend != "docker":
        assert "STOLEN" in planted, planted  # the attack is real: the nonce was read from its memory
    for command, out, code in (("echo real; exit 3", "real\n", 3), ("sleep 1; echo real2; exit 4", "real2\n", 4)):
        result = box.execute(command, 10, isolated=True)
        assert (result.output, result.exit_code) == (out, code), result
