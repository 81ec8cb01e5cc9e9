"""Reading /proc and cgroupfs files with as few system calls as possible.

A tool thread waits for the GIL after every blocking call it makes, and with hundreds of
rollouts in flight that wait is up to a switch interval (5 ms) each time. Python's
``open()`` costs seven calls per file (open, fstat, ioctl, lseek, read, read, close); these
cost two or three, and a counter read before and after every command costs one
(:class:`Rereadable`: the file stays open and is read again from offset 0).
"""

from __future__ import annotations

import os
import threading

_FLAGS = os.O_RDONLY | os.O_CLOEXEC


def read_record(path: str, size: int = 4096) -> bytes | None:
    """A file the kernel writes as one short record (``/proc/<pid>/stat``): one read of
    ``size`` bytes (the kernel hands the whole record to one read that can hold it)."""
    try:
        fd = os.open(path, _FLAGS)
    except OSError:
        return None
    try:
        return os.read(fd, size)
    except OSError:
        return None
    finally:
        os.close(fd)


def read_all(path: str, limit: int | None = None) -> bytes | None:
    """A file of any length (``cgroup.procs``, ``environ``), read to its end (or ``limit``)."""
    try:
        fd = os.open(path, _FLAGS)
    except OSError:
        return None
    try:
        chunks: list[bytes] = []
        total = 0
        while limit is None or total < limit:
            chunk = os.read(fd, 65536 if limit is None else min(65536, limit - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


class Rereadable:
    """A small kernel file kept open and read again from the start (``pread`` at 0 makes a
    seq_file render afresh): one system call per reading. Closed with its owner."""

    def __init__(self, path: str, size: int = 4096) -> None:
        self.path, self._size = path, size
        self._fd: int | None = None
        self._lock = threading.Lock()  # close() must not hand a reader a reused fd number
        self._closed = False

    def read(self) -> bytes | None:
        with self._lock:
            if self._closed:
                return None
            if self._fd is None:
                try:
                    self._fd = os.open(self.path, _FLAGS)
                except OSError:
                    return None
            try:
                return os.pread(self._fd, self._size, 0)
            except OSError:
                return None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
