"""The session registry: exactly one sandbox per task_id, lifetimes, the idle reaper.

Fixes upstream gaps: strict per-task_id isolation (no collapse to "default"), activity
stamped at command start AND end, a sandbox with a running command is never reaped,
and every cleanup runs outside the registry lock.
"""

from __future__ import annotations

import atexit
import itertools
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from environments import events
from environments.redact import safe_head
from environments.sandboxes.base import (
    KILLED_EXIT_CODE,
    BashSessionSandbox,
    ExecResult,
    ProcessInfo,
    SandboxClosedError,
)
from environments.sandboxes.factory import create_sandbox
from environments.sandboxes.settings import SandboxSettings, configure, current_settings
from environments.sandboxes.stale import sweep_stale

__all__ = [
    "CommandRecord",
    "SandboxInfo",
    "ManagedSandbox",
    "get_sandbox",
    "cleanup_vm",
    "cleanup_all_environments",
    "list_sandboxes",
    "find_sandbox",
    "get_sandbox_info",
    "kill_sandbox",
    "extend_lifetime",
    "run_diagnostic",
    "reap_idle",
    "shutdown",
    "add_close_listener",
    "remove_close_listener",
    "configure",
    "current_settings",
]

DEFAULT_KEY = "default"
_RECORD_HEAD = 300
_EVENT_HEAD = 200


def _head(text: object, limit: int) -> str:
    """Redacted head of ``text``. Cut first: redact() is slow on long word-like runs,
    and only the first ``limit`` chars are kept anyway (the margin keeps a secret that
    straddles the cut matchable)."""
    if isinstance(text, str):
        text = text[: limit + 64]
    return safe_head(text, limit)


@dataclass
class CommandRecord:
    command: str  # redacted, truncated
    started_at: float
    duration_s: float
    exit_code: int
    output_head: str  # redacted, truncated
    timed_out: bool = False


@dataclass
class SandboxInfo:
    task_id: str
    backend: str
    workspace: str
    state: str  # "idle" | "running" | "closed"
    created_at: float
    last_activity: float
    lifetime_s: float
    running_command: str | None
    running_since: float | None
    running_timeout_s: float | None
    recent_commands: list[CommandRecord] = field(default_factory=list)  # newest last

    def idle_s(self, now: float | None = None) -> float:
        """Seconds since the last agent activity (0 while a command runs)."""
        if self.state == "running":
            return 0.0
        return max(0.0, (time.time() if now is None else now) - self.last_activity)


@dataclass
class _Running:
    command: str
    since: float
    timeout: float


class _Entry:
    def __init__(self, key: str, sandbox: BashSessionSandbox, settings: SandboxSettings) -> None:
        now = time.time()
        self.key = key
        self.sandbox = sandbox
        self.created_at = now
        self.last_activity = now
        self.lifetime_s = settings.lifetime
        self.running: dict[int, _Running] = {}
        self.recent: deque[CommandRecord] = deque(maxlen=settings.recent_commands)
        self.closed = False
        self.close_reason: str | None = None
        # The entry's one handle while it is in the registry. The handle refers to the entry,
        # so the entry lets go of it when it leaves (``_detach``): no reference cycle, and a
        # closed sandbox's objects are freed as soon as the last caller drops its handle
        # instead of waiting for a full garbage collection (BENCHMARKS.md, P2).
        self.handle: ManagedSandbox | None = ManagedSandbox(self)

    def current_handle(self) -> ManagedSandbox:  # the entry is not detached (in _entries, or not yet published)
        assert self.handle is not None, "a sandbox that left the registry has no handle"
        return self.handle

    def info(self) -> SandboxInfo:  # caller holds _lock
        first = min(self.running.values(), key=lambda r: r.since) if self.running else None
        state = "closed" if self.closed else ("running" if self.running else "idle")
        return SandboxInfo(
            task_id=self.key,
            backend=self.sandbox.backend,
            workspace=self.sandbox.workspace,
            state=state,
            created_at=self.created_at,
            last_activity=self.last_activity,
            lifetime_s=self.lifetime_s,
            running_command=first.command if first else None,
            running_since=first.since if first else None,
            running_timeout_s=first.timeout if first else None,
            recent_commands=list(self.recent),
        )


