"""docker relays a container's stdout and stderr on separate streams: the status record
that ends a command can reach the host before the command's last output. These tests
drive the docker channel over plain pipes, with the output deliberately late."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

from environments.sandboxes import docker as docker_backend
from environments.sandboxes.capture import BoundedOutput
from environments.sandboxes.docker import _SyncChannel
from environments.sandboxes.shell import INIT

NONCE = "ab" * 16


@pytest.fixture
def channel() -> Iterator[tuple[_SyncChannel, int, int]]:
    w_r, w_w = os.pipe()
    o_r, o_w = os.pipe()
    s_r, s_w = os.pipe()
    proc = subprocess.Popen(["sleep", "30"])
    ch = _SyncChannel.from_fds(w_w, o_r, s_r, proc, NONCE)
    try:
        yield ch, o_w, s_w
    finally:
        proc.kill()
        proc.wait()
        ch.close()
        for fd in (w_r, o_w, s_w):
            os.close(fd)


def _later(delay: float, fd: int, data: bytes) -> threading.Thread:
    def write() -> None:
        time.sleep(delay)
        os.write(fd, data)

    t = threading.Thread(target=write)
    t.start()
    return t


def test_a_dead_shells_last_output_is_waited_for(channel: tuple[_SyncChannel, int, int]) -> None:
    """`echo bye; exit 3`: INIT's D record overtakes "bye" (another stream); the host must
    wait for the output INIT ends with its own token, not return the command empty."""
    ch, o_w, s_w = channel
    os.write(s_w, f"D {NONCE} 3 0\n".encode())
    assert [r[0] for r in ch.read_records()] == ["D"]
    late = _later(0.3, o_w, b"bye\n" + f"\0HS {NONCE} D0\0".encode())
    buf = BoundedOutput(4096)
    ch.read_output(buf, until_empty=True)
    late.join()
    assert buf.text() == "bye\n"


def test_the_wait_for_a_dead_shells_output_is_bounded(
    channel: tuple[_SyncChannel, int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No token ever comes (the model cannot forge one without the nonce, but the relay may
    be gone): the wait ends at SYNC_WAIT_S with what arrived."""
    monkeypatch.setattr(docker_backend, "SYNC_WAIT_S", 0.4)
    ch, o_w, s_w = channel
    os.write(s_w, f"D {NONCE} 3 0\n".encode())
    ch.read_records()
    os.write(o_w, b"partial")
    started = time.monotonic()
    buf = BoundedOutput(4096)
    ch.read_output(buf, until_empty=True)
    assert 0.3 < time.monotonic() - started < 3.0
    assert buf.text() == "partial"


def test_a_token_read_before_its_record_is_not_waited_for(channel: tuple[_SyncChannel, int, int]) -> None:
    """The output (with INIT's token) is read first, the D record after: nothing is late."""
    ch, o_w, s_w = channel
    os.write(o_w, b"bye\n" + f"\0HS {NONCE} D0\0".encode())
    buf = BoundedOutput(4096)
    ch.read_output(buf)
    os.write(s_w, f"D {NONCE} 3 0\n".encode())
    ch.read_records()
    started = time.monotonic()
    ch.read_output(buf, until_empty=True)
    assert time.monotonic() - started < 1.0
    assert buf.text() == "bye\n"


def test_between_commands_nothing_is_waited_for(channel: tuple[_SyncChannel, int, int]) -> None:
    """A shell that died while idle: discarding output before the next command never waits."""
    ch, _o_w, s_w = channel
    os.write(s_w, f"D {NONCE} 1 0\n".encode())
    ch.read_records()
    started = time.monotonic()
    ch.discard_output()
    assert time.monotonic() - started < 1.0


def test_init_ends_a_dead_shells_output_with_the_token() -> None:
    """The real INIT script, output synced: a shell that ends with `exit 3` leaves its
    output, then INIT's token, on stdout (one pipe, so in that order), then the D record."""
    driver = 'IFS= read -r n <&6; [ "$2" = 0 ] || exit 199; echo bye >&7; exit 3'  # the 2nd shell ends INIT
    proc = subprocess.run(
        ["bash", "-c", INIT, "bash", driver, "", ""],
        input=f"{NONCE}\n".encode(),
        capture_output=True,
        env={**os.environ, "HERMES_OUTPUT_SYNC": "1"},
        timeout=20,
    )
    token = f"\0HS {NONCE} D0\0".encode()
    assert proc.stdout.startswith(b"bye\n" + token)
    assert f"D {NONCE} 3 0\n".encode() in proc.stderr
