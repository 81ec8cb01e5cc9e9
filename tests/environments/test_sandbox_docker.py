"""docker backend: argv builders, the clear no-engine error, the exec/kill plumbing
against a stand-in CLI, and (only when an engine answers) the real thing (behaviour 34)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from environments import sandboxes as sb
from environments.sandboxes.docker import (
    DockerSandbox,
    build_exec_argv,
    build_kill_argv,
    build_run_argv,
    check_engine,
    container_name,
    parse_docker_top,
)
from environments.sandboxes.settings import SandboxSettings
from tests.docker_support import needs_engine, sandbox_image

U = f"{os.getpid():07d}"  # fixed width: makes sleep fingerprints unique per test process

pytestmark = pytest.mark.timeout(120)  # a hang detector: the tests' own waits (up to 30 s) fail first


# --------------------------------------------------------------------------- pure argv


def test_run_argv_hardening_and_mounts() -> None:
    argv = build_run_argv(
        docker="docker",
        name="hermes-task1234-abcdef12",
        image="python:3.11-slim",
        task_id="task-1234",
        host_workspace="/h/ws",
        host_state="/h/st",
        network=False,
        cpu=1.5,
        memory_mb=2048,
        pids_limit=128,
        env={"HOME": "/workspace", "HERMES_SANDBOX_ID": "sid"},
    )
    assert argv[:4] == ["docker", "run", "-d", "--init"]
    assert argv[-3:] == ["python:3.11-slim", "sleep", "infinity"]

    def after(flag: str) -> list:
        return [argv[i + 1] for i, a in enumerate(argv) if a == flag]

    assert after("--name") == ["hermes-task1234-abcdef12"]
    assert after("--cap-drop") == ["ALL"]
    assert after("--cap-add") == ["DAC_OVERRIDE", "CHOWN", "FOWNER"]
    assert after("--security-opt") == ["no-new-privileges"]
    assert after("--pids-limit") == ["128"]
    assert after("--cpus") == ["1.5"]
    assert after("--memory") == ["2048m"]
    assert after("--network") == ["none"]
    assert after("--tmpfs")[0].startswith("/tmp")
    assert after("-v") == ["/h/ws:/workspace", "/h/st:/run/hermes-state"]
    assert after("-w") == ["/workspace"]
    assert after("-e") == ["HOME=/workspace", "HERMES_SANDBOX_ID=sid"]
    assert after("--label") == ["hermes-console.task=task-1234", "hermes-console.managed=1"]  # no owner given
    # capabilities are dropped before any is added back
    assert argv.index("--cap-drop") < argv.index("--cap-add")


def test_run_argv_network_opt_in() -> None:
    argv = build_run_argv(
        docker="d",
        name="n",
        image="i",
        task_id="t",
        host_workspace="w",
        host_state="s",
        network=True,
        cpu=1,
        memory_mb=1,
        pids_limit=1,
        env={},
    )
    assert "--network" not in argv


def test_exec_and_kill_argv() -> None:
    assert build_exec_argv(docker="docker", container="c1", script="echo hi") == [
        "docker",
        "exec",
        "-i",
        "-e",
        "HERMES_OUTPUT_SYNC=1",
        "c1",
        "setsid",
        "-w",
        "bash",
        "-c",
        "echo hi",
        "bash",
    ]
    # bash's builtin kill: the image needs no procps
    assert build_kill_argv(docker="docker", container="c1", pgid=42, sig="KILL") == [
        "docker",
        "exec",
        "c1",
        "bash",
        "-c",
        "kill -KILL -- -42",
    ]


def test_container_name_shape() -> None:
    name = container_name("abcdefghijkl-task/with spaces", "0123abcd")
    assert name == "hermes-abcdefgh-0123abcd"
    assert container_name("x") != container_name("x")


def test_parse_docker_top() -> None:
    text = "PID PPID STAT ELAPSED COMMAND\n10 1 Ss 12 sleep infinity\n11 10 R+ 3 bash -c echo OPENAI_API_KEY=sk-abcdefghijklmnopqrstu\n"
    rows = parse_docker_top(text)
    assert [(r.pid, r.ppid, r.state, r.elapsed_s) for r in rows] == [(10, 1, "S", 12.0), (11, 10, "R", 3.0)]
    assert "sk-abc" not in rows[1].command


# --------------------------------------------------------------------------- clear errors


def _script(path: Path, body: str) -> str:
    path.write_text(body)
    path.chmod(0o755)
    return str(path)


def test_no_engine_is_a_clear_error(tmp_path: Path) -> None:
    fake = _script(
        tmp_path / "docker",
        "#!/bin/sh\necho 'Cannot connect to the Docker daemon at unix:///var/run/docker.sock.' >&2\nexit 1\n",
    )
    with pytest.raises(sb.SandboxUnavailable) as info:
        DockerSandbox("t", SandboxSettings(sandbox_root=tmp_path / "root"), docker=fake)
    message = str(info.value)
    assert message.startswith("docker backend: no Docker engine answered `docker info` (Cannot connect")
    assert message.endswith("start a Docker daemon or use terminal_backend=local|bwrap")
    assert not (tmp_path / "root").exists() or not any((tmp_path / "root").iterdir())


def test_missing_cli_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(sb.SandboxUnavailable, match="`docker` CLI was not found on PATH"):
        check_engine()


def test_registry_reports_docker_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _script(tmp_path / "docker", "#!/bin/sh\necho 'no daemon' >&2\nexit 1\n")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    sb.reset_configuration()
    sb.configure(backend="docker", sandbox_root=tmp_path / "root")
    try:
        with pytest.raises(sb.SandboxUnavailable, match=r"no Docker engine answered `docker info` \(no daemon\)"):
            sb.get_sandbox("d1")
        assert sb.list_sandboxes() == []
    finally:
        sb.shutdown()
        sb.reset_configuration()
    assert fake


def test_failed_run_is_a_clear_error_and_leaves_nothing(tmp_path: Path) -> None:
    fake = _script(
        tmp_path / "docker",
        '#!/bin/sh\nif [ "$1" = info ]; then exit 0; fi\necho "Unable to find image \'nope:latest\'" >&2\nexit 125\n',
    )
    root = tmp_path / "root"
    with pytest.raises(sb.SandboxUnavailable, match=r"`docker run` failed for image 'nope'.*Unable to find image"):
        DockerSandbox("t", SandboxSettings(sandbox_root=root, docker_image="nope"), docker=fake)
    assert list(root.iterdir()) == []


# --------------------------------------------------------------------------- plumbing via a stand-in CLI

# A stand-in `docker` that runs the container's view with bwrap on this host: it checks
# the argv shapes we send and lets the exec/timeout/kill/rm plumbing run for real.
FAKE_DOCKER = textwrap.dedent(
    """\
    #!{python}
    import json, os, sys
    sys.path.insert(0, {repo!r})
    from environments.sandboxes.bwrap import _system_binds
    state = {state!r}
    args = sys.argv[1:]
    cmd = args[0]
    if cmd == "info":
        sys.exit(0)
    if cmd == "run":
        name = args[args.index("--name") + 1]
        mounts = [args[i + 1] for i, a in enumerate(args) if a == "-v"]
        assert args[-2:] == ["sleep", "infinity"], args
        json.dump({{"mounts": mounts}}, open(os.path.join(state, name + ".json"), "w"))
        print("id-" + name)
        sys.exit(0)
    if cmd == "exec":
        rest = args[1:]
        env = dict(os.environ)
        while rest[0].startswith("-"):
            if rest[0] == "-e":
                key, _, value = rest[1].partition("=")
                env[key] = value
                rest = rest[2:]
            else:
                rest = rest[1:]
        name, argv = rest[0], rest[1:]
        spec = json.load(open(os.path.join(state, name + ".json")))
        bw = ["bwrap"] + _system_binds() + ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--die-with-parent"]
        for m in spec["mounts"]:
            host, view = m.split(":")
            bw += ["--bind", host, view]
        os.execvpe("bwrap", bw + ["--chdir", "/workspace", "--"] + argv, env)
    if cmd == "rm":
        name = args[-1]
        with open(os.path.join(state, "removed"), "a") as fh:
            fh.write(name + "\\n")
        sys.exit(0)
    if cmd == "top":
        print("PID PPID STAT ELAPSED COMMAND")
        sys.exit(0)
    sys.exit(2)
    """
)


@pytest.fixture
def fake_docker(tmp_path: Path) -> Iterator[tuple]:
    state = tmp_path / "fake-engine"
    state.mkdir()
    path = tmp_path / "docker"
    repo = str(Path(__file__).resolve().parents[2])
    path.write_text(FAKE_DOCKER.format(python=sys.executable, repo=repo, state=str(state)))
    path.chmod(0o755)
    yield str(path), state


def test_exec_session_through_cli(fake_docker, tmp_path: Path) -> None:
    cli, state = fake_docker
    box = DockerSandbox("plumb", SandboxSettings(sandbox_root=tmp_path / "root", kill_grace=0.3), docker=cli)
    try:
        assert box.host_workspace is None and box.workspace == "/workspace"
        with pytest.raises(NotImplementedError, match="use execute"):
            box.to_host_path("x")
        assert box.execute("echo hi; echo err >&2; exit 4", 10).output == "hi\nerr\n"
        box.execute("mkdir d && cd d && export V=7", 10)
        assert box.cwd() == "/workspace/d"
        assert box.execute('pwd; echo "$V"', 10).output == "/workspace/d\n7\n"
        assert box.execute("cat", 10, stdin_data="piped\n").output == "piped\n"
        started = time.monotonic()
        result = box.execute(f"trap '' TERM; sleep 331.{U}5", 0.5)
        assert result.exit_code == 124 and time.monotonic() - started < 5
        assert box.process_tree() == []
    finally:
        box.cleanup()
    assert (state / "removed").read_text().split() == [box.container]


# --------------------------------------------------------------------------- a real engine


@needs_engine
def test_real_container_lifecycle(tmp_path: Path) -> None:
    box = DockerSandbox("real", SandboxSettings(sandbox_root=tmp_path, docker_image=sandbox_image()))
    try:
        inspect = subprocess.run(
            ["docker", "inspect", box.container], capture_output=True, text=True, timeout=30, check=True
        )
        info = json.loads(inspect.stdout)[0]
        assert info["HostConfig"]["Init"] is True
        assert info["Config"]["Cmd"] == ["sleep", "infinity"]
        assert box.execute("echo hi && pwd", 30).output == "hi\n/workspace\n"
        assert box.execute("sleep 5", 1).exit_code == 124
    finally:
        box.cleanup()
    gone = subprocess.run(["docker", "inspect", box.container], capture_output=True, timeout=30)
    assert gone.returncode != 0


@needs_engine
def test_timeout_without_a_view_of_the_engines_pids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Docker Desktop / rootless: the container's processes are not this host's to see. A
    timeout then kills the machine's group inside the container; files stay, the next
    command gets a fresh shell, and the command's processes are gone (the engine's ps says)."""
    monkeypatch.setattr(DockerSandbox, "_container_pidns", lambda self: None)
    box = DockerSandbox("blind", SandboxSettings(sandbox_root=tmp_path, docker_image=sandbox_image(), kill_grace=0.2))
    try:
        assert box._pidns is None and box.shell_state()["shell_pid"] is None
        box.execute("echo kept > /opt/f", 30)
        result = box.execute(f"sleep 305.{U}1; echo survived", 1)
        assert result.timed_out and "survived" not in result.output
        assert box.execute("cat /opt/f", 30).output == "kept\n"
        ps = subprocess.run(["docker", "top", box.container, "-eo", "args"], capture_output=True, text=True, timeout=30)
        assert f"305.{U}1" not in ps.stdout
    finally:
        box.cleanup()
