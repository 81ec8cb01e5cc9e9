"""Reading /proc: which host processes belong to a sandbox, and killing them.

A process belongs to a sandbox when any of these holds (defence in depth):
its environment carries the sandbox's marker variable, its session or process
group is one the sandbox created, or it descends from such a process.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

from environments.redact import redact, truncate
from environments.sandboxes.kernelfiles import read_all, read_record
from environments.sandboxes.records import ProcessInfo

T = TypeVar("T")

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class ProcStat:
    pid: int
    ppid: int
    pgid: int
    sid: int
    state: str
    start_ticks: int


def read_stat(pid: int) -> ProcStat | None:
    raw = read_record(f"/proc/{pid}/stat")
    if raw is None:
        return None
    data = raw.decode("utf-8", errors="replace")
    # comm may contain spaces/parens: fields start after the LAST ')'.
    rest = data[data.rfind(")") + 2 :].split()
    try:
        return ProcStat(pid, int(rest[1]), int(rest[2]), int(rest[3]), rest[0], int(rest[19]))
    except (IndexError, ValueError):
        return None


_own: tuple[int, int, str] | None = None  # (pid, start ticks, pid namespace) of this process


def _own_facts() -> tuple[int, int, str]:
    """This process's start time (clock ticks) and pid namespace (its inode): constant for its
    life, read once (every sandbox's cgroup name and owner record carry them), again after a
    fork. Unreadable: -1 and "0", not kept."""
    global _own
    pid = os.getpid()
    if _own is not None and _own[0] == pid:
        return _own
    st = read_stat(pid)
    try:
        ns: str | None = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        ns = None
    facts = (pid, st.start_ticks if st is not None else -1, ns or "0")
    if st is not None and ns is not None:
        _own = facts
    return facts


def own_start_ticks() -> int:
    return _own_facts()[1]


def own_pid_ns() -> str:
    return _own_facts()[2]


def all_pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def has_env_marker(pid: int, marker: bytes) -> bool:
    raw = read_all(f"/proc/{pid}/environ")  # whole: a huge environment must not hide the marker
    return raw is not None and marker in raw.split(b"\0")


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            raw = fh.read()
    except OSError:
        return ""
    if not raw:  # kernel threads / zombies: fall back to comm
        try:
            with open(f"/proc/{pid}/comm", "rb") as fh:
                return "[" + fh.read().decode("utf-8", errors="replace").strip() + "]"
        except OSError:
            return ""
    return raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", errors="replace")


def uptime_s() -> float:
    """Seconds since boot: the clock /proc/uptime and the start times in stat read (no file
    read: this runs before and after every command)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def sandbox_processes(
    marker: bytes | None,
    groups: Collection[int] = (),
    roots: Collection[int] = (),
    include_zombies: bool = False,
    among: Collection[int] | None = None,
) -> dict[int, ProcStat]:
    """Every live process tied to a sandbox (see module doc). ``marker`` is b"NAME=value"
    (None: match by groups/roots and their descendants only). ``among``: the only pids that
    can qualify (None: every process on the host); reading stat is ~10 us a process, so a
    host with a thousand sandbox processes pays ~20 ms for a full scan."""
    stats = read_stats(all_pids() if among is None else set(among) | set(roots))
    return select(stats, marker, groups, roots, include_zombies)


def read_stats(pids: Iterable[int]) -> dict[int, ProcStat]:
    """The stat of each live pid, the console's own left out (never a sandbox's, and its stat
    sums every thread of the console)."""
    me = os.getpid()
    stats: dict[int, ProcStat] = {}
    for pid in pids:
        if pid != me and (st := read_stat(pid)) is not None:
            stats[pid] = st
    return stats


def select(
    stats: dict[int, ProcStat],
    marker: bytes | None,
    groups: Collection[int] = (),
    roots: Collection[int] = (),
    include_zombies: bool = False,
    since_ticks: int | None = None,
) -> dict[int, ProcStat]:
    """The processes of ``stats`` tied to a sandbox (see :func:`sandbox_processes`).
    ``since_ticks``: the sandbox was made then, so no process that started earlier can be
    one of its own (its environment is not read; a start time cannot be forged)."""
    if since_ticks is not None:
        stats = {pid: st for pid, st in stats.items() if st.start_ticks >= since_ticks or pid in roots}
    found: set[int] = set()
    for pid, st in stats.items():
        if (
            pid in roots
            or st.sid in groups
            or st.pgid in groups
            or (marker is not None and has_env_marker(pid, marker))
        ):
            found.add(pid)
    # Add descendants (bwrap's inner processes, children that dropped the marker).
    children: dict[int, list[int]] = {}
    for pid, st in stats.items():
        children.setdefault(st.ppid, []).append(pid)
    stack = list(found)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return {pid: stats[pid] for pid in found if include_zombies or stats[pid].state not in ("Z", "X")}


class SharedReading(Generic[T]):
    """One reading shared by the threads that ask at the same time: a caller gets the result
    of a reading that *started after* it asked (never an older one), taking it itself when
    none is under way. Hundreds of sandboxes cleaned up together each need a fresh look at
    the same host processes; one pass serves every cleanup waiting for it."""

    def __init__(self, read: Callable[[], T]) -> None:
        self._read = read
        self._cond = threading.Condition()
        self._reading = False
        self._started = 0  # readings started so far
        self._done = 0  # the number of the last reading that finished
        self._result: T | None = None
        self.readings = 0

    def fresh(self) -> T:
        with self._cond:
            need = self._started + 1  # the first reading that starts after this call
            while True:
                if self._done >= need:
                    return cast(T, self._result)
                if not self._reading:
                    self._reading, self._started = True, self._started + 1
                    mine = self._started
                    break
                self._cond.wait()
        ok = False
        try:
            result = self._read()
            ok = True
        finally:
            with self._cond:
                self._reading = False
                if ok:
                    self._result, self._done = result, mine
                    self.readings += 1
                self._cond.notify_all()  # on failure a waiter takes its own reading
        return result


def describe(stats: Iterable[ProcStat]) -> list[ProcessInfo]:
    now_ticks = uptime_s() * _CLK_TCK
    rows = []
    for st in sorted(stats, key=lambda s: s.pid):
        rows.append(
            ProcessInfo(
                pid=st.pid,
                ppid=st.ppid,
                command=truncate(redact(cmdline(st.pid)), 500),
                state=st.state,
                elapsed_s=max(0.0, (now_ticks - st.start_ticks) / _CLK_TCK),
            )
        )
    return rows


def kill_group(pgid: int, sig: int) -> bool:
    """Signal a process group; False when it no longer exists."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def kill_pid(pid: int, sig: int) -> bool:
    """Signal one process; False when it no longer exists (or is not ours to signal)."""
    try:
        os.kill(pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def group_alive(pgid: int) -> bool:
    """True while the group has a member that is not a zombie."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # killpg(0) succeeds on zombies too; look closer.
    for pid in all_pids():
        st = read_stat(pid)
        if st is not None and st.pgid == pgid and st.state not in ("Z", "X"):
            return True
    return False


def kill_all(
    marker: bytes | None,
    groups: Collection[int] = (),
    roots: Collection[int] = (),
    deadline_s: float = 3.0,
) -> int:
    """SIGKILL every process of the sandbox, repeating while forks race us. Returns count."""
    return kill_until_gone(lambda: sandbox_processes(marker, groups, roots), deadline_s)


def kill_until_gone(members: Callable[[], Iterable[int]], deadline_s: float) -> int:
    """SIGKILL whatever ``members()`` lists until it lists nothing (forks race us) or the
    deadline passes. Returns how many distinct pids were killed."""
    killed: set[int] = set()
    end = time.monotonic() + deadline_s
    pause = 0.001  # a killed process is usually gone within a millisecond: look again soon, then less often
    while True:
        pids = list(members())
        if not pids:
            break
        killed.update(pid for pid in pids if kill_pid(pid, signal.SIGKILL))
        if time.monotonic() > end:
            break
        time.sleep(pause)
        pause = min(pause * 2, 0.01)
    return len(killed)


def now_ticks() -> int:
    """Now, in the clock ticks /proc/<pid>/stat start times use (since boot)."""
    return int(uptime_s() * _CLK_TCK)


def alive(pid: int) -> bool:
    st = read_stat(pid)
    return st is not None and st.state not in ("Z", "X")


def ns_pid(pid: int) -> int | None:
    """The pid of ``pid`` in its innermost pid namespace (NSpid's last field)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh.read(8192).splitlines():
                if line.startswith(b"NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def children(pid: int) -> set[int] | None:
    """Direct children of ``pid`` (one small read), or None where the kernel lacks the file."""
    raw = read_all(f"/proc/{pid}/task/{pid}/children")
    if raw is None:
        return None
    return {int(x) for x in raw.split() if x.isdigit()}


def descendants_since(root: int, since_ticks: int, spare: Collection[int] | None = None) -> set[int]:
    """Live descendants of ``root`` started by the current command, and theirs: not under a
    child in ``spare`` (root's children before the command: earlier background jobs), or,
    when ``spare`` is None, started after ``since_ticks``."""
    stats = read_stats(all_pids())
    children: dict[int, list[int]] = {}
    for pid, st in stats.items():
        children.setdefault(st.ppid, []).append(pid)
    found: set[int] = set()
    stack = [(c, False) for c in children.get(root, ())]
    while stack:
        pid, inherited = stack.pop()
        st = stats[pid]
        if spare is not None:
            new = inherited or (st.ppid == root and pid not in spare) or st.ppid != root
            if st.ppid == root and pid in spare:
                continue  # an earlier job: it and its subtree live on
        else:
            new = inherited or st.start_ticks > since_ticks
        if new and st.state not in ("Z", "X"):
            found.add(pid)
        stack.extend((c, new) for c in children.get(pid, ()))
    return found
