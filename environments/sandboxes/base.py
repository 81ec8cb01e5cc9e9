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
import os
import re
import resource
import select
import shlex
import shutil
import signal
import subprocess
import threading
import time
import uuid
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Dict, List, Optional, Protocol, Set, runtime_checkable

from environments.sandboxes import procfs
from environments.sandboxes.capture import BoundedOutput
from environments.sandboxes.cgroups import SandboxCgroup
from environments.sandboxes.hostio import read_beneath, write_new
from environments.sandboxes.paths import resolve_to_host
from environments.sandboxes.settings import SandboxSettings
from environments.sandboxes.stale import discard_owner, write_owner
from environments.sandboxes.records import (
    ExecResult,
    PathEscapeError,
    ProcessInfo,
    SandboxClosedError,
    SandboxUnavailable,
)

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
DRAIN_AFTER_EXIT_S = 0.3  # a backgrounded grandchild may hold the pipe open forever
_READ_CHUNK = 1 << 16
CWD_LIMIT = 4096  # bytes of the sandbox-written cwd file we are willing to read
SIGXCPU_EXIT, SIGXFSZ_EXIT = 128 + signal.SIGXCPU, 128 + signal.SIGXFSZ


@runtime_checkable
class Sandbox(Protocol):
    task_id: str
    backend: str  # "local" | "bwrap" | "docker"
    workspace: str  # the workspace as commands inside see it (initial cwd, $HOME)
    host_workspace: Optional[Path]  # host dir backing the workspace; None for docker

    def execute(self, command: str, timeout: float, *, stdin_data: Optional[str] = None) -> ExecResult: ...

    def cwd(self) -> str: ...

    def to_host_path(self, path: str) -> Path: ...

    def process_tree(self) -> List[ProcessInfo]: ...

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

    def __init__(
        self,
        task_id: str,
        *,
        workspace: str,
        host_workspace: Optional[Path],
        state_host_dir: Path,
        state_view_dir: str,
        kill_grace: float = 0.5,
        output_limit: int = 1_000_000,
        limits: Optional[SandboxSettings] = None,
    ) -> None:
        self.task_id = task_id
        self.workspace = workspace
        self.host_workspace = host_workspace
        self.sandbox_id = f"{_slug(task_id)}-{uuid.uuid4().hex[:12]}"
        self._marker = f"{MARKER_VAR}={self.sandbox_id}".encode()
        self._state_host = state_host_dir
        self._state_view = state_view_dir.rstrip("/")
        self._kill_grace = kill_grace
        self._output_limit = output_limit
        self._lock = threading.Lock()
        self._seq = itertools.count(1)
        self._current_seq = threading.local()  # which call this thread runs (docker's kill needs it)
        self._running: Dict[int, subprocess.Popen] = {}
        self._groups: Set[int] = set()  # session/group ids of commands we started
        self._closed = False
        self._cwd_cache = workspace
        self._limits = limits
        self._cgroup: Optional[SandboxCgroup] = None
        self._owner_record: Optional[Path] = None
        self._prefix: Optional[List[str]] = None
        write_new(self._state_host / "cwd", (workspace + "\n").encode(), 0o644)  # fresh dir: nothing planted yet
        if limits is not None and self._wants_cgroup():
            self._cgroup = SandboxCgroup.create(
                self.sandbox_id, pids_max=limits.pids_limit, memory_bytes=limits.memory_mb * 1024 * 1024,
                cpus=limits.cpu,
            )
        try:
            self._owner_record = write_owner(
                self._state_host.parent, self.sandbox_id, self._dirs_to_remove(),
                self._cgroup.paths() if self._cgroup else [],
            )
        except OSError:
            self._owner_record = None  # the sweep is best effort; the sandbox still works

    # ------------------------------------------------------------ backend hooks

    @abstractmethod
    def _argv(self, script: str) -> List[str]:
        """The argv that runs ``bash -c script`` inside this backend."""

    @abstractmethod
    def _env(self) -> Dict[str, str]:
        """Environment for the spawned host process (must carry the marker)."""

    def _popen_cwd(self) -> Optional[str]:
        return None

    def _spawn_error(self, exc: OSError) -> Exception:
        return SandboxUnavailable(f"{self.backend} backend: cannot start bash ({exc})")

    def _teardown(self) -> None:
        """Backend resources beyond processes and dirs (docker: the container)."""

    def _wants_cgroup(self) -> bool:
        """Host-process backends (local, bwrap) get a cgroup; docker has its own."""
        return True

    def _limit_prefix(self) -> List[str]:
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

    def limits_summary(self) -> Dict[str, str]:
        """What bounds this sandbox, for the drill-down."""
        lim = self._limits
        if lim is None:
            return {}
        how = "cgroup" if self._cgroup is not None else "rlimit"
        mem_how = "cgroup" if self._cgroup is not None and self._cgroup.has_memory else "rlimit (address space)"
        pids_how = "cgroup" if self._cgroup is not None and self._cgroup.has_pids else "none (rlimits do not bind root)"
        cpu_how = f"{lim.cpu:g} CPUs (cgroup)" if self._cgroup is not None and self._cgroup.has_cpu else "no CPU share limit"
        return {
            "pids": f"{lim.pids_limit} ({pids_how})",
            "cpu": cpu_how,
            "memory": f"{lim.memory_mb} MB ({mem_how})",
            "cpu_time": f"{lim.cpu_time_s} s per process (rlimit)",
            "file_size": f"{lim.file_size_mb} MB per file (rlimit)",
            "enforced_by": how,
        }

    def _dirs_to_remove(self) -> List[Path]:
        dirs = [self._state_host]
        if self.host_workspace is not None:
            dirs.append(self.host_workspace)
        return dirs

    # ------------------------------------------------------------ public API

    @property
    def closed(self) -> bool:
        return self._closed

    def execute(self, command: str, timeout: float, *, stdin_data: Optional[str] = None) -> ExecResult:
        return self._run(command, timeout, stdin_data, persist=True)

    def run_diagnostic(self, command: str, timeout: float = 10.0) -> ExecResult:
        """Run in the agent's cwd/env without saving any state change back."""
        return self._run(command, timeout, None, persist=False)

    def cwd(self) -> str:
        # Sandbox-written: may be a symlink to /dev/zero, a FIFO or huge. Bounded, no follow.
        try:
            text = read_beneath(self._state_host, "cwd", CWD_LIMIT).decode("utf-8", errors="replace").strip()
            if text.startswith("/") and "\n" not in text and "\0" not in text:
                self._cwd_cache = text
        except OSError:
            pass
        return self._cwd_cache

    def to_host_path(self, path: str) -> Path:
        if self.host_workspace is None:
            raise NotImplementedError(
                f"{self.backend} backend has no host view of the workspace; use execute() for file access"
            )
        return resolve_to_host(
            path, cwd=self.cwd(), home=self.workspace, view_root=self.workspace, host_root=self.host_workspace
        )

    def process_tree(self) -> List[ProcessInfo]:
        self._prune_groups()
        with self._lock:
            groups, roots = set(self._groups), set(self._running)
        if self._cgroup is not None:
            roots |= self._cgroup.pids()
        return procfs.describe(procfs.sandbox_processes(self._marker, groups, roots).values())

    def has_background_processes(self) -> bool:
        """Processes left running by earlier commands (the reaper counts them as activity)."""
        with self._lock:
            if self._running:
                return True
        return bool(self.process_tree())

    def running_pids(self) -> List[int]:
        with self._lock:
            return list(self._running)

    def cleanup(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            running = list(self._running.values())
        for proc in running:
            procfs.kill_group(proc.pid, signal.SIGKILL)
        if self._cgroup is not None:
            self._cgroup.kill_all()  # every member, however it forked or setsid'd
        self._prune_groups()
        with self._lock:
            groups, roots = set(self._groups), set(self._running)
        procfs.kill_all(self._marker, groups, roots)
        try:
            self._teardown()
        finally:
            if self._cgroup is not None:
                self._cgroup.remove()
            for path in self._dirs_to_remove():
                _rmtree(path)
            if self._owner_record is not None:
                discard_owner(self._owner_record)

    # ------------------------------------------------------------ internals

    def _script_prelude(self, seq: int) -> List[str]:
        """Backend-specific first lines of the wrapper (docker records its pid)."""
        return []

    def _script(self, persist: bool, seq: int = 0) -> str:
        """Fixed wrapper text: the command itself arrives on stdin (see the module doc)."""
        q = shlex.quote
        env_file, cwd_file = q(f"{self._state_view}/env.sh"), q(f"{self._state_view}/cwd")
        lines = self._script_prelude(seq) + [
            # Builtins only, byte counts (LC_ALL=C): what follows the command stays on stdin.
            "IFS= read -r __hermes_n || exit 125",
            '__hermes_c=; [ "$__hermes_n" -gt 0 ] 2>/dev/null && LC_ALL=C IFS= read -r -d "" -N "$__hermes_n" __hermes_c',
            # Restore the exported vars of the last command (drop ours first, so `unset` persists).
            # Plain files only: a planted FIFO or /dev/zero link must not wedge the session.
            f"if [ -f {env_file} ] && [ ! -L {env_file} ]; then",
            f"  for __hermes_v in $(compgen -e); do [ \"$__hermes_v\" = {MARKER_VAR} ] || unset \"$__hermes_v\" 2>/dev/null; done",
            f"  . {env_file} >/dev/null 2>&1",
            "fi",
            f"{{ [ -f {cwd_file} ] && [ ! -L {cwd_file} ] && IFS= read -r -n 4096 __hermes_cwd < {cwd_file}; }} 2>/dev/null",
            f'cd -- "$__hermes_cwd" 2>/dev/null || cd -- {q(self.workspace)} 2>/dev/null',
            "unset __hermes_cwd __hermes_v",
        ]
        if persist:
            # Builtins only: the command may have broken PATH.
            plain = lambda f: f"[ ! -L {f} ] && {{ [ ! -e {f} ] || [ -f {f} ]; }}"  # noqa: E731
            lines += [
                f"__hermes_save() {{ __hermes_rc=$?; {plain(env_file)} && export -p > {env_file} 2>/dev/null; "
                f"{plain(cwd_file)} && pwd -P > {cwd_file} 2>/dev/null; exit $__hermes_rc; }}",
                "trap __hermes_save EXIT",
            ]
        lines.append('eval "unset __hermes_n __hermes_c\n$__hermes_c"')
        return "\n".join(lines) + "\n"

    @staticmethod
    def _frame(command: str, stdin_data: Optional[str]) -> bytes:
        # bash cannot hold NUL bytes in a string (a command file lost them too)
        body = command.replace("\0", "").encode("utf-8", errors="surrogateescape")
        return f"{len(body)}\n".encode() + body + (stdin_data or "").encode("utf-8", errors="surrogateescape")

    def _run(self, command: str, timeout: float, stdin_data: Optional[str], persist: bool) -> ExecResult:
        if not isinstance(command, str):
            raise TypeError(f"command must be a str, got {type(command).__name__}")
        timeout = _check_timeout(timeout)
        if stdin_data is not None and not isinstance(stdin_data, str):
            raise TypeError(f"stdin_data must be a str or None, got {type(stdin_data).__name__}")
        if self._closed:
            raise SandboxClosedError(f"sandbox for task {self.task_id!r} is closed; get a fresh one")

        seq = next(self._seq)
        argv = self._limit_prefix() + self._argv(self._script(persist, seq))
        payload = self._frame(command, stdin_data)
        before = self._cgroup.counters() if self._cgroup is not None else {}
        started = time.monotonic()
        self._current_seq.seq = seq
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own session + group: the timeout kill hits everything
                env=self._env(),
                cwd=self._popen_cwd(),
            )
        except OSError as exc:
            if self._closed:
                raise SandboxClosedError(f"sandbox for task {self.task_id!r} was closed") from None
            raise self._spawn_error(exc) from exc
        with self._lock:
            self._running[proc.pid] = proc
            self._groups.add(proc.pid)
            closed = self._closed
        try:
            if closed:  # cleanup raced us between the check and the spawn: killed
                self._terminate(proc)
                out, timed_out, killed = "", False, True
            else:
                out, timed_out, killed = self._pump(proc, timeout, payload)
        finally:
            with self._lock:
                self._running.pop(proc.pid, None)
            for stream in (proc.stdout, proc.stdin):
                if stream is not None:
                    try:
                        stream.close()
                    except OSError:
                        pass
            self._prune_groups()
        duration = time.monotonic() - started
        if timed_out:
            return ExecResult(
                out + f"\n[Command timed out after {timeout:g}s]", TIMEOUT_EXIT_CODE, timed_out=True, duration_s=duration
            )
        if killed:
            return ExecResult(out + "\n[Command killed: sandbox closed]", KILLED_EXIT_CODE, duration_s=duration)
        code = proc.returncode if proc.returncode is not None else -1
        if code < 0:  # died from a signal: report it the way a shell would
            code = 128 - code
        return ExecResult(out + self._limit_notes(before, code), code, duration_s=duration)

    def _limit_notes(self, before: Dict[str, int], code: int) -> str:
        """Say which sandbox limit stopped the command, so the model (and operator) know."""
        lim = self._limits
        if lim is None:
            return ""
        notes = []
        after = self._cgroup.counters() if self._cgroup is not None else {}
        if after.get("oom_kill", 0) > before.get("oom_kill", 0):
            notes.append(f"memory limit reached ({lim.memory_mb} MB): the kernel killed a process of this sandbox")
        if after.get("pids_max", 0) > before.get("pids_max", 0):
            notes.append(f"process limit reached ({lim.pids_limit} processes): fork failed")
        if code == SIGXCPU_EXIT:
            notes.append(f"CPU time limit reached ({lim.cpu_time_s} s per process)")
        if code == SIGXFSZ_EXIT:
            notes.append(f"file size limit reached ({lim.file_size_mb} MB per file)")
        return "".join(f"\n[Sandbox {n}]" for n in notes)

    def _pump(self, proc: subprocess.Popen, timeout: float, payload: bytes) -> tuple[str, bool, bool]:
        """Feed stdin, drain output (bounded) and police the deadline, single-threaded."""
        buf = BoundedOutput(self._output_limit)
        assert proc.stdout is not None
        rfd: Optional[int] = proc.stdout.fileno()
        os.set_blocking(rfd, False)
        wfd: Optional[int] = None
        pending = memoryview(payload)
        if proc.stdin is not None:
            wfd = proc.stdin.fileno()
            os.set_blocking(wfd, False)
        poller = select.poll()
        poller.register(rfd, select.POLLIN)
        if wfd is not None:
            poller.register(wfd, select.POLLOUT)
            if not pending:
                poller.unregister(wfd)
                proc.stdin.close()  # type: ignore[union-attr]
                wfd = None
        deadline = time.monotonic() + timeout
        exited_at: Optional[float] = None
        timed_out = killed = False
        while True:
            now = time.monotonic()
            if exited_at is None and proc.poll() is not None:
                exited_at = now
                # cleanup() marks closed before it kills, so this exit was the operator's.
                killed = killed or (self._closed and not timed_out)
            if exited_at is not None and (rfd is None or now - exited_at > DRAIN_AFTER_EXIT_S):
                break
            if exited_at is None and not (timed_out or killed):
                if now >= deadline:
                    timed_out = True
                    self._terminate(proc)
                    continue
                if self._closed:
                    killed = True
                    self._terminate(proc)
                    continue
            if rfd is None and wfd is None:
                try:
                    proc.wait(timeout=0.05)
                except subprocess.TimeoutExpired:
                    pass
                continue
            for fd, _event in poller.poll(50):
                if fd == rfd:
                    try:
                        chunk = os.read(rfd, _READ_CHUNK)
                    except BlockingIOError:
                        continue
                    if chunk:
                        buf.feed(chunk)
                    else:
                        poller.unregister(rfd)
                        rfd = None
                elif fd == wfd:
                    try:
                        n = os.write(wfd, pending[:_READ_CHUNK])
                        pending = pending[n:]
                    except BlockingIOError:
                        continue
                    except (BrokenPipeError, OSError):
                        pending = memoryview(b"")
                    if not pending:
                        poller.unregister(wfd)
                        proc.stdin.close()  # type: ignore[union-attr]
                        wfd = None
        return buf.text(), timed_out, killed

    def _terminate(self, proc: subprocess.Popen) -> None:
        """SIGTERM the command's group, wait a short grace, then SIGKILL the group and
        every descendant we saw (including ones that left the group with setsid)."""
        pgid = proc.pid
        tree = procfs.sandbox_processes(None, groups=(pgid,), roots=(pgid,))
        procfs.kill_group(pgid, signal.SIGTERM)
        end = time.monotonic() + self._kill_grace
        while time.monotonic() < end:
            proc.poll()
            if not procfs.group_alive(pgid):
                break
            time.sleep(0.02)
        procfs.kill_group(pgid, signal.SIGKILL)
        for pid in tree:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def _prune_groups(self) -> None:
        """Forget groups with no live member, so a recycled pid is never mistaken for ours."""
        with self._lock:
            candidates = [g for g in self._groups if g not in self._running]
        dead = [g for g in candidates if not procfs.group_alive(g)]
        if dead:
            with self._lock:
                self._groups.difference_update(dead)


def _under_hard(which: int, value: int) -> int:
    """``value`` capped at this process's hard limit (children inherit it; asking more fails)."""
    _soft, hard = resource.getrlimit(which)
    return value if hard == resource.RLIM_INFINITY else min(value, hard)


def _rmtree(path: Path) -> None:
    def _make_writable(func, p, _exc):  # a read-only dir inside the workspace must not stop us
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
