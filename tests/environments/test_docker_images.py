"""Sandbox images without a registry (hermes_console/images.py) and the private engine of
`make test` (hermes_console/docker_engine.py).

Oracles: the engine's own view (`docker image inspect`, `docker ps`), file bytes read back
from inside containers and bwrap sandboxes, /proc for dockerd processes."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from environments.sandboxes.settings import SandboxSettings
from hermes_console import docker_engine, images
from tests.docker_support import ENGINE_REASON, base_rootfs, docker, needs_engine, sandbox_image

pytestmark = pytest.mark.timeout(120)
REPO = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- pure


def test_apt_mirror_is_the_one_apt_uses(tmp_path: Path) -> None:
    deb822 = tmp_path / "debian.sources"
    deb822.write_text(
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\n"
    )
    assert images.apt_mirror([deb822]) == "http://mirror.example/debian"
    one_line = tmp_path / "sources.list"
    one_line.write_text("# comment\ndeb [arch=amd64 signed-by=/k.gpg] https://m.example/debian/ bookworm main\n")
    assert images.apt_mirror([one_line]) == "https://m.example/debian"
    assert images.apt_mirror([tmp_path / "missing"]) == images.DEFAULT_MIRROR


def test_image_tags_are_content_hashes() -> None:
    tag = images.base_tag()
    assert tag.startswith("hermes-sandbox:") and len(tag.split(":")[1]) == 16
    assert images.base_tag() == tag  # same inputs, same tag: a rebuild is a no-op


def test_dockerd_argv_has_no_bridge_no_iptables_and_its_own_paths(tmp_path: Path) -> None:
    layout = docker_engine.Layout(tmp_path / "state")
    argv = layout.dockerd_argv("/usr/sbin/dockerd")
    assert {"--bridge=none", "--iptables=false", "--ip-forward=false"} <= set(argv)
    after = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--") and "=" not in argv[i]}
    assert after["--data-root"] == str(tmp_path / "state" / "data")
    assert after["--host"] == layout.host and after["--pidfile"] == str(layout.pidfile)
    assert len(str(layout.sock)) < 100  # a unix socket path must fit sun_path


def test_a_pidfile_naming_someone_else_is_never_ours(tmp_path: Path) -> None:
    layout = docker_engine.Layout(tmp_path / "state")
    layout.run_dir.mkdir(parents=True, exist_ok=True)
    try:
        layout.pidfile.write_text(f"{os.getpid()}\n")  # a live process that is not our dockerd
        assert docker_engine.our_dockerd_pid(layout) is None
        assert docker_engine.stop_private_engine(layout) is False
    finally:
        shutil.rmtree(layout.run_dir, ignore_errors=True)


def test_unmanageable_machines_say_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert docker_engine.can_manage() == "no Docker engine answered and docker.io cannot be installed (not root)"
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert docker_engine.can_manage() == "no Docker engine answered and docker.io cannot be installed (no apt-get)"


def test_run_without_an_engine_passes_the_reason_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no engine can be had, the command still runs and learns why (tests skip with it)."""
    monkeypatch.setattr(docker_engine, "_existing_engine", lambda: None)
    monkeypatch.setattr(docker_engine, "ping", lambda host, timeout=5.0: False)

    def refuse(layout, timeout=0):
        raise docker_engine.EngineError("no Docker engine answered and docker.io cannot be installed (not root)")

    monkeypatch.setattr(docker_engine, "start_dockerd", refuse)
    out = tmp_path / "env.txt"
    code = docker_engine.run(
        [
            sys.executable,
            "-c",
            f"import os; open({str(out)!r}, 'w').write(os.environ.get('HERMES_DOCKER_UNAVAILABLE', '-'))",
        ],
        state=tmp_path / "state",
    )
    assert code == 0
    assert out.read_text() == "no Docker engine answered and docker.io cannot be installed (not root)"


# --------------------------------------------------------------------------- the private engine


def _dockerds(data_root: Path) -> list:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"dockerd") and str(data_root).encode() in argv:
                found.append(int(name))
    return found


def test_two_sessions_share_one_dockerd_and_the_last_stops_it(tmp_path: Path) -> None:
    """Two `make test`-style sessions at once on one state dir: one dockerd is started, both
    use it, and when both are done no dockerd of that data root is left."""
    if docker_engine.can_manage():
        pytest.skip(docker_engine.can_manage())
    env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
    if docker_engine.ping(f"unix://{docker_engine.DEFAULT_SOCKET}"):
        pytest.skip("a system Docker engine answers on the default socket; the private one is not started")
    state = tmp_path / "state"
    gate = tmp_path / "go"
    child = (
        "import os, sys, time\n"
        "host = os.environ.get('DOCKER_HOST', '-')\n"
        # written whole then renamed: the test polls for the file and must never read it half made
        "with open(sys.argv[1] + '.tmp', 'w') as f: f.write(host)\n"
        "os.replace(sys.argv[1] + '.tmp', sys.argv[1])\n"
        f"end = time.time() + 90\n"
        f"while not os.path.exists({str(gate)!r}) and time.time() < end: time.sleep(0.1)\n"
    )
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hermes_console.docker_engine",
                "--state",
                str(state),
                "run",
                "--",
                sys.executable,
                "-c",
                child,
                str(tmp_path / f"host{i}"),
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    try:
        end = time.monotonic() + 100
        while time.monotonic() < end and not all((tmp_path / f"host{i}").exists() for i in range(2)):
            time.sleep(0.1)
        hosts = {(tmp_path / f"host{i}").read_text() for i in range(2)}
        layout = docker_engine.Layout(state)
        assert hosts == {layout.host}  # both sessions got the same private engine
        assert len(_dockerds(layout.data_root)) == 1
        assert docker_engine.ping(layout.host)
    finally:
        gate.write_text("go")
        outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert _dockerds(state / "data") == []  # the last one out stopped it
    assert not docker_engine.ping(docker_engine.Layout(state).host)


