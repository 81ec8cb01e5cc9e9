"""Sandboxes orphaned by a process that died without cleaning up (crash, SIGKILL).

Each sandbox writes ``owner.json`` (owner pid + its start time, marker, dirs) into its
state dir. A sweep kills the leftover processes of sandboxes whose owner is gone and
removes their dirs. Dirs without an owner file, or outside the root, are never touched.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import List

from environments.sandboxes import procfs

OWNER_FILE = "owner.json"


def _start_ticks(pid: int) -> int:
    st = procfs.read_stat(pid)
    return st.start_ticks if st is not None else -1


def write_owner(state_dir: Path, marker: bytes, dirs: List[Path]) -> None:
    pid = os.getpid()
    data = {"pid": pid, "start_ticks": _start_ticks(pid), "marker": marker.decode(), "dirs": [str(d) for d in dirs]}
    (state_dir / OWNER_FILE).write_text(json.dumps(data))


def _owner_alive(pid: int, start_ticks: int) -> bool:
    st = procfs.read_stat(pid)
    return st is not None and st.state not in ("Z", "X") and st.start_ticks == start_ticks


def sweep_stale(root: Path) -> int:
    """Clean sandboxes under ``root`` whose owning process is dead. Returns the count."""
    root = Path(os.path.realpath(root))
    try:
        states = [p for p in root.iterdir() if p.name.startswith(".state-") and p.is_dir()]
    except OSError:
        return 0
    cleaned = 0
    for state in states:
        try:
            data = json.loads((state / OWNER_FILE).read_text())
            pid, ticks, marker = int(data["pid"]), int(data["start_ticks"]), str(data["marker"])
            dirs = [Path(os.path.realpath(d)) for d in data["dirs"]]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if _owner_alive(pid, ticks):
            continue
        procfs.kill_all(marker.encode())
        for d in dirs:
            if d.parent == root:  # never delete anything outside the sandbox root
                shutil.rmtree(d, ignore_errors=True)
        cleaned += 1
    return cleaned
