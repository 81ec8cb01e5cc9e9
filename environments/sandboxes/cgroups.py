"""One cgroup per sandbox (cgroup v1 ``pids`` + ``memory`` controllers), when writable.

Why: RLIMIT_NPROC does not bind uid 0, so only a pids cgroup stops a fork bomb of a
root sandbox; a memory cgroup bounds RSS and tmpfs pages together; and cgroup
membership (which a sandbox without cgroupfs access cannot leave) is how cleanup and
the stale sweep find every process, however it forked, setsid'd or renamed itself.

Groups live at ``<controller mount>/hermes-sandboxes/<pid ns>.<owner pid>.<owner start ticks>.<sandbox id>``
(the owner in the name lets any later console in the same pid namespace remove the groups of
a crashed one; a console in another pid namespace cannot judge those pids and leaves them). Processes join
through a tiny ``/bin/sh`` wrapper that writes its own pid, then execs the command,
so nothing runs outside the group even for an instant. Where cgroups are not writable
(unprivileged, cgroup v2 without delegation) ``create`` returns None and the caller
falls back to rlimits and /proc scans.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import threading
import time
from pathlib import Path

from environments.sandboxes import procfs
from environments.sandboxes.kernelfiles import Rereadable, read_all

CGROUP_ROOT = Path("/sys/fs/cgroup")
PARENT = "hermes-sandboxes"
_CONTROLLERS = ("pids", "memory", "cpu")
CFS_PERIOD_US = 100_000
MAX_TREE_DIRS = 4096  # cgroups walked before giving up (a host has tens to hundreds)
_probe: dict[str, Path] | None = None
_probe_lock = threading.Lock()


def _available() -> dict[str, Path]:
    """controller -> parent dir we may create groups in (probed once per process)."""
    if _probe is not None:
        return _probe
    with _probe_lock:
        return _probe if _probe is not None else _run_probe()


def _run_probe() -> dict[str, Path]:
    global _probe
    found: dict[str, Path] = {}
    for name in _CONTROLLERS:
        mount = CGROUP_ROOT / name
        if not (mount / "cgroup.procs").exists() or (mount / "cgroup.controllers").exists():
            continue  # not a v1 hierarchy of that controller
        parent = mount / PARENT
        try:
            parent.mkdir(exist_ok=True)
            probe = parent / f"probe-{os.getpid()}"
            probe.mkdir(exist_ok=True)
            try:
                # joining must work too, or every command's wrapper would fail
                joined = (
                    subprocess.run(
                        ["/bin/sh", "-c", f"echo $$ > {shlex.quote(str(probe / 'cgroup.procs'))}"],
                        capture_output=True,
                        timeout=10,
                    ).returncode
                    == 0
                )
            finally:
                for _ in range(100):  # the probe shell may take a moment to leave the group
                    try:
                        probe.rmdir()
                        break
                    except OSError:
                        time.sleep(0.01)
        except (OSError, subprocess.SubprocessError):
            continue
        if joined:
            found[name] = parent
    _probe = found
    return found


def _owner_gone(name: str) -> bool:
    """For a group named ``<pid ns>.<pid>.<ticks>.<id>``: its owner, in our pid namespace,
    is gone (or its pid was reused). Anything else is not ours to judge."""
    parts = name.split(".", 3)
    if (
        len(parts) != 4
        or parts[0] != procfs.own_pid_ns()
        or not parts[1].isdigit()
        or not parts[2].lstrip("-").isdigit()
    ):
        return False
    st = procfs.read_stat(int(parts[1]))
    return st is None or st.state in ("Z", "X") or st.start_ticks != int(parts[2])


def sweep_orphan_groups() -> int:
    """Kill the members of, and remove, every sandbox group whose owning console is gone
    (it crashed before cleanup). Returns how many groups were removed."""
    removed = 0
    by_name: dict[str, dict[str, Path]] = {}
    for controller, parent in _available().items():
        try:
            children = [p for p in parent.iterdir() if p.is_dir()]
        except OSError:
            continue
        for child in children:
            by_name.setdefault(child.name, {})[controller] = child
    for name, dirs in by_name.items():
        if _owner_gone(name):
            group = SandboxCgroup(dirs)
            group.kill_all()
            removed += int(group.remove())
    return removed


def _write(path: Path, value: str) -> bool:
    try:
        with open(path, "w") as fh:
            fh.write(value)
        return True
    except OSError:
        return False


def _int_map(raw: bytes | None) -> dict[str, int]:
    """``key value`` lines (pids.events, memory.oom_control) as a dict."""
    out: dict[str, int] = {}
    for line in (raw or b"").decode("utf-8", errors="replace").splitlines():
        key, _, value = line.partition(" ")
        try:
            out[key] = int(value)
        except ValueError:
            pass
    return out


class SandboxCgroup:
    """The group(s) of one sandbox: limits, membership, kill, removal."""

    def __init__(self, dirs: dict[str, Path]) -> None:
        self.dirs = dirs
        # read before and after every command: kept open (see kernelfiles)
        self._events = {
            name: Rereadable(str(dirs[controller] / name))
            for controller, name in (("pids", "pids.events"), ("memory", "memory.oom_control"))
            if controller in dirs
        }

    @classmethod
    def create(
        cls, sandbox_id: str, *, pids_max: int, memory_bytes: int, cpus: float | None = None
    ) -> SandboxCgroup | None:
        parents = _available()
        if not parents:
            return None
        name = f"{procfs.own_pid_ns()}.{os.getpid()}.{procfs.own_start_ticks()}.{sandbox_id}"
        dirs: dict[str, Path] = {}
        for controller, parent in parents.items():
            path = parent / name
            try:
                path.mkdir()
            except OSError:
                continue
            dirs[controller] = path
        group = cls(dirs)
        if "pids" in dirs:
            _write(dirs["pids"] / "pids.max", str(pids_max))
        if "memory" in dirs:
            _write(dirs["memory"] / "memory.limit_in_bytes", str(memory_bytes))
            # no swap on top of the limit (file absent without swap accounting)
            _write(dirs["memory"] / "memory.memsw.limit_in_bytes", str(memory_bytes))
        if "cpu" in dirs and cpus is not None:  # CFS quota: `cpus` CPUs' worth of time per period
            _write(dirs["cpu"] / "cpu.cfs_period_us", str(CFS_PERIOD_US))
            _write(dirs["cpu"] / "cpu.cfs_quota_us", str(max(1000, int(cpus * CFS_PERIOD_US))))
        return group if dirs else None

    @classmethod
    def adopt(cls, paths: list[str]) -> SandboxCgroup:
        """A group recorded by an earlier (dead) process, for the stale sweep. Only paths
        directly under our parent dirs are accepted."""
        dirs: dict[str, Path] = {}
        for raw in paths:
            path = Path(raw)
            for controller in _CONTROLLERS:
                if path.parent == CGROUP_ROOT / controller / PARENT and path.name not in ("", ".", ".."):
                    dirs[controller] = path
        return cls(dirs)

    @property
    def has_memory(self) -> bool:
        return "memory" in self.dirs

    @property
    def has_pids(self) -> bool:
        return "pids" in self.dirs

    @property
    def has_cpu(self) -> bool:
        return "cpu" in self.dirs

    def paths(self) -> list[str]:
        return [str(p) for p in self.dirs.values()]

    def join_script(self) -> str:
        """Shell lines that move the current shell ($$) into every group of ours."""
        return "".join(f"echo $$ > {shlex.quote(str(p / 'cgroup.procs'))} || exit 125; " for p in self.dirs.values())

    def pids(self) -> set[int]:
        """Every member, sub-groups included: a root process in the sandbox can mkdir a group
        below its own and move there (it stays under our limits, which are hierarchical)."""
        found: set[int] = set()
        for path in self.dirs.values():
            for sub in _tree(path):
                found |= _procs(sub)
        return found

    def counters(self) -> dict[str, int]:
        """Limit-hit counters, to tell the model which limit killed its command."""
        out: dict[str, int] = {}
        if "pids.events" in self._events:
            out["pids_max"] = _int_map(self._events["pids.events"].read()).get("max", 0)
        if "memory.oom_control" in self._events:
            out["oom_kill"] = _int_map(self._events["memory.oom_control"].read()).get("oom_kill", 0)
        return out

    def kill_all(self, deadline_s: float = 5.0) -> bool:
        """SIGKILL every member until none is left (forks race us; pids.max bounds them).
        True when the last listing was empty (False: the deadline came first)."""
        from environments.sandboxes.procfs import kill_until_gone

        last: list[set[int]] = []

        def members() -> set[int]:
            last[:] = [self.pids()]
            return last[0]

        kill_until_gone(members, deadline_s)
        return bool(last) and not last[0]

    def remove(self, deadline_s: float = 5.0) -> bool:
        """rmdir every group, sub-groups first (fails while a zombie is still being reaped:
        retry a while)."""
        for file in self._events.values():
            file.close()  # an open control file does not keep a group busy, but is ours to close
        end = time.monotonic() + deadline_s
        left = dict(self.dirs)
        pause = 0.001
        while left:
            for controller, path in list(left.items()):
                for sub in reversed(_tree(path)):  # children before their parent
                    try:
                        os.rmdir(sub)
                    except OSError:
                        pass
                if not path.exists():
                    del left[controller]
            if not left or time.monotonic() > end:
                break
            self.kill_all(0.0)
            time.sleep(pause)  # a member still exiting keeps its group busy for a moment
            pause = min(pause * 2, 0.02)
        return not left


def _procs(path: str | Path) -> set[int]:
    raw = read_all(os.path.join(path, "cgroup.procs"))
    return {int(x) for x in raw.split() if x.isdigit()} if raw else set()


def _tree(top: str | Path, prune: str | None = None, cap: int = 0) -> list[str]:
    """``top`` and the groups below it, parents before children (an explicit stack: a
    hostile sandbox may nest deeply), at most ``cap`` dirs (0: MAX_TREE_DIRS). Below the dir
    ``prune``, sandbox groups are left out. A cgroupfs dir's link count is 2 + its
    sub-groups, so a leaf costs one stat, not a listing of its control files."""
    cap = cap or MAX_TREE_DIRS
    out: list[str] = []
    stack = [str(top)]
    while stack and len(out) < cap:
        path = stack.pop()
        out.append(path)
        try:
            if os.stat(path).st_nlink <= 2:
                continue
            with os.scandir(path) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False) and not (path == prune and _GROUP_NAME.match(entry.name)):
                        stack.append(entry.path)
        except OSError:
            continue
    return out


# ``<pid ns>.<owner pid>.<owner start ticks>.<sandbox id>``: a sandbox's group (see create)
_GROUP_NAME = re.compile(r"\d+\.\d+\.-?\d+\.")


def pids_outside_sandbox_groups() -> set[int] | None:
    """Every process on the host that is not in some sandbox's pids group, any console's
    (None: no pids hierarchy of ours, or one too large to walk: scan /proc instead).

    Cleanup of a local sandbox kills its group, then looks for leftovers carrying its
    marker; a leftover can only be outside the group by then, and reading the few
    cgroup.procs files of the host beats reading the stat of every sandbox process
    (~20 ms per cleanup with a thousand of them). A process that moved itself into another
    sandbox's group dies with that sandbox. Hygiene, not a boundary: a local sandbox runs as
    the console's user, and as root it can do anything (see local.py)."""
    parent = _available().get("pids")
    if parent is None:
        return None
    dirs = _tree(parent.parent, prune=str(parent), cap=MAX_TREE_DIRS + 1)
    if len(dirs) > MAX_TREE_DIRS:
        return None
    found: set[int] = set()
    for path in dirs:
        found |= _procs(path)
    return found
