"""FakeRuntime: a scripted :class:`~hermes_console.runtime.api.RuntimeAPI` (UI tests, screenshots).

It hands out queued events through ``drain`` (respecting ``max_events`` like the real host) and
records every command. Each command returns a Future that is resolved at once with the typed
result in :class:`FakeResults`, failed with a configured exception, or left pending (``hold``)
so a test can resolve it later. The payloads are the runtime's own models, and the bottom of
this module makes mypy check that this fake and every real runtime still satisfy the protocol.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from environments.events import Event
from hermes_console.runtime.api import CommandUnavailable
from hermes_console.runtime.payloads import (
    CommandRecord,
    DiagnosticResult,
    EvalMetrics,
    ProcessInfo,
    SandboxDetails,
)

if TYPE_CHECKING:
    from hermes_console.remote.client import FleetRuntime
    from hermes_console.runtime.api import RuntimeAPI
    from hermes_console.runtime.host import RuntimeHost
    from hermes_console.runtime.replay import ReplaySource

T = TypeVar("T")


def sample_details(task_id: str = "fake-sandbox", **changes: Any) -> SandboxDetails:
    """A live idle sandbox with a shell, a test run in its process tree and two recent commands."""
    details = SandboxDetails(
        task_id=task_id,
        backend="local",
        workspace=f"/tmp/hermes/{task_id}",
        state="idle",
        created_at=0.0,
        last_activity=1.0,
        lifetime_s=300.0,
        cwd="/tmp/hermes/sandbox",
        process_tree=[
            ProcessInfo(pid=101, ppid=1, command="bash", state="S", elapsed_s=12.0),
            ProcessInfo(pid=140, ppid=101, command="python -m pytest -q", state="R", elapsed_s=3.5),
        ],
        recent_commands=[
            CommandRecord(command="ls -la", started_at=0.0, duration_s=0.02, exit_code=0, output_head="calc.py"),
            CommandRecord(
                command="cat calc.py",
                started_at=1.0,
                duration_s=0.01,
                exit_code=0,
                output_head="def add(a, b): return a - b",
            ),
        ],
    )
    return details.model_copy(update=changes) if changes else details


@dataclass
class FakeResults:
    """What each command resolves with (unless failed or held)."""

    cancel_in_flight: int = 3
    evaluate: EvalMetrics = field(default_factory=lambda: {"eval/percent_correct": 0.5})
    kill_sandbox: bool = True
    extend_sandbox: float = 600.0
    extend_command: float = 600.0
    run_in_sandbox: DiagnosticResult = field(
        default_factory=lambda: DiagnosticResult(
            output="total 4\ndrwxr-xr-x 2 agent agent 4096 .", exit_code=0, duration_s=0.01
        )
    )
    sandbox_details: SandboxDetails = field(default_factory=sample_details)


Call = tuple[str, tuple[Any, ...], dict[str, Any]]


class FakeRuntime:
    """Implements :class:`hermes_console.runtime.api.RuntimeAPI` from a script."""

    def __init__(
        self,
        events: Iterable[Event] = (),
        *,
        live: bool = True,
        fail: dict[str, BaseException] | None = None,
        hold: Iterable[str] = (),
        results: FakeResults | None = None,
    ) -> None:
        self._queue: deque[Event] = deque(events)
        self._lock = threading.Lock()
        self._live = live
        self.fail = dict(fail or {})
        self.hold = set(hold)
        self.results = results or FakeResults()
        self.calls: list[Call] = []
        self.pending: dict[str, Future[Any]] = {}  # held commands by name, for resolve()
        self.drain_calls = 0
        self.drains_at_call: list[int] = []  # drain_calls when each command arrived (parallel to calls)
        self.started = False
        self.fatal: BaseException | None = None
        self._finished: Future[None] = Future()  # resolved when a stop command resolves

    # ------------------------------------------------------------------ test helpers

    def feed(self, events: Iterable[Event]) -> None:
        with self._lock:
            self._queue.extend(events)

    @property
    def backlog(self) -> int:
        """Events not drained yet."""
        return len(self._queue)

    def names(self) -> list[str]:
        return [name for name, _, _ in self.calls]

    def resolve(self, name: str, result: object = None, error: BaseException | None = None) -> None:
        """Resolve (or fail) the held command ``name``."""
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
    def done(self) -> Future[None]:
        return self._finished

    def join(self, timeout: float | None = None) -> bool:
        return True

    def _command(self, name: str, result: T, *args: Any, **kwargs: Any) -> Future[T]:
        self.calls.append((name, args, kwargs))
        self.drains_at_call.append(self.drain_calls)
        future: Future[T] = Future()
        if not self._live and name != "stop":
            future.set_exception(CommandUnavailable(f"{name} is not available during replay"))
        elif name in self.fail:
            future.set_exception(self.fail[name])
        elif name in self.hold:
            self.pending[name] = future
        else:
            future.set_result(result)
        return future

    def stop(self, drain_deadline_s: float = 10.0) -> Future[None]:
        future = self._command("stop", None, drain_deadline_s)
        future.add_done_callback(self._stopped)
        return future

    def _stopped(self, _: Future[None]) -> None:
        if not self._finished.done():
            self._finished.set_result(None)

    def pause(self) -> Future[None]:
        return self._command("pause", None)

    def resume(self) -> Future[None]:
        return self._command("resume", None)

    def cancel_in_flight(self) -> Future[int]:
        return self._command("cancel_in_flight", self.results.cancel_in_flight)

    def switch_phase(self, phase: int, cancel_in_flight: bool = False) -> Future[None]:
        return self._command("switch_phase", None, phase, cancel_in_flight=cancel_in_flight)

    def evaluate(self, pause_intake: bool = False) -> Future[EvalMetrics]:
        return self._command("evaluate", self.results.evaluate, pause_intake=pause_intake)

    def kill_sandbox(self, task_id: str) -> Future[bool]:
        return self._command("kill_sandbox", self.results.kill_sandbox, task_id)

    def extend_sandbox(self, task_id: str, seconds: float) -> Future[float]:
        return self._command("extend_sandbox", self.results.extend_sandbox, task_id, seconds)

    def extend_command(self, task_id: str, seconds: float) -> Future[float]:
        return self._command("extend_command", self.results.extend_command, task_id, seconds)

    def run_in_sandbox(self, task_id: str, command: str, timeout_s: float = 10.0) -> Future[DiagnosticResult]:
        return self._command("run_in_sandbox", self.results.run_in_sandbox, task_id, command, timeout_s=timeout_s)

    def sandbox_details(self, task_id: str) -> Future[SandboxDetails]:
        return self._command("sandbox_details", self.results.sandbox_details, task_id)


if TYPE_CHECKING:  # mypy: the fake and every real runtime satisfy the protocol the front ends use

    def _implementations(
        fake: FakeRuntime, host: RuntimeHost, replay: ReplaySource, fleet: FleetRuntime
    ) -> list[RuntimeAPI]:
        return [fake, host, replay, fleet]
