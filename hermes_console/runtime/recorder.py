"""``--record FILE``: every event as one JSON line (gzip when FILE ends in .gz).

The tap only appends to a deque (atomic, on the emitting thread); a background
writer thread serialises and flushes every ``flush_s``, so recording never
blocks the env loop.

A write error (disk full, file gone) is reported at once (an ERROR LogRecord) and
ends recording: later events are not queued (memory stays flat) and ``close()``
never waits on a file that cannot be written. The file is closed on every exit
path (``close()``, or at interpreter exit as a last resort), so a gzip log is a
complete gzip stream whenever the disk allowed it.
"""

from __future__ import annotations

import atexit
import contextlib
import gzip
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, cast

from environments import events
from environments.events import Event
from hermes_console.runtime.sinks import dumps_strict

JOIN_S = 10.0  # close() waits this long for the writer thread at most


def open_log(path: str, mode: str) -> IO[Any]:
    """Text handle on a plain or gzip event log (by suffix when writing, by magic when reading)."""
    if "w" in mode or "a" in mode:
        if path.endswith(".gz"):
            return cast(IO[Any], gzip.open(path, mode + "t", encoding="utf-8"))
        return open(path, mode, encoding="utf-8")
    with open(path, "rb") as fp:
        gz = fp.read(2) == b"\x1f\x8b"
    return cast(IO[Any], gzip.open(path, "rt", encoding="utf-8")) if gz else open(path, encoding="utf-8")


def _report(message: str) -> None:
    from hermes_console.runtime.events import LogRecord

    events.emit(LogRecord(level="ERROR", logger="recorder", message=message))


class Recorder:
    def __init__(
        self,
        path: str,
        flush_s: float = 0.2,
        on_error: Callable[[str], None] | None = None,
        opener: Callable[[str, str], IO[Any]] | None = None,
    ) -> None:
        self.path = path
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._fp: IO[Any] | None = (opener or open_log)(path, "w")
        self._pending: deque[Event] = deque()
        self._flush_s = flush_s
        self._stop = threading.Event()
        self._io_lock = threading.Lock()  # the writer thread, close() and the atexit hook
        self._on_error = on_error or _report
        self.written = 0
        self.error: str | None = None
        self.closed = False
        self._thread = threading.Thread(target=self._loop, name="hermes-recorder", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def tap(self, event: Event) -> None:
        if self.error is None and not self.closed:
            self._pending.append(event)

    __call__ = tap

    def _write_pending(self) -> None:
        """Write what is queued (caller holds ``_io_lock``); on failure record and report the error."""
        if self._fp is None or self.error is not None:
            self._pending.clear()
            return
        pop = self._pending.popleft
        lines = []
        while True:
            try:
                event = pop()
            except IndexError:
                break
            lines.append(dumps_strict(event.to_dict()))
        if not lines:
            return
        try:
            self._fp.write("\n".join(lines) + "\n")
            self._fp.flush()
            self.written += len(lines)
        except Exception as exc:  # noqa: BLE001 - disk full, file gone: stop recording, say so now
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        detail = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        self.error = f"{type(exc).__name__}: {detail}"
        self._pending.clear()
        fp, self._fp = self._fp, None
        if fp is not None:
            with contextlib.suppress(Exception):
                fp.close()
        self._on_error(
            f"event log {self.path} could not be written ({self.error}); recording stopped after "
            f"{self.written} event(s), the run goes on"
        )

    def _loop(self) -> None:
        while not self._stop.wait(self._flush_s):
            with self._io_lock:
                self._write_pending()
            if self.error is not None:
                return

    def close(self) -> None:
        """Write everything still pending, close the file, join the writer. Idempotent; never hangs."""
        if self.closed:
            return
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=JOIN_S)
        if not self._io_lock.acquire(timeout=JOIN_S):
            return  # the writer is stuck in a write: leave it (a daemon thread), never hang the stop
        try:
            if self.closed:
                return
            self.closed = True
            self._write_pending()
            fp, self._fp = self._fp, None
            if fp is not None:
                try:
                    fp.close()
                except Exception as exc:  # noqa: BLE001 - gzip trailer on a full disk
                    self._fail(exc)
        finally:
            self._io_lock.release()
            with contextlib.suppress(Exception):
                atexit.unregister(self.close)
