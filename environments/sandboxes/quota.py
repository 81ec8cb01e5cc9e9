"""A size limit for a sandbox's whole workspace: the host mounts a tmpfs with ``size=``
on the workspace dir before the sandbox starts.

RLIMIT_FSIZE bounds one file; this bounds the sum (a model writing a thousand 1 GB
files, or one file through many processes). tmpfs pages are charged to the memory
cgroup of the process that writes them, so the workspace also counts against the
sandbox's memory limit where a memory cgroup exists. Mounting needs root (CAP_SYS_ADMIN);
elsewhere the workspace stays a plain directory and the drill-down says "unbounded".
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

MOUNT_TIMEOUT_S = 10.0


def mount_tmpfs(path: Path, size_mb: int) -> bool:
    """Mount a ``size_mb`` tmpfs on ``path`` (an empty dir the host just made). True if mounted."""
    if os.geteuid() != 0 or size_mb <= 0:
        return False
    try:
        done = subprocess.run(
            [
                "mount",
                "-t",
                "tmpfs",
                "-o",
                f"size={int(size_mb)}m,mode=0700,nosuid,nodev",
                "hermes-workspace",
                str(path),
            ],
            capture_output=True,
            timeout=MOUNT_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and os.path.ismount(path)


def unmount(path: Path) -> None:
    """Detach the workspace tmpfs (lazily: a process still holding a file in it cannot stop us)."""
    if not os.path.ismount(path):
        return
    try:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=MOUNT_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        pass
