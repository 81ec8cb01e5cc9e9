"""Replay a recorded event log as a (read-only) runtime.

``ReplaySource(path, speed=None)`` yields every event at once; with ``speed``
(e.g. 1.0 = real time, 10.0 = ten times faster) events are released by their
recorded timestamps. Commands raise :class:`CommandUnavailable`.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING

from environments.events import Event, event_from_dict
from hermes_console.runtime import events as _runtime_events  # noqa: F401 - registers runtime event kinds
from hermes_console.runtime.api import CommandUnavailable
from hermes_console.runtime.recorder import open_log

if TYPE_CHECKING:  # annotations only: a replay never builds them
    from hermes_console.runtime.payloads import DiagnosticResult, EvalMetrics, SandboxDetails


class ReplayError(ValueError):
    """The log cannot be read: names the file and the line."""


def read_events(path: str, on_warning: Callable[[str], None] | None = None) -> Iterator[Event]:
    """Events of a log, in order. A log cut short (a torn last line, a gzip stream without
    its end: the run was killed or the disk filled up) yields its whole events and reports
    the cut through ``on_warning`` (a ``warnings.warn`` by default); damage anywhere else is
    a :class:`ReplayError`."""
    warn = on_warning or (lambda message: warnings.warn(message, TruncatedLogWarning, stacklevel=3))
    try:
        fp = open_log(path, "r")
    except OSError as exc:
        raise ReplayError(f"event log {path!r} cannot be opened: {exc.strerror or exc}") from None
    lineno = 0
    with fp:
        try:
            for lineno, line in enumerate(fp, start=1):
                if not line.strip():
                    continue
                try:
                    data = json.loads(line)
                except json.JSONDecodeError as exc:
                    if not line.endswith("\n"):  # the last line, cut mid-write
                        warn(
                            f"{path}: the log ends in a partial event (line {lineno}); replaying the "
                            f"{lineno - 1} line(s) before it"
                        )
                        return
                    raise ReplayError(
                        f"{path}: line {lineno} is not valid JSON ({exc.msg} at column {exc.colno})"
                    ) from None
                if not isinstance(data, dict):
                    raise ReplayError(
                        f"{path}: line {lineno} is a JSON {type(data).__name__}; expected an event object"
                    )
                try:
                    yield event_from_dict(data)
                except (TypeError, ValueError) as exc:
                    raise ReplayError(f"{path}: line {lineno}: {exc}") from None
        except EOFError:  # gzip stream without its end marker: a truncated file
            warn(
                f"{path}: the compressed log is truncated after line {lineno}; replaying the whole events before "
                "the cut"
            )
        except (OSError, UnicodeDecodeError) as exc:
            if lineno == 0:
                raise ReplayError(f"event log {path!r} is unreadable: {exc}") from None
            warn(f"{path}: the log is damaged after line {lineno} ({exc}); replaying the events before it")


class TruncatedLogWarning(UserWarning):
    """The event log ends early; the whole events before the cut were read."""


@dataclass(frozen=True)
class ReplayPosition:
    """Where a replay stands (the status bar's REPLAY line, seeking)."""

    pos: int  # events released so far
    total: int
    ts: float | None  # log time of the last released event
    first_ts: float | None
    last_ts: float | None
    speed: float | None  # None: every event at once
    paused: bool


class ReplaySource:
    """Implements :class:`hermes_console.runtime.api.RuntimeAPI` over an event log."""

    def __init__(self, path: str, speed: float | None = None) -> None:
        if speed is not None and speed <= 0:
            raise ValueError(f"speed must be positive (1.0 = real time), got {speed!r}")
        self.path = path
        self.speed = speed
        self.fatal: BaseException | None = None
        self.warnings: list[str] = []  # e.g. the log was cut short; the CLI prints them
        self._events: list[Event] = list(read_events(path, self.warnings.append))  # errors surface here, before any UI
        self._pos = 0
        self._t0: float | None = None
        # The timeline: at monotonic time _t0 the replay stood at log time _base_ts.
        self._base_ts: float | None = self._events[0].ts if self._events else None
        self.paused = False
        self._until: int | None = None  # a seek releases up to here at once, then holds
        self._done: Future[None] = Future()
        if not self._events:
            self._done.set_result(None)

    def __len__(self) -> int:
        return len(self._events)

    @property
    def is_live(self) -> bool:
        return False

    @property
    def done(self) -> Future[None]:
        return self._done

    def start(self) -> None:
        self._t0 = time.monotonic()

    def stop(self, drain_deadline_s: float = 10.0) -> Future[None]:
        self._pos = len(self._events)
        if not self._done.done():
            self._done.set_result(None)
        return self._done

    def join(self, timeout: float | None = None) -> bool:
        return True

    def drain(self, max_events: int | None = None) -> list[Event]:
        end = len(self._events)
        if self._until is not None:
            end = self._until  # a seek: everything up to the target at once
        elif self.paused:
            end = self._pos
        elif self.speed is not None and self._pos < end:
            if self._t0 is None:
                return []
            horizon = self._horizon()
            hi = self._pos
            while hi < end and self._events[hi].ts <= horizon:
                hi += 1
            end = hi
        if max_events is not None:
            end = min(end, self._pos + max_events)
        out = self._events[self._pos : end]
        self._pos = end
        if self._until is not None and self._pos >= self._until:
            self._until = None  # arrived: hold here (paused) until resumed
        if self._pos >= len(self._events) and not self._done.done():
            self._done.set_result(None)
        return out

    # ------------------------------------------------------------------ the replay's own controls

    def _horizon(self) -> float:
        """Log time the replay has reached (timed replay)."""
        if self._base_ts is None or self._t0 is None or self.speed is None:
            return float("inf")
        return self._base_ts + (time.monotonic() - self._t0) * self.speed

    def _rebase(self) -> None:
        """Keep the log time reached so far when pausing, resuming or changing speed."""
        if self.speed is not None and self._t0 is not None and not self.paused:
            self._base_ts = min(self._horizon(), self._events[-1].ts if self._events else 0.0)
        elif self._pos and self._events:
            self._base_ts = self._events[self._pos - 1].ts
        self._t0 = time.monotonic()

    def set_paused(self, paused: bool) -> None:
        if paused == self.paused:
            return
        self._rebase()
        self.paused = paused

    def set_speed(self, speed: float | None) -> None:
        """``None``: everything left at once; else log seconds per wall second."""
        if speed is not None and speed <= 0:
            raise ValueError(f"speed must be positive (1.0 = real time), got {speed!r}")
        self._rebase()
        self.speed = speed

    def seek(self, index: int) -> None:
        """Replay again from the start up to event ``index`` at once, then hold (paused) there.
        The caller starts from an empty state: the events before ``index`` come again."""
        index = max(0, min(int(index), len(self._events)))
        self._pos = 0
        self._until = index
        self.paused = True
        self._base_ts = self._events[index - 1].ts if index and self._events else self._base_ts
        self._t0 = time.monotonic()

    def position(self) -> ReplayPosition:
        """Where the replay stands: events released, their total, and log times."""
        events = self._events
        pos = self._until if self._until is not None else self._pos
        return ReplayPosition(
            pos=pos,
            total=len(events),
            ts=events[pos - 1].ts if pos and events else None,
            first_ts=events[0].ts if events else None,
            last_ts=events[-1].ts if events else None,
            speed=self.speed,
            paused=self.paused,
        )

    def index_at(self, ts: float) -> int:
        """Index of the first event after log time ``ts`` (bisect over recorded times)."""
        lo, hi = 0, len(self._events)
        while lo < hi:
            mid = (lo + hi) // 2
            if self._events[mid].ts <= ts:
                lo = mid + 1
            else:
                hi = mid
        return lo

    # ---- commands: a log cannot be steered (raised at once, like a refused command)
    def _unavailable(self, name: str) -> CommandUnavailable:
        return CommandUnavailable(f"{name} is not available while replaying {self.path}")

    def pause(self) -> Future[None]:
        raise self._unavailable("pause")

    def resume(self) -> Future[None]:
        raise self._unavailable("resume")

    def cancel_in_flight(self) -> Future[int]:
        raise self._unavailable("cancel_in_flight")

    def switch_phase(self, phase: int, cancel_in_flight: bool = False) -> Future[None]:
        raise self._unavailable("switch_phase")

    def evaluate(self, pause_intake: bool = False) -> Future[EvalMetrics]:
        raise self._unavailable("evaluate")

    def kill_sandbox(self, task_id: str) -> Future[bool]:
        raise self._unavailable("kill_sandbox")

    def extend_sandbox(self, task_id: str, seconds: float) -> Future[float]:
        raise self._unavailable("extend_sandbox")

    def run_in_sandbox(self, task_id: str, command: str, timeout_s: float = 10.0) -> Future[DiagnosticResult]:
        raise self._unavailable("run_in_sandbox")

    def sandbox_details(self, task_id: str) -> Future[SandboxDetails]:
        raise self._unavailable("sandbox_details")
