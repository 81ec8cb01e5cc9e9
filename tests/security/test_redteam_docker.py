"""Red team on a real Docker engine: limits bind, nothing outlives cleanup, no network, no
secrets, the read-only root option. Oracles: host /proc (container processes share this
kernel), the engine's own view (`docker inspect`, `docker ps`), the host's ability to fork.
Skipped, with the reason, where no engine answers (see tests/docker_support.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from environments.sandboxes.settings import SandboxSettings
from tests.docker_support import DockerBox, docker, managed_containers, needs_engine
from tests.helpers.proc_oracle import live_pids_with, wait_until_gone

pytestmark = [needs_engine, pytest.mark.timeout(120)]


def _fp() -> str:
    return f"8{uuid.uuid4().int % 10**6:06d}.5"


def _host_still_forks() -> None:
    assert subprocess.run(["true"], timeout=30).returncode == 0


def test_limits_bind_and_say_which(tmp_path: Path) -> None:
    """CPU time, file size, /tmp size and the workspace's size in all, in one container; each
    hit is named in the output (or by the kernel's ENOSPC)."""
    box = DockerBox(
        "limits",
        SandboxSettings(sandbox_root=tmp_path, cpu_time_s=1, file_size_mb=1, tmp_size_mb=8, workspace_size_mb=4),
    )
    workspace = box._host_ws
    try:
        cpu = box.execute("python3 -c 'while True: pass'", 60)
        big = box.execute("head -c 5M /dev/zero > big", 30)
        size = box.execute("stat -c %s big", 30).output.strip()
        # files under the per-file limit, more than /tmp holds in all
        tmp = box.execute(
            "for i in $(seq 1 12); do head -c 900K /dev/zero > /tmp/f$i || echo FULL; done; du -sm /tmp | cut -f1", 30
        )
        ws = box.execute("for i in 1 2 3 4 5 6; do head -c 900K /dev/zero > w$i || echo FULL; done", 30)
        used = sum(p.stat().st_size for p in workspace.iterdir()) if os.geteuid() == 0 else 0
        summary = box.limits_summary()
    finally:
        box.cleanup()
    assert not cpu.timed_out and "CPU time limit reached (1 s per process)" in cpu.output, cpu.output[-300:]
    assert "file size limit reached (1 MB per file)" in big.output, big.output[-300:]
    assert int(size) <= 1 << 20
    assert "No space left on device" in tmp.output and "FULL" in tmp.output
    assert int(tmp.output.strip().splitlines()[-1]) <= 8
    assert summary["enforced_by"] == "docker" and summary["pids"].startswith("256")
    if os.geteuid() == 0:  # the sized workspace tmpfs needs root (mount)
        assert "FULL" in ws.output and used <= 4 << 20 and summary["workspace"] == "4 MB in all (tmpfs)"
        assert str(workspace) not in Path("/proc/self/mounts").read_text() and not workspace.exists()


def test_fork_bomb_is_bounded_by_the_pids_limit(tmp_path: Path) -> None:
    box = DockerBox("forkbomb", SandboxSettings(sandbox_root=tmp_path, pids_limit=48, kill_grace=0.1))
    try:
        info = docker("inspect", "--format", "{{.HostConfig.PidsLimit}}", box.container).stdout.strip()
        # a generous bound: under load the bomb (and bash's fork retries) can outlast a few seconds
        result = box.execute("b() { b | b & }; b; sleep 2", 30)
    finally:
        box.cleanup()
    assert info == "48"
    assert "process limit reached (48 processes)" in result.output, result.output[-500:]
    _host_still_forks()


def test_memory_bomb_is_killed_with_a_visible_error(tmp_path: Path) -> None:
    box = DockerBox("membomb", SandboxSettings(sandbox_root=tmp_path, memory_mb=96))
    try:
        result = box.execute('python3 -c \'x = bytearray(1 << 30); print("ALLOC" + "DONE")\'', 60)
        ok = box.execute("python3 -c 'x = bytearray(8 << 20); print(\"small ok\")'", 60)
    finally:
        box.cleanup()
    assert "ALLOCDONE" not in result.output and result.exit_code != 0
    assert "memory limit reached (96 MB)" in result.output, result.output[-500:]
    assert ok.output.strip() == "small ok"
    _host_still_forks()


ESCAPES = {
    "background": "sleep {fp} >/dev/null 2>&1 &",
    "nohup": "nohup sleep {fp} >/dev/null 2>&1 &",
    "setsid-no-marker": "env -u HERMES_SANDBOX_ID setsid sleep {fp} >/dev/null 2>&1 < /dev/null &",
    "double-fork-python": (
        "env -u HERMES_SANDBOX_ID python3 -c 'import os, subprocess\n"
        'if os.fork() == 0:\n os.setsid()\n subprocess.Popen(["sleep", "{fp}"], stdout=subprocess.DEVNULL, '
        "stderr=subprocess.DEVNULL, start_new_session=True)\n os._exit(0)\nos.wait()'"
    ),
}


def test_no_orphans_and_no_container_after_cleanup(tmp_path: Path) -> None:
    fps = {name: _fp() for name in ESCAPES}
    box = DockerBox("orphans", SandboxSettings(sandbox_root=tmp_path))
    try:
        for name, template in ESCAPES.items():
            box.execute(template.format(fp=fps[name]), 30)
        # a background child may not have exec'd sleep yet when its command returns: poll
        deadline = time.monotonic() + 30
        alive = {name: live_pids_with(f"sleep {fp}") for name, fp in fps.items()}
        while not all(alive.values()) and time.monotonic() < deadline:
            time.sleep(0.05)
            alive = {name: live_pids_with(f"sleep {fp}") for name, fp in fps.items()}
        assert all(alive.values()), alive  # they started, and outlived their command (the machine persists)
    finally:
        box.cleanup()
    survivors = {name: wait_until_gone(f"sleep {fp}") for name, fp in fps.items()}
    assert survivors == {name: [] for name in ESCAPES}
    assert docker("inspect", box.container, check=False).returncode != 0
    assert box.container not in " ".join(managed_containers())


@pytest.fixture
def listener():
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(5)
    yield srv.getsockname()[1]
    srv.close()


def test_no_network_no_secrets(listener: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-docker-secret-abcdefghijklmnop")
    box = DockerBox("netsec", SandboxSettings(sandbox_root=tmp_path))
    try:
        nics = box.execute("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '", 10).output.split()
        env = box.execute("env; cat /proc/1/environ | tr '\\0' '\\n'", 10).output
        probe = box.execute(
            'python3 -c "import socket; s = socket.socket(); s.settimeout(3)\n'
            f"try:\n s.connect(('127.0.0.1', {listener})); print('CONNECTED')\nexcept OSError as e: print('refused')\"",
            30,
        ).output
        gateway = box.execute(
            'python3 -c "import socket; s = socket.socket(); s.settimeout(3)\n'
            "try:\n s.connect(('172.17.0.1', 80)); print('CONNECTED')\n"
            "except OSError as e: print('unreachable')\"",
            30,
        ).output
    finally:
        box.cleanup()
    assert nics == ["lo"]
    assert "sk-docker-secret" not in env and "OPENAI_API_KEY" not in env
    assert probe.strip() == "refused" and gateway.strip() == "unreachable"


def test_read_only_root_option(tmp_path: Path) -> None:
    box = DockerBox("ro", SandboxSettings(sandbox_root=tmp_path, docker_read_only=True))
    try:
        out = box.execute(
            "{ echo x > /opt/f; } 2>/dev/null || echo refused; echo w > /tmp/f && cat /tmp/f; "
            "echo ws > here && cat here",
            10,
        ).output
        assert docker("inspect", "--format", "{{.HostConfig.ReadonlyRootfs}}", box.container).stdout.strip() == "true"
        assert box.limits_summary()["root"] == "read-only image root"
    finally:
        box.cleanup()
    assert out == "refused\nw\nws\n"


def test_writable_root_persists_for_the_machine_and_goes_with_it(tmp_path: Path) -> None:
    first = DockerBox("rw", SandboxSettings(sandbox_root=tmp_path))
    try:
        first.execute("mkdir -p /opt/task && echo mine > /opt/task/f", 10)
        assert first.execute("cat /opt/task/f", 10).output == "mine\n"
    finally:
        first.cleanup()
    second = DockerBox("rw", SandboxSettings(sandbox_root=tmp_path))
    try:  # a fresh container of the same image: the earlier writes are gone
        assert second.execute("cat /opt/task/f 2>/dev/null || echo gone", 10).output == "gone\n"
    finally:
        second.cleanup()
    assert os.listdir(tmp_path) == [] or all(not p.startswith("rw-") for p in os.listdir(tmp_path))
