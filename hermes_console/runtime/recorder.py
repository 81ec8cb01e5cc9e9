"""``--record FILE``: every event as one JSON line (gzip when FILE ends in .gz).

The tap only appends to a deque (atomic, on the emitting thread); a background
writer thread serialises and flushes every ``flush_s``, so recording never
blocks the env loop.
"""

from __future__ import annotations

import gzip
import json
import threading
from collections import deque
from pathlib import Path
from typing import IO, Any, Deque, Optional

from environments.events import Event
from hermes_console.runtime.sinks import _default


def open_log(path: str, mode: str) -> IO[Any]:
    """Text handle on a plain or gzip event log (by suffix when writing, by magic when reading)."""
    if "w" in mode or "a" in mode:
        if path.endswith(".gz"):
            return gzip.open(path, mode + "t", encoding="utf-8")
        return open(path, mode, encoding="utf-8")
    with open(path, "rb") as fp:
        gz = fp.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rt", encoding="utf-8") if gz else open(path, "r", encoding="utf-8")


class Recorder:
    def __init__(self, path: str, flush_s: float = 0.2) -> None:
        self.path = path
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._fp = open_log(path, "w")
        self._pending: Deque[Event] = deque()
        self._flush_s = flush_s
        self._stop = threading.Event()
        self.written = 0
        self.error: Optional[str] = None
        self._thread = threading.Thread(target=self._loop, name="hermes-recorder", daemon=True)
        self._thread.start()

    def tap(self, event: Event) -> None:
        self._pending.append(event)

    __call__ = tap

    def _write_pending(self) -> None:
        pop = self._pending.popleft
        lines = []
        while True:
            try:
                event = pop()
            except IndexError:
                break
            lines.append(json.dumps(event.to_dict(), default=_default))
        if lines:
            self._fp.write("\n".join(lines) + "\n")
            self._fp.flush()
            self.written += len(lines)

    def _loop(self) -> None:
        while not self._stop.wait(self._flush_s):
            try:
                self._write_pending()
            except Exception as exc:  # noqa: BLE001 - keep the run going; report at close
                self.error = f"{type(exc).__name__}: {exc}"
                return

    def close(self) -> None:
        """Write everything still pending, close the file, join the writer."""
        self._stop.set()
        self._thread.join(timeout=10)
        try:
            self._write_pending()
        finally:
            self._fp.close()