def _restart_reporter(key: str) -> Callable[[str, str], None]:
    """The sandbox's ``on_restart`` hook: an event naming what restarted and why."""

    def report(what: str, why: str) -> None:
        if events.active:
            events.emit(events.SandboxShellRestarted(task_id=key, what=what, reason=why))

    return report


class ManagedSandbox:
    """What ``get_sandbox`` hands out: the backend sandbox plus registry bookkeeping
    (activity, running command, history, events). Implements the Sandbox protocol."""

    def __init__(self, entry: _Entry) -> None:
        self._entry = entry
        self._inner = entry.sandbox

    task_id = property(lambda self: self._entry.key)
    backend = property(lambda self: self._inner.backend)
    workspace = property(lambda self: self._inner.workspace)
    host_workspace = property(lambda self: self._inner.host_workspace)

    @property
    def closed(self) -> bool:
        return self._entry.closed

    def execute(
        self, command: str, timeout: float, *, stdin_data: str | None = None, isolated: bool = False
    ) -> ExecResult:
        call_id = _command_started(self._entry, command, timeout)
        started = time.time()
        try:
            if isolated:  # the verifier runner (reward code): none of the agent shell's state
                result = self._inner.execute(command, timeout, stdin_data=stdin_data, isolated=True)
            else:
                result = self._inner.execute(command, timeout, stdin_data=stdin_data)
        except SandboxClosedError:
            # Accepted above, then closed (kill/reap) before bash started: same as killed.
            result = ExecResult("[Command killed: sandbox closed]", KILLED_EXIT_CODE)
        except BaseException as exc:
            _command_finished(self._entry, call_id, command, started, ExecResult(f"error: {exc}", -1))
            raise
        _command_finished(self._entry, call_id, command, started, result)
        return result

    def run_diagnostic(self, command: str, timeout: float = 10.0) -> ExecResult:
        return self._inner.run_diagnostic(command, timeout)

    def before_verification(self) -> None:
        self._inner.before_verification()

    def cwd(self) -> str:
        return self._inner.cwd()

    def to_host_path(self, path: str) -> Path:
        return self._inner.to_host_path(path)

    def process_tree(self) -> list[ProcessInfo]:
        return self._inner.process_tree()

    def shell_state(self) -> dict[str, object]:
        """The persistent shell: pid, uptime, restarts, busy (see BashSessionSandbox)."""
        state = getattr(self._inner, "shell_state", None)
        return state() if callable(state) else {}

    def live_output(self) -> dict[str, object] | None:
        """The running agent command's output so far (bounded tail), or None when idle."""
        live = getattr(self._inner, "live_output", None)
        return live() if callable(live) else None

    def limits_summary(self) -> dict[str, str]:
        """The resource limits this sandbox runs under (pids, memory, CPU time, file size)."""
        summary = getattr(self._inner, "limits_summary", None)
        return summary() if callable(summary) else {}

    def info(self) -> SandboxInfo:
        with _lock:
            return self._entry.info()

    def cleanup(self) -> None:
        _close(self._entry, "cleanup")

    def __repr__(self) -> str:
        return f"<ManagedSandbox {self.task_id!r} {self.backend} {self.workspace}>"


# --------------------------------------------------------------------------- state

_lock = threading.Lock()
_entries: dict[str, _Entry] = {}
_creating: dict[str, list[Any]] = {}  # key -> [Lock, waiters]; dropped when nobody waits
_calls = itertools.count(1)
_close_listeners: list[Callable[[str, str], None]] = []
_reaper: threading.Thread | None = None
_reaper_stop: threading.Event | None = None
_atexit_registered = False


def _key(task_id: str | None) -> str:
    if task_id is None:
        return DEFAULT_KEY
    if not isinstance(task_id, str):
        raise TypeError(f"task_id must be a str or None, got {type(task_id).__name__}")
    if not task_id.strip():
        raise ValueError("task_id is empty; expected a non-empty string (or None for the shared 'default')")
    return task_id


