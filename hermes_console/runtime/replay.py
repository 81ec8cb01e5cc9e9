"""Replay a recorded event log as a (read-only) runtime.

``ReplaySource(path, speed=None)`` yields every event at once; with ``speed``
(e.g. 1.0 = real time, 10.0 = ten times faster) events are released by their
recorded timestamps. Commands raise :class:`CommandUnavailable`.
"""

from __future__ import annotations

import json
import time
import warnings
from concurrent.futures import Future
from typing import Any, Callable, Iterator, List, Optional

from environments.events import Event, event_from_dict
from hermes_console.runtime import events as _runtime_events  # noqa: F401 - registers runtime event kinds
from hermes_console.runtime.api import CommandUnavailable
from hermes_console.runtime.recorder import open_log


class ReplayError(ValueError):
    """The log cannot be read: names the file and the line."""


def read_events(path: str, on_warning: Optional[Callable[[str], None]] = None) -> Iterator[Event]:
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
                        warn(f"{path}: the log ends in a partial event (line {lineno}); replaying the "
                             f"{lineno - 1} line(s) before it")
                        return
                    raise ReplayError(f"{path}: line {lineno} is not valid JSON ({exc.msg} at column {exc.colno})") from None
                if not isinstance(data, dict):
                    raise ReplayError(f"{path}: line {lineno} is a JSON {type(data).__name__}; expected an event object")
                try:
                    yield event_from_dict(data)
                except (TypeError, ValueError) as exc:
                    raise ReplayError(f"{path}: line {lineno}: {exc}") from None
        except EOFError:  # gzip stream without its end marker: a truncated file
            warn(f"{path}: the compressed log is truncated after line {lineno}; replaying the whole events before "
                 "the cut")
        except (OSError, UnicodeDecodeError) as exc:
            if lineno == 0:
                raise ReplayError(f"event log {path!r} is unreadable: {exc}") from None
            warn(f"{path}: the log is damaged after line {lineno} ({exc}); replaying the events before it")


class TruncatedLogWarning(UserWarning):
    """The event log ends early; the whole events before the cut were read."""


def _unavailable(name: str) -> Any:
    def command(self: "ReplaySource", *args: Any, **kwargs: Any) -> Any:
        raise CommandUnavailable(f"{name} is not available while replaying {self.path}")

    command.__name__ = name
    return command


class ReplaySource:
    """Implements :class:`hermes_console.runtime.api.RuntimeAPI` over an event log."""

    def __init__(self, path: str, speed: Optional[float] = None) -> None:
        if speed is not None and speed <= 0:
            raise ValueError(f"speed must be positive (1.0 = real time), got {speed!r}")
        self.path = path
        self.speed = speed
        self.fatal: Optional[BaseException] = None
        self.warnings: List[str] = []  # e.g. the log was cut short; the CLI prints them
        self._events: List[Event] = list(read_events(path, self.warnings.append))  # errors surface here, before any UI
        self._pos = 0
        self._t0: Optional[float] = None
        self._done: "Future[None]" = Future()
        if not self._events:
            self._done.set_result(None)

    def __len__(self) -> int:
        return len(self._events)

    @property
    def is_live(self) -> bool:
        return False

    @property
    def done(self) -> "Future[None]":
        return self._done

    def start(self) -> None:
        self._t0 = time.monotonic()

    def stop(self, drain_deadline_s: float = 10.0) -> "Future[None]":
        self._pos = len(self._events)
        if not self._done.done():
            self._done.set_result(None)
        return self._done

    def join(self, timeout: Optional[float] = None) -> bool:
        return True

    def drain(self, max_events: Optional[int] = None) -> List[Event]:
        end = len(self._events)
        if self.speed is not None and self._pos < end:
            if self._t0 is None:
                return []
            first = self._events[0].ts
            horizon = first + (time.monotonic() - self._t0) * self.speed
            hi = self._pos
            while hi < end and self._events[hi].ts <= horizon:
                hi += 1
            end = hi
        if max_events is not None:
            end = min(end, self._pos + max_events)
        out = self._events[self._pos : end]
        self._pos = end
        if self._pos >= len(self._events) and not self._done.done():
            self._done.set_result(None)
        return out

    pause = _unavailable("pause")
    resume = _unavailable("resume")
    cancel_in_flight = _unavailable("cancel_in_flight")
    switch_phase = _unavailable("switch_phase")
    evaluate = _unavailable("evaluate")
    kill_sandbox = _unavailable("kill_sandbox")
    extend_sandbox = _unavailable("extend_sandbox")
    run_in_sandbox = _unavailable("run_in_sandbox")
    sandbox_details = _unavailable("sandbox_details")

