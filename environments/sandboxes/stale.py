"""Sandboxes orphaned by a process that died without cleaning up (crash, SIGKILL).

Each sandbox gets an owner record (owner pid + its start time, sandbox id, cgroups,
dirs) in ``<root>/.owners/``: a host-only dir (mode 0700) that no sandbox mounts, so
its content is data only the host wrote. Nothing inside a sandbox's state dir or
workspace is read by the sweep. For a record whose owner is gone the sweep kills the
members of the recorded cgroups, then processes carrying the recorded marker, which
must be exactly ``HERMES_SANDBOX_ID=<the record's own id>`` (a random id the host
chose), and removes the recorded dirs only when each is a real directory directly
under the root.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
from pathlib import Path

from environments.sandboxes import procfs, quota
from environments.sandboxes.cgroups import SandboxCgroup, sweep_orphan_groups
from environments.sandboxes.hostio import UnsafeFileError, read_regular, write_new

OWNERS_DIR = ".owners"
MARKER_VAR = "HERMES_SANDBOX_ID"
_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,24}-[0-9a-f]{12}$")
_RECORD_LIMIT = 64 * 1024


def _start_ticks(pid: int) -> int:
    st = procfs.read_stat(pid)
    return st.start_ticks if st is not None else -1


def owners_dir(root: Path) -> Path:
    path = Path(root) / OWNERS_DIR
    path.mkdir(mode=0o700, exist_ok=True)
    if path.is_symlink() or not path.is_dir():
        raise OSError(f"{path} is not a plain directory")
    return path


def write_owner(root: Path, sandbox_id: str, dirs: list[Path], cgroups: list[str] | None = None) -> Path:
    """Record who owns ``sandbox_id``; returns the record's path (removed at cleanup)."""
    pid = os.getpid()
    data = {
        "pid": pid,
        "start_ticks": procfs.own_start_ticks(),
        "sandbox_id": sandbox_id,
        "dirs": [str(d) for d in dirs],
        "cgroups": list(cgroups or []),
    }
    for attempt in range(3):  # another sandbox's cleanup may rmdir an empty owners dir under us
        path = owners_dir(root) / f"{sandbox_id}.json"
        try:
            write_new(path, json.dumps(data).encode())
            return path
        except FileNotFoundError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def discard_owner(record: Path) -> None:
    """Drop a record (its sandbox is cleaned up) and the owners dir once empty."""
    record.unlink(missing_ok=True)
    try:
        record.parent.rmdir()
    except OSError:
        pass  # other records still there


def _owner_alive(pid: int, start_ticks: int) -> bool:
    st = procfs.read_stat(pid)
    return st is not None and st.state not in ("Z", "X") and st.start_ticks == start_ticks


def _removable(d: str, root: Path) -> Path | None:
    """A recorded dir we may delete: a real directory (not a link) directly under root."""
    path = Path(d)
    if path.parent != root or path.name in ("", ".", "..", OWNERS_DIR):
        return None
    try:
        return path if stat.S_ISDIR(os.lstat(path).st_mode) else None
    except OSError:
        return None


def sweep_stale(root: Path) -> int:
    """Clean sandboxes under ``root`` whose owning process is dead. Returns the count."""
    root = Path(os.path.realpath(root))
    try:
        sweep_orphan_groups()  # groups are machine-wide: a crashed console's, whatever its root
    except OSError:
        pass
    records_dir = root / OWNERS_DIR
    try:
        records = sorted(p for p in records_dir.iterdir() if p.suffix == ".json")
    except OSError:
        return 0
    cleaned = 0
    for record in records:
        try:
            data = json.loads(read_regular(record, _RECORD_LIMIT))
            pid, ticks, sandbox_id = int(data["pid"]), int(data["start_ticks"]), str(data["sandbox_id"])
            dirs = [str(d) for d in data["dirs"]]
            cgroups = [str(c) for c in data.get("cgroups", [])]
        except (OSError, UnsafeFileError, ValueError, KeyError, TypeError):
            continue
        if record.stem != sandbox_id or not _ID_RE.match(sandbox_id) or _owner_alive(pid, ticks):
            continue
        group = SandboxCgroup.adopt(cgroups)
        group.kill_all()
        group.remove()
        procfs.kill_all(f"{MARKER_VAR}={sandbox_id}".encode())
        for d in dirs:
            path = _removable(d, root)
            if path is not None:
                quota.unmount(path)  # a crashed console's workspace tmpfs
                shutil.rmtree(path, ignore_errors=True)
        record.unlink(missing_ok=True)
        cleaned += 1
    return cleaned