def _lookup(task_id: str | None) -> _Entry:
    key = _key(task_id)
    with _lock:
        entry = _entries.get(key)
        live = sorted(_entries)
    if entry is None:
        shown = ", ".join(live[:10]) + (" ..." if len(live) > 10 else "")
        raise KeyError(f"no live sandbox for task_id {key!r} (live: {shown or 'none'})")
    return entry


# --------------------------------------------------------------------------- get / close


def get_sandbox(task_id: str | None = None) -> ManagedSandbox:
    """Get or create the sandbox of ``task_id`` (None -> "default"). Exactly one per key,
    even when many threads ask at once; a slow backend start blocks only that key."""
    key = _key(task_id)
    _ensure_background()
    with _lock:
        entry = _entries.get(key)
        if entry is not None:
            entry.last_activity = time.time()
            return entry.current_handle()
        slot = _creating.setdefault(key, [threading.Lock(), 0])
        slot[1] += 1
    try:
        with slot[0]:
            with _lock:
                entry = _entries.get(key)
                if entry is not None:
                    entry.last_activity = time.time()
                    return entry.current_handle()
            settings = current_settings()
            sandbox = create_sandbox(key, settings)
            entry = _Entry(key, sandbox, settings)
            handle = entry.current_handle()  # before it is published: a close may detach it at once
            if hasattr(sandbox, "on_restart"):  # the persistent shell died and was replaced: say so
                sandbox.on_restart = _restart_reporter(key)
            with _lock:
                _entries[key] = entry
            if events.active:
                events.emit(
                    events.SandboxCreated(
                        task_id=key, backend=sandbox.backend, workdir=sandbox.workspace, lifetime_s=entry.lifetime_s
                    )
                )
            return handle
    finally:
        with _lock:
            slot[1] -= 1
            if slot[1] == 0 and _creating.get(key) is slot:
                del _creating[key]


def _detach(entry: _Entry, reason: str) -> bool:
    """Mark closed and drop from the map. Caller holds _lock."""
    if entry.closed:
        return False
    entry.closed = True
    entry.close_reason = reason
    entry.handle = None  # the handle -> entry reference is the only one left (see _Entry)
    if _entries.get(entry.key) is entry:
        del _entries[entry.key]
    return True


def _finish_close(entry: _Entry, reason: str) -> None:
    """Slow part of closing (kill processes, remove dirs): never under _lock."""
    error: str | None = None
    try:
        entry.sandbox.cleanup()
    except Exception as exc:  # noqa: BLE001 - a failed cleanup is reported, not raised
        error = f"{type(exc).__name__}: {exc}"
    if events.active:
        events.emit(events.SandboxClosed(task_id=entry.key, reason=reason, error=error))
    for listener in tuple(_close_listeners):
        try:
            listener(entry.key, reason)
        except Exception:  # noqa: BLE001 - listeners are best effort
            pass


def _close(entry: _Entry, reason: str) -> bool:
    with _lock:
        detached = _detach(entry, reason)
    if detached:
        _finish_close(entry, reason)
    return detached


def cleanup_vm(task_id: str | None) -> None:
    """Close the sandbox of ``task_id`` if there is one. Idempotent."""
    key = _key(task_id)
    with _lock:
        entry = _entries.get(key)
    if entry is not None:
        _close(entry, "cleanup")


def stop_vm(task_id: str | None) -> Callable[[], None]:
    """The immediate half of :func:`cleanup_vm`: the sandbox of ``task_id`` leaves the
    registry (a later ``get_sandbox`` makes a fresh one) and its processes get SIGKILL now
    (``kill_now``). Returns the slow half (wait for them to go, remove the dirs, report the
    close) for a worker thread; ``stop_vm(t)()`` is ``cleanup_vm(t)``. Never blocks."""
    key = _key(task_id)
    with _lock:
        entry = _entries.get(key)
        detached = entry is not None and _detach(entry, "cleanup")
    if entry is None or not detached:
        return _nothing_left
    kill_now = getattr(entry.sandbox, "kill_now", None)
    if callable(kill_now):
        try:
            kill_now()
        except Exception:  # noqa: BLE001 - the slow half kills everything anyway
            pass
    once = threading.Lock()  # taken by the first call, never given back

    def rest() -> None:
        if once.acquire(blocking=False):
            _finish_close(entry, "cleanup")

    return rest


