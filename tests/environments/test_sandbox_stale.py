"""Orphaned sandboxes of a process that died without cleanup are swept (pain point 5)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from environments.sandboxes.local import LocalSandbox
from environments.sandboxes.settings import SandboxSettings
from environments.sandboxes.stale import sweep_stale

pytestmark = pytest.mark.timeout(120)  # a hang detector: the tests' own waits (up to 30 s) fail first

REPO = str(Path(__file__).resolve().parents[2])
FP = f"341.{os.getpid():07d}5"  # unique per test process: parallel runs never see each other's sleep

CHILD = """
import sys, time
sys.path.insert(0, {repo!r})
from environments.sandboxes.local import LocalSandbox
from environments.sandboxes.settings import SandboxSettings
box = LocalSandbox("crashy", SandboxSettings(sandbox_root={root!r}))
box.execute("sleep {fp} > /dev/null 2>&1 &", 60)
print(box.workspace, flush=True)
time.sleep(60)
"""


def _alive(fingerprint: str) -> bool:
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmd = open(f"/proc/{name}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
            state = open(f"/proc/{name}/stat").read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if fingerprint in cmd and state not in ("Z", "X"):
            return True
    return False


def test_sweep_cleans_sandboxes_of_a_dead_owner_only(tmp_path: Path) -> None:
    root = tmp_path / "root"
    mine = LocalSandbox("mine", SandboxSettings(sandbox_root=root))
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD.format(repo=REPO, root=str(root), fp=FP)], stdout=subprocess.PIPE, text=True
    )
    try:
        workspace = Path(child.stdout.readline().strip())
        # the shell returns before its background child has exec'd sleep: wait for /proc to show it
        deadline = time.monotonic() + 30
        while not _alive(f"sleep {FP}") and time.monotonic() < deadline:
            time.sleep(0.02)
        assert workspace.is_dir() and _alive(f"sleep {FP}")
        assert sweep_stale(root) == 0  # owner still alive: untouched
        assert workspace.is_dir()
        child.kill()  # dies without cleanup: the background sleep and dirs are orphaned
        child.wait(30)
        # The dirs surely are. The sleep usually is too, but not always: the cgroup part of the
        # sweep is machine-wide (a crashed console's groups, whatever its root), so a console
        # starting on another xdist worker right now may already have killed it.
        assert workspace.is_dir()
        assert sweep_stale(root) == 1
        deadline = time.monotonic() + 30  # returns as soon as the kill has landed
        while _alive(f"sleep {FP}") and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _alive(f"sleep {FP}")
        assert not workspace.exists()
        assert mine.host_workspace.is_dir()  # the live process's sandbox survives
        left = [p for p in root.iterdir() if p.name != ".owners"]  # .owners: host-only owner records
        assert sorted(p.name.startswith(".state-") for p in left) == [False, True]
    finally:
        child.kill()
        child.wait(5)
        mine.cleanup()
        sweep_stale(root)
