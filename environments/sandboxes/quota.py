"""A size limit for a sandbox's whole workspace: the host mounts a tmpfs with ``size=``
on the workspace dir before the sandbox starts.

RLIMIT_FSIZE bounds one file; this bounds the sum (a model writing a thousand 1 GB
files, or one file through many processes). tmpfs pages are charged to the memory
cgroup of the process that writes them, so the workspace also counts against the
sandbox's memory limit where a memory cgroup exists. Mounting needs root (CAP_SYS_ADMIN);
elsewhere the workspace stays a plain directory and the drill-down says "unbounded".
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

_MS_NOSUID = 2
_MS_NODEV = 4
_MNT_DETACH = 2
_UMOUNT_NOFOLLOW = 8  # never follow a link planted where the workspace was
_libc: ctypes.CDLL | None = None


def _c() -> ctypes.CDLL | None:
    """libc, for mount(2)/umount2(2): the syscalls themselves, not the mount(8) binary (a
    fork + exec per sandbox that also re-reads the whole mount table, which grows with
    every live sandbox)."""
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        except OSError:
            return None
    return _libc


def mount_tmpfs(path: Path, size_mb: int) -> bool:
    """Mount a ``size_mb`` tmpfs on ``path`` (an empty dir the host just made). True if mounted."""
    if os.geteuid() != 0 or size_mb <= 0:
        return False
    libc = _c()
    if libc is None:
        return False
    done = libc.mount(
        b"hermes-workspace",
        os.fsencode(path),
        b"tmpfs",
        ctypes.c_ulong(_MS_NOSUID | _MS_NODEV),
        f"size={int(size_mb)}m,mode=0700".encode(),
    )
    return done == 0 and os.path.ismount(path)


def unmount(path: Path) -> None:
    """Detach the workspace tmpfs (lazily: a process still holding a file in it cannot stop us)."""
    if not os.path.ismount(path):
        return
    libc = _c()
    if libc is not None:
        libc.umount2(os.fsencode(path), _MNT_DETACH | _UMOUNT_NOFOLLOW)