def _nothing_left() -> None:
    return None


def cleanup_all_environments() -> int:
    """Close every sandbox; returns how many were closed."""
    return _close_all("cleanup")


def _close_all(reason: str) -> int:
    with _lock:
        victims = [e for e in list(_entries.values()) if _detach(e, reason)]
    for entry in victims:
        _finish_close(entry, reason)
    return len(victims)


def kill_sandbox(task_id: str | None) -> bool:
    """Operator kill: stop the running command (it returns 130) and close. False if unknown."""
    key = _key(task_id)
    with _lock:
        entry = _entries.get(key)
    return entry is not None and _close(entry, "killed")


# --------------------------------------------------------------------------- commands


def _command_started(entry: _Entry, command: str, timeout: float) -> int:
    now = time.time()
    with _lock:
        if entry.closed:
            raise SandboxClosedError(
                f"sandbox for task {entry.key!r} was closed ({entry.close_reason}); call get_sandbox() for a fresh one"
            )
        call_id = next(_calls)
        head = _head(command, _RECORD_HEAD)
        entry.running[call_id] = _Running(head, now, timeout if isinstance(timeout, (int, float)) else 0.0)
        entry.last_activity = now
    if events.active:
        events.emit(
            events.SandboxCommandStarted(
                task_id=entry.key,
                command=_head(command, _EVENT_HEAD),
                timeout_s=float(timeout) if isinstance(timeout, (int, float)) else 0.0,
            )
        )
    return call_id


def _command_finished(entry: _Entry, call_id: int, command: str, started: float, result: ExecResult) -> None:
    now = time.time()
    record = CommandRecord(
        command=_head(command, _RECORD_HEAD),
        started_at=started,
        duration_s=now - started,
        exit_code=result.exit_code,
        output_head=_head(result.output, _RECORD_HEAD),
        timed_out=result.timed_out,
    )
    with _lock:
        entry.running.pop(call_id, None)
        entry.last_activity = now
        entry.recent.append(record)
    if events.active:
        events.emit(
            events.SandboxCommandFinished(
                task_id=entry.key,
                command=_head(command, _EVENT_HEAD),
                exit_code=result.exit_code,
                duration_s=record.duration_s,
                output_head=_head(result.output, _EVENT_HEAD),
                timed_out=result.timed_out,
            )
        )


def run_diagnostic(task_id: str | None, command: str, timeout: float = 10) -> ExecResult:
    """Operator command in the sandbox's cwd/env. Not agent activity: the idle clock,
    history and saved cwd/exports are left untouched."""
    return _lookup(task_id).sandbox.run_diagnostic(command, timeout)


# --------------------------------------------------------------------------- inspection


def list_sandboxes() -> list[SandboxInfo]:
    with _lock:
        infos = [e.info() for e in _entries.values()]
    return sorted(infos, key=lambda i: i.created_at)


def find_sandbox(task_id: str | None) -> ManagedSandbox | None:
    """The live sandbox of ``task_id``, or None. Never creates one (inspection)."""
    key = _key(task_id)
    with _lock:
        entry = _entries.get(key)
    return ManagedSandbox(entry) if entry is not None else None


def get_sandbox_info(task_id: str | None) -> SandboxInfo | None:
    key = _key(task_id)
    with _lock:
        entry = _entries.get(key)
        return entry.info() if entry is not None else None