def test_a_session_leaves_only_the_images_it_means_to_keep(tmp_path: Path) -> None:
    """What a test made in the private engine (a container, an image) is gone after the
    session; an image labelled to keep (a built sandbox image) is still there next time."""
    if docker_engine.can_manage():
        pytest.skip(docker_engine.can_manage())
    if docker_engine.ping(f"unix://{docker_engine.DEFAULT_SOCKET}"):
        pytest.skip("a system Docker engine answers on the default socket; the private one is not started")
    env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
    tar = tmp_path / "one-file.tar"
    (tmp_path / "f").write_text("x")
    subprocess.run(["tar", "-C", str(tmp_path), "-cf", str(tar), "f"], check=True, timeout=30)
    state = tmp_path / "state"
    make = " && ".join(
        [
            f"docker import --change 'LABEL hermes-console.keep=1' {tar} kept:1 >/dev/null",
            f"docker import {tar} scratch:1 >/dev/null",
            "docker create --name left-behind --network none scratch:1 /f >/dev/null",
        ]
    )
    look = "docker images --format '{{.Repository}}:{{.Tag}}'; docker ps -a --format 'ctr {{.Names}}'"

    def session(cmd: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "hermes_console.docker_engine", "--state", str(state), "run", "--", "sh", "-c", cmd],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=150,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    session(make)
    assert _dockerds(state / "data") == []
    assert session(look).split() == ["kept:1"]
    assert _dockerds(state / "data") == []


# --------------------------------------------------------------------------- images


@needs_engine
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap not installed")
def test_the_base_image_exported_is_a_bwrap_rootfs(tmp_path: Path) -> None:
    from environments.sandboxes.bwrap import BwrapSandbox

    box = BwrapSandbox("rootfs", SandboxSettings(sandbox_root=tmp_path / "root"), rootfs=str(base_rootfs()))
    try:
        out = box.execute("cat /etc/debian_version >/dev/null && python3 -c 'import sys; print(sys.prefix)'", 30)
        assert out.output == "/usr\n" and out.exit_code == 0
    finally:
        box.cleanup()


@needs_engine
def test_images_cli_build_list_rm(tmp_path: Path) -> None:
    """`hermes-console images` end to end on a tarball (what `docker export` or a CI job hands
    over), and back to a rootfs dir. (A task image from a rootfs *directory*, run as a per-task
    image: tests/compat/test_benchmarks_docker.py.)"""
    tar = tmp_path / "rootfs.tar"
    subprocess.run(
        [
            "tar",
            "-C",
            str(base_rootfs()),
            "-cf",
            str(tar),
            "./usr/bin/bash",
            "./usr/lib",
            "./usr/lib64",
            "./bin",
            "./lib",
            "./lib64",
        ],
        check=True,
        timeout=120,
        capture_output=True,
    )
    tag = f"hermes-test-tar:{uuid.uuid4().hex[:8]}"
    cli = [sys.executable, "-m", "hermes_console.cli", "images"]
    built = subprocess.run(
        cli + ["build", "task", "--from", str(tar), "--tag", tag], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert built.returncode == 0 and built.stdout.strip() == tag, built.stderr
    labels = docker("image", "inspect", "--format", "{{json .Config.Labels}}", tag).stdout
    assert '"hermes-console.image":"task"' in labels and '"hermes-console.keep":"1"' in labels
    listed = subprocess.run(cli + ["list"], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert f"{tag}\ttask\t" in listed.stdout
    ran = docker("run", "--rm", "--network", "none", tag, "bash", "-c", "echo $((6 * 7))")
    assert ran.stdout == "42\n"
    # and back: the image's filesystem as a directory, byte for byte
    back = images.export_rootfs(tag, tmp_path / "exported")
    digest = hashlib.sha256((base_rootfs() / "usr" / "bin" / "bash").read_bytes()).hexdigest()
    assert hashlib.sha256((back / "usr" / "bin" / "bash").read_bytes()).hexdigest() == digest
    assert subprocess.run(cli + ["rm", tag], timeout=60, cwd=REPO).returncode == 0
    assert not images.image_exists(tag)
    bad = subprocess.run(
        cli + ["build", "task", "--from", str(tmp_path / "nothing")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert bad.returncode == 1 and "expected a rootfs directory or a tarball" in bad.stderr


def test_engine_reason_is_empty_under_make_test() -> None:
    """Under `make test` on a root + apt machine the docker tests run; elsewhere they say why."""
    if os.environ.get("HERMES_DOCKER_UNAVAILABLE") is None and not os.environ.get("DOCKER_HOST"):
        pytest.skip("not run through the engine wrapper (make test)")
    if os.environ.get("HERMES_DOCKER_UNAVAILABLE"):
        assert ENGINE_REASON == os.environ["HERMES_DOCKER_UNAVAILABLE"]
    else:
        assert ENGINE_REASON == "" and sandbox_image()
