"""The Sandbox protocol and the spawn-per-call bash session every backend shares.

Each ``execute`` starts a fresh ``bash`` (directly, inside bwrap, or via docker exec).
The session feel (``cd`` and ``export`` persist) comes from two files in a per-sandbox
state dir: ``env.sh`` (``export -p``) and ``cwd`` (``pwd -P``), written by an EXIT
trap after each command and restored before the next. Nothing is printed to the
command's output, so there are no markers to strip.
"""

from __future__ import annotations

import itertools
import os
import re
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
from environments.sandboxes.paths import resolve_to_host
from environments.sandboxes.stale import write_owner
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
        (self._state_host / "cwd").write_text(workspace + "\n")
        write_owner(self._state_host, self._marker, self._dirs_to_remove())

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
        try:
            text = (self._state_host / "cwd").read_text().strip()
            if text:
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
        self._prune_groups()
        with self._lock:
            groups, roots = set(self._groups), set(self._running)
        procfs.kill_all(self._marker, groups, roots)
        try:
            self._teardown()
        finally:
            for path in self._dirs_to_remove():
                _rmtree(path)

    # ------------------------------------------------------------ internals

    def _script_prelude(self, seq: int) -> List[str]:
        """Backend-specific first lines of the wrapper (docker records its pid)."""
        return []

    def _script(self, cmd_file: str, persist: bool, seq: int = 0) -> str:
        q = shlex.quote
        env_file, cwd_file = q(f"{self._state_view}/env.sh"), q(f"{self._state_view}/cwd")
        lines = self._script_prelude(seq) + [
            # Restore the exported vars of the last command (drop ours first, so `unset` persists).
            f"if [ -r {env_file} ]; then",
            f"  for __hermes_v in $(compgen -e); do [ \"$__hermes_v\" = {MARKER_VAR} ] || unset \"$__hermes_v\" 2>/dev/null; done",
            f"  . {env_file} >/dev/null 2>&1",
            "fi",
            f"{{ __hermes_cwd=$(< {cwd_file}); }} 2>/dev/null",
            f'cd -- "$__hermes_cwd" 2>/dev/null || cd -- {q(self.workspace)} 2>/dev/null',
            "unset __hermes_cwd __hermes_v",
        ]
        if persist:
            # Builtins only: the command may have broken PATH.
            lines += [
                f"__hermes_save() {{ __hermes_rc=$?; export -p > {env_file} 2>/dev/null; "
                f"pwd -P > {cwd_file} 2>/dev/null; exit $__hermes_rc; }}",
                "trap __hermes_save EXIT",
            ]
        lines.append(f'eval "$(< {q(cmd_file)})"')
        return "\n".join(lines) + "\n"

    def _run(self, command: str, timeout: float, stdin_data: Optional[str], persist: bool) -> ExecResult:
        if not isinstance(command, str):
            raise TypeError(f"command must be a str, got {type(command).__name__}")
        timeout = _check_timeout(timeout)
        if stdin_data is not None and not isinstance(stdin_data, str):
            raise TypeError(f"stdin_data must be a str or None, got {type(stdin_data).__name__}")
        if self._closed:
            raise SandboxClosedError(f"sandbox for task {self.task_id!r} is closed; get a fresh one")

        seq = next(self._seq)
        cmd_host = self._state_host / f"cmd-{seq}.sh"
        try:
            cmd_host.write_text(command)
        except OSError as exc:
            if self._closed:  # cleanup removed the state dir under us
                raise SandboxClosedError(f"sandbox for task {self.task_id!r} was closed") from None
            raise SandboxUnavailable(f"{self.backend} backend: cannot write to the state dir {self._state_host} ({exc})") from exc
        argv = self._argv(self._script(f"{self._state_view}/cmd-{seq}.sh", persist, seq))
        started = time.monotonic()
        self._current_seq.seq = seq
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own session + group: the timeout kill hits everything
                env=self._env(),
                cwd=self._popen_cwd(),
            )
        except OSError as exc:
            cmd_host.unlink(missing_ok=True)
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
                out, timed_out, killed = self._pump(proc, timeout, stdin_data)
        finally:
            with self._lock:
                self._running.pop(proc.pid, None)
            for stream in (proc.stdout, proc.stdin):
                if stream is not None:
                    try:
                        stream.close()
                    except OSError:
                        pass
            cmd_host.unlink(missing_ok=True)
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
        return ExecResult(out, code, duration_s=duration)

    def _pump(self, proc: subprocess.Popen, timeout: float, stdin_data: Optional[str]) -> tuple[str, bool, bool]:
        """Feed stdin, drain output (bounded) and police the deadline, single-threaded."""
        buf = BoundedOutput(self._output_limit)
        assert proc.stdout is not None
        rfd: Optional[int] = proc.stdout.fileno()
        os.set_blocking(rfd, False)
        wfd: Optional[int] = None
        pending = memoryview((stdin_data or "").encode())
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


def _rmtree(path: Path) -> None:
    def _make_writable(func, p, _exc):  # a read-only dir inside the workspace must not stop us
        try:
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
            func(p)
        except OSError:
            pass

    if path.exists():
        shutil.rmtree(path, onerror=_make_writable)
