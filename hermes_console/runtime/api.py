"""The surface the UI (and the headless printer, and tests) use to talk to a runtime.

Only events and commands cross the thread boundary:
- events flow out through :class:`EventSource.drain` (thread-safe, non-blocking);
- commands flow in through the methods below, each returning a
  ``concurrent.futures.Future`` that resolves once the runtime's own loop has
  acted on it (the ack the responsiveness benchmark measures).

A live host (:mod:`hermes_console.runtime.host`) and a replay of an event log
(:mod:`hermes_console.runtime.replay`) both implement it; replay rejects
commands with :class:`CommandUnavailable`. What commands resolve with is typed in
:mod:`hermes_console.runtime.payloads` (the same models cross the ``--listen`` wire).
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from environments.events import Event

if TYPE_CHECKING:  # (annotations only: the models cost pydantic and the sandbox layer at import)
    from hermes_console.runtime.payloads import DiagnosticResult, EvalMetrics, SandboxDetails


class CommandUnavailable(RuntimeError):
    """The command makes no sense for this runtime (e.g. pause during replay)."""


@runtime_checkable
class EventSource(Protocol):
    def drain(self, max_events: int | None = None) -> list[Event]:
        """Return (and forget) the events produced since the last call, oldest first."""
        ...


@runtime_checkable
class RuntimeAPI(EventSource, Protocol):
    # ---- lifecycle
    def start(self) -> None: ...
    def stop(self, drain_deadline_s: float = 10.0) -> Future[None]: ...
    @property
    def is_live(self) -> bool:
        """False for replay: controls are shown disabled."""
        ...

    # ---- the end of the run (what front ends wait on)
    fatal: BaseException | None  # the error that ended the run (setup/config or a crash), if any

    @property
    def done(self) -> Future[None]:
        """Resolves once the run has ended and everything is closed."""
        ...

    def join(self, timeout: float | None = None) -> bool: ...  # True once the runtime thread is gone

    # ---- intake gate
    def pause(self) -> Future[None]: ...  # stop calling get_next_item; in-flight groups finish (drain)
    def resume(self) -> Future[None]: ...
    def cancel_in_flight(self) -> Future[int]: ...  # returns number of groups cancelled

    # ---- phase / evaluate
    def switch_phase(self, phase: int, cancel_in_flight: bool = False) -> Future[None]: ...
    def evaluate(self, pause_intake: bool = False) -> Future[EvalMetrics]: ...  # resolves with the metrics

    # ---- sandboxes
    def kill_sandbox(self, task_id: str) -> Future[bool]: ...
    def extend_sandbox(self, task_id: str, seconds: float) -> Future[float]: ...
    def run_in_sandbox(self, task_id: str, command: str, timeout_s: float = 10.0) -> Future[DiagnosticResult]: ...
    def sandbox_details(self, task_id: str) -> Future[SandboxDetails]: ...  # process tree, cwd, recent commands


@runtime_checkable
class ExtendsCommands(Protocol):
    """Optional: a runtime that can give a sandbox's running command more time (the live host;
    the console checks for it, so replay and attach need not have it)."""

    def extend_command(self, task_id: str, seconds: float) -> Future[float]: ...  # the new timeout
