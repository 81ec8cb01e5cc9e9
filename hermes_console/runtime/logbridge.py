"""Route log records into the event stream (LogRecord events) instead of the terminal.

While a Textual UI owns the terminal, a StreamHandler (or Python's last-resort
handler) writing to stderr would scribble over the screen. The bridge sits on
the root logger and on ``atroposlib`` (which does not propagate once tamed).
"""

from __future__ import annotations

import logging

from environments import events
from environments.redact import safe_head
from hermes_console.runtime import events as rev

MAX_MESSAGE = 500


class _Discard:
    """A stream for handlers we must give one to but want silent."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


DISCARD = _Discard()


class LogBridge(logging.Handler):
    def __init__(self, level: int = logging.WARNING) -> None:
        super().__init__(level)
        self._attached: list[logging.Logger] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string must not break the caller
            message = str(record.msg)
        events.emit(rev.LogRecord(level=record.levelname, logger=record.name, message=safe_head(message, MAX_MESSAGE)))

    def attach(self, *names: str) -> None:
        for name in names:
            logger = logging.getLogger(name or None)
            if self not in logger.handlers:
                logger.addHandler(self)
                self._attached.append(logger)

    def detach(self) -> None:
        for logger in self._attached:
            logger.removeHandler(self)
        self._attached.clear()
