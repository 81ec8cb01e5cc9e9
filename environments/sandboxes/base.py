"""The Sandbox protocol and the spawn-per-call bash session every backend shares.

Each ``execute`` starts a fresh ``bash`` (directly, inside bwrap, or via docker exec).
The session feel (``cd`` and ``export`` persist) comes from two files in a per-sandbox
state dir: ``env.sh`` (``export -p``) and ``cwd`` (``pwd -P``), written by an EXIT
trap after each command and restored before the next. Nothing is printed to the
command's output, so there are no markers to strip.

Trust boundary: the state dir is writable by the sandbox, so the host never writes
there after creation and reads only ``cwd`` (no symlink followed, regular file, 4 KiB
cap, non-blocking open). The command text reaches bash over its stdin, framed as
``<byte length>\n<command bytes>`` followed by the caller's stdin data; the wrapper
script itself is fixed text. Owner records for the stale sweep live in a host-only dir
(see stale.py). Resource limits: a per-sandbox cgroup (pids, memory) where writable,
plus rlimits (CPU time, file size, and address space when no memory cgroup).
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import resource
import secrets
import select
import shutil
import signal
import subprocess
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from environments.sandboxes import cgroups, procfs, quota
from environments.sandboxes.capture import BoundedOutput
from environments.sandboxes.cgroups import SandboxCgroup
from environments.sandboxes.hostio import write_new
from environments.sandboxes.paths import resolve_to_host
from environments.sandboxes.records import (
    ExecResult,
    PathEscapeError,
    ProcessInfo,
    SandboxClosedError,
    SandboxUnavailable,
)
from environments.sandboxes.settings import SandboxSettings
from environments.sandboxes.shell import DRIVER, INIT, VERIFIER
from environments.sandboxes.stale import discard_owner, write_owner

__all__ = [
    "ExecResult",
    "ProcessInfo",
    "PathEscapeError",
    "SandboxUnavailable",
    "SandboxClosedError",
    "Sandbox",
    "BashSessionSandbox",
    "MARKER_VAR",
    "TIMEOUT_EXIT_CODE",
    "KILLED_EXIT_CODE",
]

MARKER_VAR = "HERMES_SANDBOX_ID"  # set in every sandbox process's env, so /proc scans find them
TIMEOUT_EXIT_CODE = 124
KILLED_EXIT_CODE = 130
# A loaded 2-core box starting hundreds of machines at once took over 20 s for some (two CPU
# hogs + 256 rollouts): a slow start waits, it does not turn into a tool error.
START_TIMEOUT_S = 60.0
_log = logging.getLogger(__name__)
_READ_CHUNK = 1 << 16
BROKEN_SHELL_CODES = (196, 197, 198)  # shell.py DRIVER: exits that hand over to a fresh shell
SHELL_STATE_FILE = "shell-state.sh"  # a dying agent shell's exports + cwd, for the next (sandbox-side only)
# Longest a command's pump sleeps without news (pipe data, hang-up): the latest it notices a
# machine that died while another process still holds its pipes, or a close from another thread.
_IDLE_WAIT_S = 0.25
LIVE_TAIL_LIMIT = 8192  # bytes of a running command's output the drill-down shows
CWD_LIMIT = 4096  # bytes of the sandbox-written cwd file we are willing to read
SIGXCPU_EXIT, SIGXFSZ_EXIT = 128 + signal.SIGXCPU, 128 + signal.SIGXFSZ


@runtime_checkable
class Sandbox(Protocol):
    task_id: str
    backend: str  # "local" | "bwrap" | "docker"
    workspace: str  # the workspace as commands inside see it (initial cwd, $HOME)
    host_workspace: Path | None  # host dir backing the workspace; None for docker

    def execute(self, command: str, timeout: float, *, stdin_data: str | None = None) -> ExecResult: ...

    def cwd(self) -> str: ...

    def to_host_path(self, path: str) -> Path: ...

    def process_tree(self) -> list[ProcessInfo]: ...

    def cleanup(self) -> None: ...


def _slug(text: str, limit: int = 24) -> str:
    return (re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.") or "task")[:limit]


def _check_timeout(timeout: float) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds, got {type(timeout).__name__}")
    if not (0 < float(timeout) < float("inf")):
        raise ValueError(f"timeout must be a positive, finite number of seconds, got {timeout!r}")
    return float(timeout)


class BashSessionSandbox(ABC):
    """Spawn-per-call bash with persistent cwd/exports, bounded capture, group kill."""

    backend: str = "abstract"
    _channel_cls: type = None  # type: ignore[assignment]  # _Channel (set below); docker: a synced one

    def __init__(
        self,
        task_id: str,
        *,
        workspace: str,
        host_workspace: Path | None,
        state_host_dir: Path,
        state_view_dir: str,
        kill_grace: float = 0.5,
        output_limit: int = 1_000_000,
        limits: SandboxSettings | None = None,
    ) -> None:
        self.task_id = task_id
        self.workspace = workspace
        self.host_workspace = host_workspace
        self.sandbox_id = f"{_slug(task_id)}-{uuid.uuid4().hex[:12]}"
        self._marker = f"{MARKER_VAR}={self.sandbox_id}".encode()
        # Every process of this sandbox starts after this tick (one tick of slack: /proc
        # start times and uptime are read at different moments of the same tick).
        self._born_ticks = procfs.now_ticks() - 1
        self._state_host = state_host_dir
        self._state_view = state_view_dir.rstrip("/")
        self._kill_grace = kill_grace
        self._output_limit = output_limit
        self._lock = threading.Lock()  # machine start/stop
        self._alock = threading.Lock()  # one agent command at a time: one shell
        self._vlock = threading.Lock()  # one verifier command at a time
        self._seq = itertools.count(1)
        self._closed = False  # no command is accepted any more (set by kill_now or cleanup)
        self._cleaned = False  # cleanup ran (or is running): it runs once
        self._command_extra_s = 0.0  # operator's extension of the running command's timeout
        self._busy = 0
        self._last_counters: dict[str, int] | None = None  # limit counters as last read (see _counters_before)
        self._machine: subprocess.Popen[bytes] | None = None
        self._vmachine: subprocess.Popen[bytes] | None = None  # docker: the verifier's own exec
        self._agent: _Channel | None = None
        self._verifier: _Channel | None = None
        self._restore_cwd = False
        self._start_timeout = START_TIMEOUT_S
        self.shell_restarts = 0
        self.machine_restarts = 0
        self.agent_processes_stopped = 0  # killed before verification (see stop_agent_processes)
        self._stop_agent_before_verify = limits.verifier_stops_agent if limits is not None else True
        self._agent_seen = 0  # agent commands so far; a sweep happens once per burst of them
        self._agent_swept = 0
        self.on_restart: Callable[[str, str], None] | None = None  # (what, why): the registry's event hook
        self._cwd_cache = workspace
        self._live: BoundedOutput | None = None  # the agent command in flight's output, for live_output
        self._live_command = ""
        self._live_since = 0.0
        self._limits = limits
        self._cgroup: SandboxCgroup | None = None
        self._owner_record: Path | None = None
        self._prefix: list[str] | None = None
        write_new(self._state_host / "cwd", (workspace + "\n").encode(), 0o644)  # fresh dir: nothing planted yet
        if limits is not None and self._wants_cgroup():
            self._cgroup = SandboxCgroup.create(
                self.sandbox_id,
                pids_max=limits.pids_limit,
                memory_bytes=limits.memory_mb * 1024 * 1024,
                cpus=limits.cpu,
            )
        # The whole workspace's size, not just each file's (RLIMIT_FSIZE): a sized tmpfs, where root can mount.
        self._workspace_quota = bool(
            limits is not None
            and host_workspace is not None
            and quota.mount_tmpfs(host_workspace, limits.workspace_size_mb)
        )
        try:
            self._owner_record = write_owner(
                self._state_host.parent,
                self.sandbox_id,
                self._dirs_to_remove(),
                self._cgroup.paths() if self._cgroup else [],
            )
        except OSError:
            self._owner_record = None  # the sweep is best effort; the sandbox still works

    # ------------------------------------------------------------ backend hooks

    @abstractmethod
    def _argv(self, script: str) -> list[str]:
        """The argv that runs ``bash -c script`` inside this backend."""

    @abstractmethod
    def _env(self) -> dict[str, str]:
        """Environment for the spawned host process (must carry the marker)."""

    def _popen_cwd(self) -> str | None:
        return None

    def _spawn_error(self, exc: OSError) -> Exception:
        return SandboxUnavailable(f"{self.backend} backend: cannot start bash ({exc})")

    def _teardown(self) -> None:
        """Backend resources beyond processes and dirs (docker: the container)."""

    def start(self) -> None:
        """Start the machine now (backends call it at the end of __init__). On failure the
        sandbox cleans up after itself and the error propagates."""
        try:
            with self._lock:
                self._ensure_machine()
        except BaseException:
            self.cleanup()
            raise

    def set_initial_cwd(self, path: str) -> None:
        """The task's working directory (per-task ``cwd`` override): created if missing."""
        q = "'" + path.replace("'", "'\\''") + "'"
        self.execute(f"mkdir -p -- {q} 2>/dev/null; cd -- {q}", 30)

    def _limit_counters(self) -> dict[str, int]:
        """Limit-hit counters (oom_kill, pids_max) of the sandbox's cgroup, when it has one."""
        return self._cgroup.counters() if self._cgroup is not None else {}

    def _counters_before(self) -> dict[str, int]:
        """The counters an agent command's are compared with: the last reading (taken after
        the previous command, the verifier's included), so a command costs one reading, not
        two. A limit hit while the sandbox was idle (a background job killed) is told with the
        agent's next command."""
        last = self._last_counters
        if last is None:
            last = self._last_counters = self._limit_counters()
        return last

    def _note_reading(self, before: dict[str, int], after: dict[str, int], verifier: bool) -> None:
        """Keep ``after`` as the agent's next "before". A verifier command moves the kept
        reading on by only what it saw itself, so a hit from the agent's idle jobs is still
        the agent's to hear."""
        if not verifier or self._last_counters is None:
            self._last_counters = after
            return
        last = self._last_counters
        self._last_counters = {k: last.get(k, 0) + after.get(k, 0) - before.get(k, 0) for k in after}

    def _cgroup_inescapable(self) -> bool:
        """Can no process of this sandbox leave its cgroup? Then killing the cgroup's members
        kills all of them and the /proc sweep at cleanup is redundant. Not on local (a root
        process can write another group's cgroup.procs); bwrap says yes."""
        return False

    def _wants_cgroup(self) -> bool:
        """Host-process backends (local, bwrap) get a cgroup; docker has its own."""
        return True

    def _limit_prefix(self) -> list[str]:
        """argv prefix that joins the sandbox's cgroup and sets rlimits, then execs the rest.
        Values never exceed the console's own hard limits (raising them would fail the command)."""
        lim = self._limits
        if lim is None:
            return []
        if self._prefix is None:
            cpu_soft = _under_hard(resource.RLIMIT_CPU, lim.cpu_time_s)
            cpu_hard = _under_hard(resource.RLIMIT_CPU, lim.cpu_time_s + 5)
            script = self._cgroup.join_script() if self._cgroup else ""
            # soft < hard: the soft limit delivers SIGXCPU (a recognisable exit), hard is the backstop
            script += f"ulimit -S -t {cpu_soft} && ulimit -H -t {cpu_hard} && "
            fsize = _under_hard(resource.RLIMIT_FSIZE, lim.file_size_mb << 20)
            script += f"ulimit -f {fsize // 512} && "  # 512-byte blocks (POSIX sh)
            if self._cgroup is None or not self._cgroup.has_memory:
                vmem = _under_hard(resource.RLIMIT_AS, lim.memory_mb << 20)
                script += f"ulimit -v {vmem // 1024} && "  # no memory cgroup: cap the address space
            script += 'exec "$@"'
            self._prefix = ["/bin/sh", "-c", script, "hermes-limits"]
        return self._prefix

    def limits_summary(self) -> dict[str, str]:
        """What bounds this sandbox, for the drill-down."""
        lim = self._limits
        if lim is None:
            return {}
        how = "cgroup" if self._cgroup is not None else "rlimit"
        mem_how = "cgroup" if self._cgroup is not None and self._cgroup.has_memory else "rlimit (address space)"
        pids_how = "cgroup" if self._cgroup is not None and self._cgroup.has_pids else "none (rlimits do not bind root)"
        cpu_how = (
            f"{lim.cpu:g} CPUs (cgroup)" if self._cgroup is not None and self._cgroup.has_cpu else "no CPU share limit"
        )
        return {
            "pids": f"{lim.pids_limit} ({pids_how})",
            "cpu": cpu_how,
            "memory": f"{lim.memory_mb} MB ({mem_how})",
            "cpu_time": f"{lim.cpu_time_s} s per process (rlimit)",
            "file_size": f"{lim.file_size_mb} MB per file (rlimit)",
            "workspace": (
                f"{lim.workspace_size_mb} MB in all (tmpfs)"
                if self._workspace_quota
                else "unbounded in sum (a sized tmpfs needs root)"
            ),
            "enforced_by": how,
        }

    def _dirs_to_remove(self) -> list[Path]:
        dirs = [self._state_host]
        if self.host_workspace is not None:
            dirs.append(self.host_workspace)
        return dirs

    # ------------------------------------------------------------ public API

    @property
    def closed(self) -> bool:
        return self._closed

    def execute(
        self, command: str, timeout: float, *, stdin_data: str | None = None, isolated: bool = False
    ) -> ExecResult:
        """Run ``command`` in the agent's persistent shell (``isolated``: in a fresh fork of
        the verifier runner instead, with none of the agent shell's state; see shell.py).
        The first isolated command after agent activity first stops what the agent left
        running (see :meth:`stop_agent_processes`), unless settings say otherwise."""
        if isolated:
            self.before_verification()
        return self._run(command, timeout, stdin_data, verifier=isolated)

    def before_verification(self) -> None:
        """What reward code gets before it runs a command or reads a file: the agent's leftover
        processes stopped, once per burst of agent commands (unless settings keep them)."""
        if self._stop_agent_before_verify and self._agent_seen != self._agent_swept:
            self._agent_swept = self._agent_seen
            self.stop_agent_processes()

    def stop_agent_processes(self) -> int:
        """Kill every process the agent started that still runs (background jobs, daemons,
        whatever double-forked): reward code runs with the same uid in the same machine, so a
        process left behind could rewrite ``/tests`` or ``reward.txt`` while it runs. The
        agent's idle shell stays (it only acts on commands); files and cwd are untouched."""
        killed = procfs.kill_until_gone(self._agent_leftovers, 5.0)
        if killed:
            self.agent_processes_stopped += killed
            _log.info(
                "sandbox %s: stopped %d process(es) the agent left running before verification", self.sandbox_id, killed
            )
        return killed

    def run_diagnostic(self, command: str, timeout: float = 10.0) -> ExecResult:
        """Run in the agent's cwd without touching the agent's shell (the verifier runner)."""
        return self._run(command, timeout, None, verifier=True)

    def cwd(self) -> str:
        return self._cwd_cache

    def to_host_path(self, path: str) -> Path:
        if self.host_workspace is None:
            raise NotImplementedError(
                f"{self.backend} backend has no host view of the workspace; use execute() for file access"
            )
        return resolve_to_host(
            path, cwd=self.cwd(), home=self.workspace, view_root=self.workspace, host_root=self.host_workspace
        )

    def process_tree(self) -> list[ProcessInfo]:
        roots = {m.pid for m in (self._machine, self._vmachine) if m is not None}
        if self._cgroup is not None:
            roots |= self._cgroup.pids()
        infra = self._infra_pids()  # the machine itself (init, shell, verifier runner, bwrap)
        found = procfs.sandbox_processes(self._marker, (), roots, among=self._where_processes_can_be())
        return procfs.describe(st for pid, st in found.items() if pid not in infra)

    def shell_state(self) -> dict[str, object]:
        """The persistent shell, for the drill-down: pid, uptime, restarts, busy."""
        ch = self._agent
        return {
            "shell_pid": ch.shell_pid if ch is not None else None,
            "shell_uptime_s": round(time.monotonic() - ch.started, 1) if ch is not None else 0.0,
            "shell_restarts": self.shell_restarts,
            "machine_restarts": self.machine_restarts,
            "busy": bool(self._busy),
            "agent_processes_stopped": self.agent_processes_stopped,
        }

    def live_output(self, limit: int = LIVE_TAIL_LIMIT) -> dict[str, object] | None:
        """The agent command in flight and the last ``limit`` bytes of its output so far
        (stdout+stderr, as the shell sees them); None when the shell is idle."""
        buf, command, since = self._live, self._live_command, self._live_since
        if buf is None:
            return None
        return {
            "command": command,
            "running_s": round(max(0.0, time.monotonic() - since), 1),
            "bytes": buf.total,
            "tail": buf.peek_tail(max(0, min(int(limit), self._output_limit))),
        }

    def _where_processes_can_be(self) -> set[int] | None:
        """The pids that can belong to this sandbox: its group's and every pid in no
        sandbox's group (None: any pid on the host, when there is no pids group to go by)."""
        if self._cgroup is None or not self._cgroup.has_pids:
            return None
        outside = cgroups.pids_outside_sandbox_groups()
        return None if outside is None else outside | self._cgroup.pids()

    def _leftovers(self, roots: set[int], group_empty: bool = False) -> dict[int, procfs.ProcStat]:
        """The cleanup's safety net: live processes of this sandbox anywhere they can be (its
        group's, and those in no sandbox's group, the reading of which concurrent cleanups
        share), only those started since the sandbox was made. ``group_empty``: the group
        was just seen empty (its members are not read again)."""
        outside = _OUTSIDE_GROUPS.fresh() if self._cgroup is not None and self._cgroup.has_pids else None
        if outside is None:
            stats = procfs.read_stats(procfs.all_pids())
        else:
            mine = self._cgroup.pids() if self._cgroup is not None and not group_empty else set()
            stats = {**outside, **procfs.read_stats(mine | roots)}
        return procfs.select(stats, self._marker, (), roots, since_ticks=self._born_ticks)

    def _agent_leftovers(self) -> list[int]:
        """Live non-machine processes of this sandbox: from its cgroup when there is one (a
        few small reads; a full /proc scan per rollout costs ms with hundreds of sandboxes)."""
        if self._cgroup is None:
            return [p.pid for p in self.process_tree()]
        infra = self._infra_pids()
        out = []
        for pid in self._cgroup.pids() - infra:
            st = procfs.read_stat(pid)
            if st is not None and st.state not in ("Z", "X"):
                out.append(pid)
        return out

    def has_background_processes(self) -> bool:
        """Processes left running by earlier commands (the reaper counts them as activity);
        the machine's own init, shell and verifier runner do not count."""
        return bool(self._busy) or bool(self.process_tree())

    def running_pids(self) -> list[int]:
        ch = self._agent
        return [ch.shell_pid] if self._busy and ch is not None and ch.shell_pid else []

    # A host-process machine stops at one signal to its process groups and cgroup; docker's
    # processes live in the engine and stop with the container, at cleanup.
    _kills_early = True

    def kill_now(self) -> bool:
        """The first moment of cleanup, without its waits: refuse further commands and send
        SIGKILL once to the machine and every member of its cgroup. A finished rollout's
        processes then stop at once, not when a cleanup thread gets to them (seconds later
        when hundreds of rollouts end together): a job the model left running burns no CPU
        meanwhile, and the cleanup finds them gone. Never blocks: while another thread holds
        the machine lock (starting a machine for a command) it only refuses commands (that
        command returns as killed once its machine is up) and returns False; :meth:`cleanup`
        kills everything either way."""
        if not self._kills_early:
            return False
        if not self._lock.acquire(blocking=False):
            self._closed = True  # a plain store; the command in flight checks it while it runs
            return False
        try:
            if self._closed:
                return False
            self._closed = True
            machines = [m for m in (self._machine, self._vmachine) if m is not None and m.returncode is None]
        finally:
            self._lock.release()
        for proc in machines:  # not yet reaped (returncode None): the pid is still the machine's
            procfs.kill_group(proc.pid, signal.SIGKILL)
        if self._cgroup is not None:
            for pid in self._cgroup.pids():
                procfs.kill_pid(pid, signal.SIGKILL)
        return True

    def cleanup(self) -> None:
        with self._lock:
            if self._cleaned:
                return
            self._cleaned = self._closed = True
        machines = [m for m in (self._machine, self._vmachine) if m is not None]
        for proc in machines:
            procfs.kill_group(proc.pid, signal.SIGKILL)
        emptied = self._cgroup.kill_all() if self._cgroup is not None else False  # however they forked
        if not (self._cgroup is not None and self._cgroup.has_pids and self._cgroup_inescapable()):
            # the safety net: stat of every process that can still be ours, environ of those
            # started since this sandbox was made (the group's members are not listed again
            # the first time when the kill just saw the group empty)
            roots = {m.pid for m in machines}
            looks = itertools.count()
            procfs.kill_until_gone(lambda: self._leftovers(roots, group_empty=emptied and not next(looks)), 3.0)
        for proc in machines:
            _reap(proc)
        # A command in flight sees its machine gone and returns; only then close its fds
        # (closing under a reader could hand it an fd number reused by someone else).
        held = [lock for lock in (self._alock, self._vlock) if lock.acquire(timeout=10)]
        try:
            for ch in (self._agent, self._verifier):
                if ch is not None and len(held) == 2:
                    ch.close()
        finally:
            for lock in held:
                lock.release()
        try:
            self._teardown()
        finally:
            if self._cgroup is not None:
                self._cgroup.remove()
            if self._workspace_quota and self.host_workspace is not None:
                quota.unmount(self.host_workspace)
            for path in self._dirs_to_remove():
                _rmtree(path)
            if self._owner_record is not None:
                discard_owner(self._owner_record)

    # ------------------------------------------------------------ the machine

    def _verifier_in_machine(self) -> bool:
        """local/bwrap: the verifier runner lives in the machine (fds 3-5 of INIT).
        docker exec passes only stdio, so docker starts it as a second exec."""
        return True

    def _start_machine(self) -> None:
        """Start the machine (INIT + agent shell + verifier runner); wait for the shell."""
        _raise_nofile()
        in_machine = self._verifier_in_machine()
        vpipes: list[int] = []
        extra: list[str] = []
        if in_machine:
            v_in_r, v_in_w = os.pipe()
            v_out_r, v_out_w = os.pipe()
            v_st_r, v_st_w = os.pipe()
            vpipes = [v_in_r, v_out_w, v_st_w]
            extra = [str(v_in_r), str(v_out_w), str(v_st_w)]
        argv = self._limit_prefix() + self._argv_init(extra)
        try:
            proc = self._popen(argv, pass_fds=tuple(vpipes))
        finally:
            for fd in vpipes:
                os.close(fd)
        self._machine = proc
        agent = self._channel_cls(proc, self._new_nonce())
        agent.send_nonce()
        if not agent.wait_ready(self._start_timeout):
            raise SandboxUnavailable(
                f"{self.backend} backend: the sandbox shell did not start within {self._start_timeout:g}s "
                f"(output: {agent.drain_text()[:300]!r})"
            )
        self._agent = agent
        if in_machine:
            self._verifier = _Channel.from_fds(v_in_w, v_out_r, v_st_r, proc, self._new_nonce())
        else:
            vproc = self._popen(self._limit_prefix() + self._argv(VERIFIER), pass_fds=())
            self._vmachine = vproc
            self._verifier = self._channel_cls(vproc, self._new_nonce())
        self._verifier.send_nonce()
        ready = [agent, self._verifier] if self._verifier.wait_ready(self._start_timeout) else [agent]
        self._map_channel_pids(ready)

    def _argv_init(self, fds: list[str]) -> list[str]:
        argv = self._argv(INIT)
        return argv + [DRIVER, VERIFIER, f"{self._state_view}/{SHELL_STATE_FILE}", *fds]

    def _popen(self, argv: list[str], pass_fds: tuple[int, ...]) -> subprocess.Popen[bytes]:
        try:
            return subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # own session + group: cleanup kills it as a whole
                env=self._env(),
                cwd=self._popen_cwd(),
                pass_fds=pass_fds,
            )
        except OSError as exc:
            raise self._spawn_error(exc) from exc

    @staticmethod
    def _new_nonce() -> str:
        return secrets.token_hex(16)

    def _map_pid(self, reported: int | None, candidates: set[int] | None = None) -> int | None:
        """The host pid of a process that reported its pid from inside its namespace: one of
        the sandbox's processes (``candidates``, when just read) whose innermost pid is it."""
        if reported is None:
            return None
        if candidates is None:
            candidates = self._cgroup.pids() if self._cgroup is not None else set()
            if not candidates and self._machine is not None:
                candidates = set(procfs.sandbox_processes(None, (), {self._machine.pid}))
        # Without a pid namespace (local) the reported pid is the host's: one status read.
        if reported in candidates and procfs.ns_pid(reported) == reported:
            return reported
        for pid in candidates:
            if procfs.ns_pid(pid) == reported:
                return pid
        return None

    def _map_channel_pids(self, channels: list[_Channel]) -> None:
        """Each ready channel's shell pid, from one reading of the sandbox's processes (read
        again only for a pid not among them)."""
        candidates: set[int] | None = None
        for ch in channels:
            if ch.reported_pid is None:
                continue
            if candidates is None:
                candidates = self._cgroup.pids() if self._cgroup is not None else None
            found = self._map_pid(ch.reported_pid, candidates or None)
            if found is None and candidates:  # started after that reading: read again
                found = self._map_pid(ch.reported_pid)
            ch.shell_pid = found

    def _infra_pids(self) -> set[int]:
        """The machine's own processes: from the agent shell up to the spawned process, and
        the verifier runner (and its ancestors up to the machine)."""
        infra: set[int] = set()
        tops = {m.pid for m in (self._machine, self._vmachine) if m is not None}
        infra |= tops
        for ch in (self._agent, self._verifier):
            if ch is None:
                continue
            if ch.shell_pid is None and ch.reported_pid is not None:
                ch.shell_pid = self._map_pid(ch.reported_pid)
            pid = ch.shell_pid
            for _ in range(8):  # bounded walk: prefix sh -> bwrap -> bwrap init -> INIT -> shell
                if pid is None or pid in tops or pid <= 1:
                    break
                infra.add(pid)
                st = procfs.read_stat(pid)
                pid = st.ppid if st is not None else None
        return infra

    def _ensure_machine(self) -> None:
        broken = any(ch is not None and ch.dead for ch in (self._agent, self._verifier))
        if self._machine is not None and self._machine.poll() is None and not broken:
            return
        if broken and self._machine is not None and self._machine.poll() is None:
            # e.g. the model killed the verifier runner: a fresh machine, not a dead channel
            procfs.kill_group(self._machine.pid, signal.SIGKILL)
            _reap(self._machine)
        if self._machine is not None:  # it died (OOM, killed): a fresh machine, and say so
            self.machine_restarts += 1
            self._log_restart("machine", f"exit {self._machine.returncode}")
            for ch in (self._agent, self._verifier):
                if ch is not None:
                    ch.close()
            if self._cgroup is not None:
                self._cgroup.kill_all()
            for m in (self._machine, self._vmachine):
                if m is not None:
                    procfs.kill_group(m.pid, signal.SIGKILL)
                    _reap(m)
            self._machine = self._vmachine = None
            self._agent = self._verifier = None
            self._restore_cwd = True
        self._start_machine()

    def _log_restart(self, what: str, why: str) -> None:
        _log.warning("sandbox %s (%s): %s restarted (%s)", self.sandbox_id, self.backend, what, why)
        listener = self.on_restart
        if listener is not None:
            try:
                listener(what, why)
            except Exception:  # noqa: BLE001 - an observer must not break the sandbox
                pass

    # ------------------------------------------------------------ one command

    def _run(self, command: str, timeout: float, stdin_data: str | None, verifier: bool) -> ExecResult:
        if not isinstance(command, str):
            raise TypeError(f"command must be a str, got {type(command).__name__}")
        timeout = _check_timeout(timeout)
        if stdin_data is not None and not isinstance(stdin_data, str):
            raise TypeError(f"stdin_data must be a str or None, got {type(stdin_data).__name__}")
        if self._closed:
            raise SandboxClosedError(f"sandbox for task {self.task_id!r} is closed; get a fresh one")
        lock = self._vlock if verifier else self._alock
        with lock:
            with self._lock:
                if self._closed:
                    raise SandboxClosedError(f"sandbox for task {self.task_id!r} was closed")
                self._ensure_machine()
            ch = self._verifier if verifier else self._agent
            assert ch is not None
            cwd_hint = ""
            if verifier or self._restore_cwd:
                cwd_hint = self._cwd_cache
            if not verifier:
                self._busy += 1
                self._agent_seen += 1
            try:
                return self._call(ch, command, timeout, stdin_data, cwd_hint, verifier)
            finally:
                if not verifier:
                    self._busy -= 1

    def _call(
        self, ch: _Channel, command: str, timeout: float, stdin_data: str | None, cwd_hint: str, verifier: bool
    ) -> ExecResult:
        waiting = ch.waiting_now()  # one poll: status records and late output read only when there
        if "s" in waiting and any(rec[0] == "D" for rec in ch.read_records()):  # the shell died between commands
            if not verifier:
                self.shell_restarts += 1
                self._log_restart("shell", "died while idle")
                cwd_hint = self._cwd_cache
            if ch.wait_ready(10.0):
                ch.shell_pid = self._map_pid(ch.reported_pid)
        seq = next(self._seq)
        body = command.replace("\0", "").encode("utf-8", errors="surrogateescape")
        data = (stdin_data or "").replace("\0", "").encode("utf-8", errors="surrogateescape")
        cwd = cwd_hint.encode("utf-8", errors="surrogateescape")
        header = f"\nF{ch.nonce} {seq} {len(body)} {len(data)} {len(cwd)}\n"  # tagged: a fresh shell resyncs on it
        payload = header.encode() + cwd + body + data
        ch.discard_output(readable="o" in waiting)  # late output of a background job: not this command's
        # The verifier reads its own "before": its output is the reward's input and must not
        # carry a limit the agent's jobs hit while the sandbox sat idle.
        before = self._limit_counters() if verifier else self._counters_before()
        t0 = procfs.now_ticks()
        ch.spare = procfs.children(ch.shell_pid) if ch.shell_pid is not None else None
        started = time.monotonic()
        buf = BoundedOutput(self._output_limit)
        if not verifier:
            self._live_command, self._live_since, self._live = command, started, buf
        try:
            outcome = self._pump(ch, payload, seq, buf, timeout, t0)
        finally:
            extra = self._command_extra_s
            if not verifier:
                self._live = None
                self._command_extra_s = 0.0  # an extension is for the command it was given to
        duration = time.monotonic() - started
        if not verifier and outcome.cwd is not None:
            self._cwd_cache = outcome.cwd
            self._restore_cwd = False
        out = buf.text()
        if outcome.shell_died and not verifier:
            self.shell_restarts += 1
            self._restore_cwd = True
            self._log_restart("shell", f"exit {outcome.code}")
            # a plain `exit N` / `set -e` reads like `bash -c` (output, status N): its exports and
            # cwd carry over; a killed or broken shell is worth a line to the model
            code = outcome.code or 0
            if not outcome.timed_out and (code > 128 or code in BROKEN_SHELL_CODES):
                out += self._shell_ended_note(outcome.code)
        if outcome.timed_out:
            # a limit hit before the deadline is often why the command ran out of time (bash
            # retries failed forks for seconds): say so, as a command that ended by itself does
            out += f"\n[Command timed out after {timeout + extra:g}s]" + self._limit_notes(
                before, TIMEOUT_EXIT_CODE, verifier
            )
            return ExecResult(out, TIMEOUT_EXIT_CODE, timed_out=True, duration_s=duration)
        if outcome.killed:
            return ExecResult(out + "\n[Command killed: sandbox closed]", KILLED_EXIT_CODE, duration_s=duration)
        code = outcome.code if outcome.code is not None else -1
        return ExecResult(out + self._limit_notes(before, code, verifier), code, duration_s=duration)

    def extend_command(self, seconds: float) -> float:
        """Give the running command ``seconds`` more before it times out; returns the total
        extension of that command (the pump reads it on each turn of its loop)."""
        self._command_extra_s += float(seconds)
        return self._command_extra_s

    @staticmethod
    def _shell_ended_note(code: int | None) -> str:
        """The model ended its own shell (``exit``, ``set -e``, ``exec``, ``kill $$``): the
        command's status is ``code``; say what the fresh shell kept."""
        if code in BROKEN_SHELL_CODES:
            how = "the command left it unable to run commands: fd limit lowered or its own variables made readonly"
        else:
            how = f"killed by signal {code - 128}" if code is not None and code > 128 else f"exit {code}"
        return (
            f"\n[The shell ended ({how}); a fresh shell took over: files, background processes and cwd kept; "
            "exported variables kept unless it was SIGKILLed or exec'd; functions, aliases and unexported variables reset]"
        )

    def _pump(self, ch: _Channel, payload: bytes, seq: int, buf: BoundedOutput, timeout: float, t0: int) -> _Outcome:
        """Send the frame, collect output, wait for this command's trailer; police the deadline."""
        res = _Outcome()
        pending = memoryview(payload)
        if not self._closed:  # closed meanwhile (kill_now): the loop returns at once, nothing sent
            pending = ch.write_some(pending)  # the pipe is empty between commands: no poll first
        deadline = time.monotonic() + timeout
        stage_end: float | None = None  # after a timeout/close: how long we wait before escalating
        stage = 0
        # Whether the machine may have died: checked (a waitpid) when a poll saw nothing or a
        # hang-up, not on every turn -- under load every system call is a wait for the GIL.
        # _ensure_machine has just checked the machine itself.
        check_alive = ch.proc is not self._machine
        while True:
            now = time.monotonic()
            if stage == 0 and (now >= deadline + self._command_extra_s or self._closed):
                res.timed_out, res.killed = not self._closed, self._closed
                if self._closed:
                    return res
                self._kill_command(ch, t0)
                stage, stage_end = 1, time.monotonic() + self._kill_grace + 2.0
                continue
            if stage == 1 and now >= (stage_end or now):
                self._kill_shell(ch)  # the command runs in the shell itself (a builtin loop)
                stage, stage_end = 2, time.monotonic() + 5.0
                continue
            if stage == 2 and now >= (stage_end or now):
                self._kill_machine(ch)  # nothing answers: a fresh machine next time
                return res
            if check_alive and ch.proc.poll() is not None and not ch.readable():
                if self._closed:
                    res.killed = True
                    return res
                res.code = ch.proc.returncode
                ch.dead = True
                if ch.proc is self._machine:
                    self._machine_dead_note(buf)
                return res
            # Sleep until something arrives or the next step is due, at most _IDLE_WAIT_S: a
            # quiet long command wakes its thread (and asks for the GIL) a few times a second,
            # not twenty. A close (kill_now) kills the machine, whose pipes then wake the poll.
            due = deadline + self._command_extra_s if stage == 0 else (stage_end or now)
            events = ch.poll(pending, 1 + int(1000 * max(0.0, min(_IDLE_WAIT_S, due - now))))
            check_alive = not events or "hup" in events
            if events.get("w"):
                pending = ch.write_some(pending)
            if events.get("o"):
                ch.read_output(buf)
            if events.get("s"):
                for rec in ch.read_records():
                    if rec[0] == "T" and rec[1] == seq:
                        res.code, res.cwd = rec[2], rec[3]
                        ch.read_output(buf, until_empty=True)
                        return res
                    if rec[0] == "D":
                        res.code, res.shell_died = rec[2], True
                        ch.read_output(buf, until_empty=True)
                        ch.wait_ready(10.0)
                        ch.shell_pid = self._map_pid(ch.reported_pid)
                        return res
            if ch.status_eof:
                ch.dead = True
                res.killed = self._closed
                res.code = res.code if res.code is not None else -1
                return res

    def _machine_dead_note(self, buf: BoundedOutput) -> None:
        buf.feed(b"\n[The sandbox machine stopped; a fresh one starts with the next command]")

    def _kill_command(self, ch: _Channel, t0: int) -> None:
        """SIGTERM, grace, SIGKILL every process the command started: descendants of the
        shell that started at or after the command did. Earlier background jobs live on."""
        if ch.shell_pid is None:
            return
        if ch is self._agent:
            _signal(ch.shell_pid, signal.SIGUSR1)  # skip the rest of the command (see shell.py)
        victims = procfs.descendants_since(ch.shell_pid, t0, ch.spare)
        for pid in victims:
            _signal(pid, signal.SIGTERM)
        end = time.monotonic() + self._kill_grace
        while time.monotonic() < end and any(procfs.alive(p) for p in victims):
            time.sleep(0.02)
        for pid in victims | procfs.descendants_since(ch.shell_pid, t0, ch.spare):
            _signal(pid, signal.SIGKILL)

    def _kill_shell(self, ch: _Channel) -> None:
        if ch.shell_pid is not None and ch is self._agent:
            _signal(ch.shell_pid, signal.SIGKILL)
        else:
            self._kill_machine(ch)

    def _kill_machine(self, ch: _Channel) -> None:
        procfs.kill_group(ch.proc.pid, signal.SIGKILL)
        _reap(ch.proc)
        ch.dead = True
        if ch.proc is self._machine and self._cgroup is not None:
            self._cgroup.kill_all()

    def _limit_notes(self, before: dict[str, int], code: int, verifier: bool = False) -> str:
        """Say which sandbox limit stopped the command, so the model (and operator) know."""
        lim = self._limits
        if lim is None:
            return ""
        notes = []
        after = self._limit_counters()
        self._note_reading(before, after, verifier)
        if after.get("oom_kill", 0) > before.get("oom_kill", 0):
            notes.append(f"memory limit reached ({lim.memory_mb} MB): the kernel killed a process of this sandbox")
        if after.get("pids_max", 0) > before.get("pids_max", 0):
            notes.append(f"process limit reached ({lim.pids_limit} processes): fork failed")
        if code == SIGXCPU_EXIT:
            notes.append(f"CPU time limit reached ({lim.cpu_time_s} s per process)")
        if code == SIGXFSZ_EXIT:
            notes.append(f"file size limit reached ({lim.file_size_mb} MB per file)")
        return "".join(f"\n[Sandbox {n}]" for n in notes)