def extend_lifetime(task_id: str | None, seconds: float) -> float:
    """Add ``seconds`` to this sandbox's idle lifetime; returns the new lifetime."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"seconds must be a positive, finite number, got {seconds!r}")
    entry = _lookup(task_id)
    with _lock:
        entry.lifetime_s += float(seconds)
        lifetime = entry.lifetime_s
    if events.active:
        events.emit(events.SandboxLifetimeChanged(task_id=entry.key, lifetime_s=lifetime))
    return lifetime


def extend_command_timeout(task_id: str | None, seconds: float) -> float:
    """Give the sandbox's running command ``seconds`` more; returns its new timeout."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"seconds must be a positive, finite number, got {seconds!r}")
    entry = _lookup(task_id)
    with _lock:
        running = list(entry.running.values())
    if not running:
        raise LookupError(f"sandbox {entry.key[:12]} runs no command; nothing to extend")
    extend = getattr(entry.sandbox, "extend_command", None)
    if extend is None:
        raise NotImplementedError(f"the {entry.sandbox.backend} backend cannot extend a running command")
    extend(float(seconds))
    with _lock:
        for r in running:
            r.timeout += float(seconds)
        return max(r.timeout for r in running)


def add_close_listener(listener: Callable[[str, str], None]) -> None:
    """``listener(task_id, reason)`` runs after a sandbox closes (e.g. to drop caches)."""
    _close_listeners.append(listener)


def remove_close_listener(listener: Callable[[str, str], None]) -> None:
    try:
        _close_listeners.remove(listener)
    except ValueError:
        pass


# --------------------------------------------------------------------------- reaper


def reap_idle(now: float | None = None) -> int:
    """Close sandboxes idle longer than their lifetime. A running command, or a live
    background process the sandbox started, counts as activity. Returns the count."""
    now = time.time() if now is None else now
    with _lock:
        candidates = [
            e for e in _entries.values() if not e.running and not e.closed and now - e.last_activity > e.lifetime_s
        ]
    victims: list[_Entry] = []
    for entry in candidates:
        busy = _has_background(entry.sandbox)  # /proc scan: outside the lock
        with _lock:
            if busy:
                entry.last_activity = time.time()
            elif not entry.running and now - entry.last_activity > entry.lifetime_s and _detach(entry, "idle_reaped"):
                victims.append(entry)
    for entry in victims:
        _finish_close(entry, "idle_reaped")
    return len(victims)


def _has_background(sandbox: BashSessionSandbox) -> bool:
    try:
        return sandbox.has_background_processes()
    except Exception:  # noqa: BLE001 - an unreadable /proc must not keep a sandbox forever
        return False


def _reaper_loop(stop: threading.Event) -> None:
    try:
        sweep_stale(current_settings().root)  # leftovers of a crashed earlier process
    except Exception:  # noqa: BLE001 - best effort
        pass
    while True:
        try:
            interval = current_settings().effective_reaper_interval
        except ValueError:
            interval = 5.0  # a malformed env var must not kill the reaper
        if stop.wait(interval):
            return
        try:
            reap_idle()
        except Exception:  # noqa: BLE001 - keep reaping whatever happens
            pass


def _ensure_background() -> None:
    global _reaper, _reaper_stop, _atexit_registered
    with _lock:
        if not _atexit_registered:
            atexit.register(_at_exit)
            _atexit_registered = True
        if _reaper is not None and _reaper.is_alive():
            return
        _reaper_stop = threading.Event()
        _reaper = threading.Thread(target=_reaper_loop, args=(_reaper_stop,), name="hermes-sandbox-reaper", daemon=True)
        _reaper.start()


def shutdown(timeout: float = 5.0) -> int:
    """Stop the reaper thread and close every sandbox (reason "exit"). Returns the count."""
    global _reaper, _reaper_stop
    with _lock:
        thread, stop = _reaper, _reaper_stop
        _reaper = _reaper_stop = None
    if stop is not None:
        stop.set()
    if thread is not None and thread is not threading.current_thread():
        thread.join(timeout)
    return _close_all("exit")


def reaper_thread() -> threading.Thread | None:
    return _reaper


def _at_exit() -> None:
    try:
        shutdown(timeout=1.0)
    except Exception:  # noqa: BLE001 - interpreter is going away
        pass
