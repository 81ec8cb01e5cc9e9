"""Sandbox security: no secrets inside, no network and no writes outside /workspace for
bwrap, its own pid namespace, and path escapes refused. Real processes, real bwrap."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from environments.sandboxes.base import PathEscapeError
from environments.sandboxes.bwrap import BwrapSandbox
from environments.sandboxes.local import LocalSandbox
from environments.sandboxes.settings import SandboxSettings

pytestmark = pytest.mark.timeout(120)  # a hang detector: the tests' own waits (up to 30 s) fail first

SECRETS = {
    "OPENAI_API_KEY": "sk-test-openai-0123456789abcdef",
    "MY_SECRET_TOKEN": "tok-0123456789",
    "ANTHROPIC_API_KEY": "sk-ant-0123456789abcdef",
    "HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz",
    "WANDB_API_KEY": "wandb-0123456789",
    "AWS_SECRET_ACCESS_KEY": "aws-0123456789",
    "DB_PASSWORD": "hunter2hunter2",
}


@pytest.fixture
def secrets_in_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HARMLESS_SETTING", "visible-value")


@pytest.fixture
def listener() -> Iterator[int]:
    """A loopback TCP server in the test process; yields its port."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
                conn.close()
            except OSError:
                pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join(2)
    srv.close()


def _connect_cmd(port: int) -> str:
    return f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED"


@pytest.mark.parametrize("backend", [LocalSandbox, BwrapSandbox])
def test_secrets_not_visible_inside(backend, secrets_in_environ, tmp_path: Path) -> None:
    box = backend("secrets", SandboxSettings(sandbox_root=tmp_path))
    try:
        result = box.execute("env; cat /proc/self/environ | tr '\\0' '\\n'", 5)
    finally:
        box.cleanup()
    assert result.exit_code == 0
    for name, value in SECRETS.items():
        assert name not in result.output
        assert value not in result.output
    # local passes an allow-list (PATH, LANG, ...), bwrap starts from --clearenv: an
    # unlisted variable never reaches either, whatever its name
    assert "HARMLESS_SETTING" not in result.output
    assert "PATH=" in result.output


def test_loopback_control_local_can_connect(listener: int, tmp_path: Path) -> None:
    box = LocalSandbox("net-local", SandboxSettings(sandbox_root=tmp_path))
    try:
        result = box.execute(_connect_cmd(listener), 5)
    finally:
        box.cleanup()
    assert "CONNECTED" in result.output  # proves the probe works, so the bwrap check means something


def test_bwrap_has_no_network(listener: int, tmp_path: Path) -> None:
    box = BwrapSandbox("net-bwrap", SandboxSettings(sandbox_root=tmp_path))
    try:
        tcp = box.execute(_connect_cmd(listener), 5)
        py = box.execute(
            f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {listener}), timeout=2)'", 10
        )
        dev = box.execute("cat /proc/net/dev", 5)
    finally:
        box.cleanup()
    assert "CONNECTED" not in tcp.output and tcp.exit_code != 0
    assert py.exit_code != 0 and "ConnectionRefusedError" in py.output
    interfaces = [line.split(":")[0].strip() for line in dev.output.splitlines()[2:] if ":" in line]
    assert interfaces == ["lo"]


def test_bwrap_network_opt_in(listener: int, tmp_path: Path) -> None:
    box = BwrapSandbox("net-on", SandboxSettings(sandbox_root=tmp_path, network=True))
    try:
        result = box.execute(_connect_cmd(listener), 5)
    finally:
        box.cleanup()
    assert "CONNECTED" in result.output


def test_bwrap_cannot_write_outside_workspace(tmp_path: Path) -> None:
    box = BwrapSandbox("fs", SandboxSettings(sandbox_root=tmp_path / "root"))
    host_tmp_target = tmp_path / "escape.txt"
    try:
        for target in ("/etc/hermes-x", "/usr/hermes-x", "/usr/bin/hermes-x", str(host_tmp_target)):
            box.execute(f"echo pwned > {target}", 5)
        ok = box.execute("echo fine > /workspace/in.txt && echo fine > /tmp/scratch && cat /tmp/scratch", 5)
        state_dir_visible = box.execute("ls /run/hermes-state", 5)
    finally:
        box.cleanup()
    assert not os.path.exists("/etc/hermes-x")
    assert not os.path.exists("/usr/hermes-x")
    assert not os.path.exists("/usr/bin/hermes-x")
    assert not host_tmp_target.exists()  # the host's /tmp path lands in the sandbox's private tmpfs
    assert ok.output == "fine\n"
    assert "cwd" in state_dir_visible.output


def test_bwrap_cannot_read_host_home_or_root(tmp_path: Path) -> None:
    secret = Path("/root/.hermes-sandbox-test-secret")
    secret.write_text("top secret")
    box = BwrapSandbox("home", SandboxSettings(sandbox_root=tmp_path))
    try:
        result = box.execute(f"cat {secret}; ls /root /home 2>&1 | head -3", 5)
    finally:
        box.cleanup()
        secret.unlink()
    assert "top secret" not in result.output


def test_bwrap_has_its_own_pid_namespace(tmp_path: Path) -> None:
    box = BwrapSandbox("pids", SandboxSettings(sandbox_root=tmp_path))
    try:
        result = box.execute("ps -e -o pid= | wc -l; ls /proc | grep -c '^[0-9]'", 5)
    finally:
        box.cleanup()
    counts = [int(x) for x in result.output.split()]
    host_count = sum(1 for n in os.listdir("/proc") if n.isdigit())
    assert host_count > 10
    assert all(c <= 6 for c in counts), result.output


@pytest.mark.parametrize("backend", [LocalSandbox, BwrapSandbox])
def test_path_escapes_refused(backend, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("s")
    box = backend("escape", SandboxSettings(sandbox_root=tmp_path / "root"))
    try:
        (box.host_workspace / "sub").mkdir()
        (box.host_workspace / "sneaky").symlink_to(outside)
        (box.host_workspace / "sub" / "up").symlink_to("../..")
        for bad in ("../x", "sub/../../x", "/etc/passwd", "sneaky/secret", "sub/up/x", str(outside / "secret")):
            with pytest.raises(PathEscapeError) as info:
                box.to_host_path(bad)
            assert bad in str(info.value) and box.workspace in str(info.value)
        assert box.to_host_path("sub/ok.txt") == box.host_workspace / "sub" / "ok.txt"
    finally:
        box.cleanup()
