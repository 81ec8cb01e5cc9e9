"""FakeRuntime: a scripted RuntimeAPI for UI tests.

It hands out queued events through ``drain`` (respecting ``max_events`` like the
real host) and records every command. Each command returns a Future that is
resolved at once with a canned result, failed with a configured exception, or
left pending (``hold``) so a test can resolve it later.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future
from typing import Any

from environments.events import Event
from hermes_console.runtime.api import CommandUnavailable

DEFAULT_RESULTS: dict[str, Any] = {
    "cancel_in_flight": 3,
    "evaluate": {"eval/percent_correct": 0.5},
    "kill_sandbox": True,
    "extend_sandbox": 600.0,
    "run_in_sandbox": {"output": "total 4\ndrwxr-xr-x 2 agent agent 4096 .", "exit_code": 0, "duration_s": 0.01},
    "sandbox_details": {
        "cwd": "/tmp/hermes/sandbox",
        "process_tree": [
            {"pid": 101, "ppid": 1, "command": "bash", "state": "S", "elapsed_s": 12.0},
            {"pid": 140, "ppid": 101, "command": "python -m pytest -q", "state": "R", "elapsed_s": 3.5},
        ],
        "recent_commands": [
            {"command": "ls -la", "started_at": 0.0, "duration_s": 0.02, "exit_code": 0, "output_head": "calc.py"},
            {
                "command": "cat calc.py",
                "started_at": 1.0,
                "duration_s": 0.01,
                "exit_code": 0,
                "output_head": "def add(a, b): return a - b",
            },
        ],
        "lifetime_s": 300.0,
    },
}


class FakeRuntime:
    """Implements :class:`hermes_console.runtime.api.RuntimeAPI` from a script."""

    def __init__(
        self,
        events: Iterable[Event] = (),
        *,
        live: bool = True,
        fail: dict[str, BaseException] | None = None,
        hold: Iterable[str] = (),
        results: dict[str, Any] | None = None,
    ) -> None:
        self._queue: deque[Event] = deque(events)
        self._lock = threading.Lock()
        self._live = live
        self.fail = dict(fail or {})
        self.hold = set(hold)
        self.results = {**DEFAULT_RESULTS, **(results or {})}
        self.calls: list[tuple[str, tuple, dict]] = []
        self.pending: dict[str, Future] = {}
        self.drain_calls = 0
        self.drains_at_call: list[int] = []  # drain_calls when each command arrived (parallel to calls)
        self.started = False
        self.fatal: BaseException | None = None
        self._finished: Future = Future()  # resolved when a stop command resolves

    # ------------------------------------------------------------------ test helpers

    def feed(self, events: Iterable[Event]) -> None:
        with self._lock:
            self._queue.extend(events)

    @property
    def backlog(self) -> int:
        return len(self._queue)

    def names(self) -> list[str]:
        return [name for name, _, _ in self.calls]

    def resolve(self, name: str, result: Any = None, error: BaseException | None = None) -> None:
        future = self.pending.pop(name)
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    # ------------------------------------------------------------------ RuntimeAPI

    def drain(self, max_events: int | None = None) -> list[Event]:
        self.drain_calls += 1
        with self._lock:
            n = len(self._queue) if max_events is None else min(max_events, len(self._queue))
            return [self._queue.popleft() for _ in range(n)]

    def start(self) -> None:
        self.started = True
        self.calls.append(("start", (), {}))
        self.drains_at_call.append(self.drain_calls)

    @property
    def is_live(self) -> bool:
        return self._live

    @property
    def done(self) -> Future:
        return self._finished

    def join(self, timeout: float | None = None) -> bool:
        return True

    def _command(self, name: str, *args: Any, **kwargs: Any) -> Future:
        self.calls.append((name, args, kwargs))
        self.drains_at_call.append(self.drain_calls)
        future: Future = Future()
        if not self._live and name != "stop":
            future.set_exception(CommandUnavailable(f"{name} is not available during replay"))
        elif name in self.fail:
            future.set_exception(self.fail[name])
        elif name in self.hold:
            self.pending[name] = future
        else:
            future.set_result(self.results.get(name))
        return future

    def stop(self, drain_deadline_s: float = 10.0) -> Future:
        future = self._command("stop", drain_deadline_s)
        future.add_done_callback(lambda _: self._finished.done() or self._finished.set_result(None))
        return future

    def pause(self) -> Future:
        return self._command("pause")

    def resume(self) -> Future:
        return self._command("resume")

    def cancel_in_flight(self) -> Future:
        return self._command("cancel_in_flight")

    def switch_phase(self, phase: int, cancel_in_flight: bool = False) -> Future:
        return self._command("switch_phase", phase, cancel_in_flight=cancel_in_flight)

    def evaluate(self, pause_intake: bool = False) -> Future:
        return self._command("evaluate", pause_intake=pause_intake)

    def kill_sandbox(self, task_id: str) -> Future:
        return self._command("kill_sandbox", task_id)

    def extend_sandbox(self, task_id: str, seconds: float) -> Future:
        return self._command("extend_sandbox", task_id, seconds)

    def extend_command(self, task_id: str, seconds: float) -> Future:
        return self._command("extend_command", task_id, seconds)

    def run_in_sandbox(self, task_id: str, command: str, timeout_s: float = 10.0) -> Future:
        return self._command("run_in_sandbox", task_id, command, timeout_s=timeout_s)

    def sandbox_details(self, task_id: str) -> Future:
        return self._command("sandbox_details", task_id)
