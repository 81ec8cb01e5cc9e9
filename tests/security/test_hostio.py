"""The host-side primitives for sandbox-writable paths (environments/sandboxes/hostio.py):
no symlink followed at any component, regular files only, never blocking, size-capped.
Oracle: the bytes of the files the attack points at, and os.stat."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from environments.sandboxes.hostio import UnsafeFileError, read_beneath, read_regular, write_beneath, write_new

pytestmark = pytest.mark.timeout(120)  # a hang detector: the tests' own waits (up to 30 s) fail first


@pytest.fixture
def tree(tmp_path: Path):
    root = tmp_path / "ws"
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim"
    victim.write_text("host data\n")
    return root, outside, victim


def test_read_regular_refuses_links_fifos_devices_and_big_files(tree) -> None:
    root, _, victim = tree
    (root / "link").symlink_to(victim)
    os.mkfifo(root / "fifo")
    (root / "zero").symlink_to("/dev/zero")
    (root / "big").write_bytes(b"x" * 5000)
    for name in ("link", "fifo", "zero"):
        with pytest.raises(UnsafeFileError):
            read_regular(root / name, 1 << 20)
    with pytest.raises(UnsafeFileError, match="over the 4096-byte limit"):
        read_regular(root / "big", 4096)
    assert read_regular(root / "big", 5000) == b"x" * 5000


def test_write_new_never_reuses_a_planted_path(tree) -> None:
    root, _, victim = tree
    (root / "planted").symlink_to(victim)
    with pytest.raises(OSError):
        write_new(root / "planted", b"payload")
    assert victim.read_text() == "host data\n"


def test_write_beneath_refuses_a_symlinked_parent_or_target(tree) -> None:
    root, outside, victim = tree
    (root / "dir").symlink_to(outside)
    (root / "file").symlink_to(victim)
    with pytest.raises(UnsafeFileError):
        write_beneath(root, "dir/victim", b"payload")
    with pytest.raises(UnsafeFileError):
        write_beneath(root, "file", b"payload")
    with pytest.raises(UnsafeFileError):
        write_beneath(root, "../outside/victim", b"payload")
    assert victim.read_text() == "host data\n" and sorted(os.listdir(outside)) == ["victim"]
    write_beneath(root, "new/sub/ok.txt", b"fine")
    assert (root / "new" / "sub" / "ok.txt").read_bytes() == b"fine"
    assert not (root / "new").is_symlink()


def test_write_beneath_a_fifo_neither_blocks_nor_writes(tree) -> None:
    root, _, _ = tree
    os.mkfifo(root / "fifo")
    done = threading.Event()
    errors = []

    def attempt() -> None:
        try:
            write_beneath(root, "fifo", b"payload")
        except UnsafeFileError as exc:
            errors.append(exc)
        done.set()

    threading.Thread(target=attempt, daemon=True).start()
    assert done.wait(20), "write_beneath blocked on a FIFO"
    assert errors and "FIFO" in str(errors[0])
    # with a reader attached the open succeeds, but the type check still refuses it
    fd = os.open(root / "fifo", os.O_RDONLY | os.O_NONBLOCK)
    try:
        with pytest.raises(UnsafeFileError, match="not a regular file"):
            write_beneath(root, "fifo", b"payload")
        assert os.read(fd, 100) == b""
    finally:
        os.close(fd)


def test_read_beneath_refuses_a_symlinked_component(tree) -> None:
    root, outside, _ = tree
    (root / "dir").symlink_to(outside)
    with pytest.raises(UnsafeFileError):
        read_beneath(root, "dir/victim", 1000)
    (root / "real").mkdir()
    (root / "real" / "f").write_text("ok")
    assert read_beneath(root, "real/f", 1000) == b"ok"