@dataclass
class _Outcome:
    code: int | None = None
    cwd: str | None = None
    timed_out: bool = False
    killed: bool = False
    shell_died: bool = False


_STATUS_LINE_MAX = 8192  # a trailer is "T <nonce> <seq> <rc> <cwd>": cwd <= 4096
_STATUS_BUF_MAX = 64 * 1024
_STATUS_READ = 4096
_HANGUP = select.POLLHUP | select.POLLERR | select.POLLNVAL


class _Channel:
    """Host end of one shell: its stdin (frames), stdout (output) and status pipe.
    Everything read here is sandbox-written: bounded, parsed strictly, never followed."""

    def __init__(self, proc: subprocess.Popen[bytes], nonce: str) -> None:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        self.proc = proc
        self.wfd, self.ofd, self.sfd = proc.stdin.fileno(), proc.stdout.fileno(), proc.stderr.fileno()
        self._owned: list[int] = []
        self._borrowed = False
        self._setup(nonce)

    @classmethod
    def from_fds(cls, wfd: int, ofd: int, sfd: int, proc: subprocess.Popen[bytes], nonce: str) -> _Channel:
        ch = cls.__new__(cls)
        ch.proc = proc
        ch.wfd, ch.ofd, ch.sfd = wfd, ofd, sfd
        ch._owned = [wfd, ofd, sfd]
        ch._borrowed = True  # the machine's stdio belongs to the agent channel
        ch._setup(nonce)
        return ch

    def _setup(self, nonce: str) -> None:
        for fd in (self.wfd, self.ofd, self.sfd):
            os.set_blocking(fd, False)
        self.nonce = nonce
        self._sbuf = bytearray()
        self.status_eof = False
        self.dead = False
        self.ready = False
        self.reported_pid: int | None = None
        self.reported_ppid: int | None = None  # the shell's INIT, as the sandbox sees it
        self.spare: set[int] | None = None  # the shell's children before the command in flight
        self.shell_pid: int | None = None
        self.started = time.monotonic()
        self._poller = select.poll()
        self._poller.register(self.ofd, select.POLLIN)
        self._poller.register(self.sfd, select.POLLIN)
        self._w_registered = False

    def send_nonce(self) -> None:
        os.set_blocking(self.wfd, True)
        try:
            os.write(self.wfd, (self.nonce + "\n").encode())
        except OSError:
            self.dead = True
        finally:
            os.set_blocking(self.wfd, False)

    def wait_ready(self, timeout: float) -> bool:
        """Wait for the shell's ``R`` record (it is up, and its pid); read_records notes it."""
        end = time.monotonic() + timeout
        while not self.ready and time.monotonic() < end and not self.status_eof:
            self.read_records(block_ms=50)
            if not self.ready and self.proc.poll() is not None and not self.readable():
                return False
        return self.ready

    def poll(self, pending: memoryview, ms: int) -> dict[str, bool]:
        want_w = bool(pending)
        if want_w != self._w_registered:
            if want_w:
                self._poller.register(self.wfd, select.POLLOUT)
            else:
                self._poller.unregister(self.wfd)
            self._w_registered = want_w
        out: dict[str, bool] = {}
        for fd, ev in self._poller.poll(ms):
            out["w" if fd == self.wfd else "o" if fd == self.ofd else "s"] = True
            if ev & _HANGUP:
                out["hup"] = True
        return out

    def waiting_now(self) -> dict[str, bool]:
        """What can be read without waiting ("o" output, "s" status), in one system call."""
        return self.poll(memoryview(b""), 0)

    def write_some(self, pending: memoryview) -> memoryview:
        """Write what the pipe takes now; the rest is returned (empty when the pipe broke)."""
        if not pending:
            return pending
        try:
            return pending[os.write(self.wfd, pending[:_READ_CHUNK]) :]
        except BlockingIOError:
            return pending
        except OSError:
            return memoryview(b"")

    def readable(self) -> bool:
        # poll, not select: a console with hundreds of sandboxes has fds above FD_SETSIZE
        probe = select.poll()
        probe.register(self.ofd, select.POLLIN)
        probe.register(self.sfd, select.POLLIN)
        return any(ev & (select.POLLIN | select.POLLHUP) for _fd, ev in probe.poll(0))

    def read_output(self, buf: BoundedOutput | None, until_empty: bool = False) -> None:
        while True:
            try:
                chunk = os.read(self.ofd, _READ_CHUNK)
            except (BlockingIOError, OSError):
                return
            if not chunk:
                return
            if buf is not None:
                buf.feed(chunk)
            if not until_empty or len(chunk) < _READ_CHUNK:  # a pipe read short: it is empty now
                return

    def discard_output(self, readable: bool = True) -> None:
        """Drop what is in the output pipe (``readable=False``: a poll just found it empty)."""
        if readable:
            self.read_output(None, until_empty=True)

    def drain_text(self) -> str:
        buf = BoundedOutput(4096)
        self.read_output(buf, until_empty=True)
        return buf.text()

    def read_records(self, block_ms: int = 0) -> list[tuple[Any, ...]]:
        """Parse complete status lines. Malformed lines, foreign nonces and overlong lines
        are dropped (the buffer is bounded)."""
        if block_ms:
            probe = select.poll()
            probe.register(self.sfd, select.POLLIN)
            probe.poll(block_ms)
        while True:
            try:
                chunk = os.read(self.sfd, _STATUS_READ)
            except (BlockingIOError, OSError):
                break
            if not chunk:
                self.status_eof = True
                break
            self._sbuf += chunk
            if len(self._sbuf) > _STATUS_BUF_MAX:
                del self._sbuf[: len(self._sbuf) - _STATUS_BUF_MAX]
            if len(chunk) < _STATUS_READ:  # a pipe read short: it is empty now
                break
        records = []
        while True:
            nl = self._sbuf.find(b"\n")
            if nl < 0:
                if len(self._sbuf) > _STATUS_LINE_MAX:
                    self._sbuf.clear()
                break
            line = bytes(self._sbuf[:nl]).decode("utf-8", errors="replace")
            del self._sbuf[: nl + 1]
            rec = self._parse(line)
            if rec is not None:
                if rec[0] == "R":  # a (new) shell is up: remember it whoever is reading
                    self.reported_pid, self.reported_ppid = rec[1], rec[2]
                    self.started, self.ready = time.monotonic(), True
                elif rec[0] == "D":
                    self.ready = False
                records.append(rec)
        return records

    def _parse(self, line: str) -> tuple[Any, ...] | None:
        if len(line) > _STATUS_LINE_MAX:
            return None
        parts = line.split(" ", 4)
        if len(parts) < 3 or parts[1] != self.nonce:
            return None
        kind = parts[0]
        try:
            if kind == "R":
                ppid = int(parts[3]) if len(parts) > 3 and parts[3].isdigit() else None
                return ("R", int(parts[2]), ppid)
            if kind == "D":
                nth = int(parts[3]) if len(parts) > 3 and parts[3].isdigit() else None  # which shell
                return ("D", nth, _rc(int(parts[2])), None)
            if kind == "T" and len(parts) >= 4:
                cwd = parts[4] if len(parts) == 5 else ""
                ok = cwd.startswith("/") and "\0" not in cwd and len(cwd.encode()) <= CWD_LIMIT
                return ("T", int(parts[2]), _rc(int(parts[3])), cwd if ok else None)
        except ValueError:
            return None
        return None

    def close(self) -> None:
        for fd in self._owned:
            try:
                os.close(fd)
            except OSError:
                pass
        self._owned = []
        if not self._borrowed:
            for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    try:
                        stream.close()
                    except (OSError, ValueError):
                        pass


BashSessionSandbox._channel_cls = _Channel

_nofile_raised = False


def _raise_nofile() -> None:
    """Each live sandbox holds 6 pipe fds for its life: lift the soft fd limit to the hard
    one (capped) once, so hundreds of concurrent sandboxes fit under a 1024 default."""
    global _nofile_raised
    if _nofile_raised:
        return
    _nofile_raised = True
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = 65536 if hard == resource.RLIM_INFINITY else min(hard, 65536)
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (ValueError, OSError):
        pass


def _rc(code: int) -> int:
    return 128 - code if code < 0 else code


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _stats_outside_sandbox_groups() -> dict[int, procfs.ProcStat] | None:
    pids = cgroups.pids_outside_sandbox_groups()
    return None if pids is None else procfs.read_stats(pids)


# The processes in no sandbox's group, as one reading every cleanup under way shares
# (hundreds of rollouts end together; each cleanup would read the same host processes).
_OUTSIDE_GROUPS = procfs.SharedReading(_stats_outside_sandbox_groups)


def _reap(proc: subprocess.Popen[bytes]) -> None:
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _under_hard(which: int, value: int) -> int:
    """``value`` capped at this process's hard limit (children inherit it; asking more fails)."""
    _soft, hard = resource.getrlimit(which)
    return value if hard == resource.RLIM_INFINITY else min(value, hard)


def _rmtree(path: Path) -> None:
    def _make_writable(func: Callable[..., object], p: str, _exc: object) -> None:
        # a read-only dir inside the workspace must not stop us
        # chmod follows symlinks: never chmod a link the sandbox planted (it may point at /etc/shadow)
        try:
            for target in (os.path.dirname(p), p):
                if not os.path.islink(target):
                    os.chmod(target, 0o700)
            func(p)
        except OSError:
            pass

    if path.exists():
        shutil.rmtree(path, onerror=_make_writable)
