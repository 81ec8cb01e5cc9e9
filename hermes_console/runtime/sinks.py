"""Files the runtime writes itself: kept groups (flushed per line, attributed to
the group that wrote them) and dropped groups with their reason."""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from environments import events

logger = logging.getLogger(__name__)
MAX_SETTLED = 1_024  # settled groups whose counts count_for still reports


def jsonable(value: Any) -> Any:
    """Plain JSON data (numpy scalars, tuples, objects -> JSON types/strings).

    Events carry this so a replayed log compares equal to the live run."""
    return json.loads(json.dumps(value, default=_default))


def _default(obj: Any) -> Any:
    for attr in ("tolist", "item"):  # numpy arrays / scalars without importing numpy
        fn = getattr(obj, attr, None)
        if callable(fn):
            try:
                return fn()
            except Exception:  # noqa: BLE001
                pass
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=repr)
    return str(obj)


def _finite(value: Any) -> Any:
    """``value`` with NaN/inf floats spelled as strings (JSON has no such numbers)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def dumps_strict(value: Any, indent: int | None = None) -> str:
    """Strict JSON (never ``NaN``/``Infinity``): non-finite numbers become strings.
    For logs and records about data; kept groups use ``allow_nan=False`` and fail instead."""
    try:
        return json.dumps(value, default=_default, allow_nan=False, indent=indent)
    except ValueError:
        return json.dumps(_finite(json.loads(json.dumps(value, default=_default))), allow_nan=False, indent=indent)


def repair_torn_tail(path: str) -> str | None:
    """Before appending to a jsonl: cut a torn last line (a crash mid-write) so the next
    record starts on a line of its own. Returns a warning naming what was cut, or None."""
    try:
        with open(path, "rb+") as raw:
            size = raw.seek(0, 2)
            if size == 0:
                return None
            raw.seek(size - 1)
            if raw.read(1) == b"\n":
                return None
            # Read back in blocks until the last newline: only the torn tail is cut.
            pos, keep = size, 0
            while pos > 0:
                start = max(0, pos - 65_536)
                raw.seek(start)
                block = raw.read(pos - start)
                nl = block.rfind(b"\n")
                if nl >= 0:
                    keep = start + nl + 1
                    break
                pos = start
            raw.truncate(keep)
    except FileNotFoundError:
        return None
    return (
        f"{path}: its last line was torn ({size - keep} byte(s) without an end of line, e.g. from a crash); "
        "cut it so new records start on a whole line"
    )


def _warn(message: str) -> None:
    logger.warning("%s", message)
    from hermes_console.runtime.events import LogRecord

    events.emit(LogRecord(level="WARNING", logger="sinks", message=message))


class SinkError(OSError):
    """A kept group could not be written (disk full, file gone read-only)."""


class GroupWriter:
    """Replaces ``env.jsonl_writer``: same ``write``/``close`` surface as jsonlines'
    writer, but every line is flushed at once (a crash loses nothing completed) and
    each write is attributed to the group running in the writing task's context."""

    def __init__(self, path: str, item_of: Callable[[str], str | None] | None = None) -> None:
        self.path = path
        # group id -> its item's summary, for the record's ``hermes_item`` (None: not known).
        self._item_of = item_of
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        torn = repair_torn_tail(path)
        if torn:
            _warn(torn)
        self._fp = open(path, "a", encoding="utf-8")
        self._lock = threading.Lock()
        # Lines per group still being sent; the driver settles each group once it has read
        # its count, so this holds only in-flight groups (not one entry per group forever).
        self.written: Counter[str] = Counter()
        # The last few settled counts, so count_for still answers just after a send (bounded).
        self._settled: OrderedDict[str, int] = OrderedDict()
        self.total = 0
        self.closed = False

    def write(self, obj: Any) -> None:
        group_id = events.current_group_id.get() or ""
        # Strict JSON: a group with NaN/inf fails here rather than becoming an unreadable line.
        try:
            line = json.dumps(self._tagged(obj, group_id), default=_default, allow_nan=False)
        except ValueError as exc:
            raise ValueError(f"group not written to {self.path}: {exc} (NaN/inf); expected finite numbers") from None
        with self._lock:
            if self.closed:
                raise ValueError(f"{self.path} is closed")
            try:
                self._fp.write(line + "\n")
                self._fp.flush()
            except OSError as exc:
                self._untear()
                raise SinkError(exc.errno, f"cannot write kept groups to {self.path}: {exc.strerror or exc}") from exc
            self.written[group_id] += 1
            self.total += 1

    def _tagged(self, obj: Any, group_id: str) -> Any:
        """The record plus ``hermes_group_id``/``hermes_item``: extra keys atroposlib's readers
        ignore. A copy: the same group object goes on to the trainer, which must not get them."""
        if not isinstance(obj, dict) or not group_id:
            return obj
        tagged = dict(obj)
        tagged["hermes_group_id"] = group_id
        item = self._item_of(group_id) if self._item_of is not None else None
        if item is not None:
            tagged["hermes_item"] = item
        return tagged

    def _untear(self) -> None:
        """After a failed write, cut the file back to its last whole line (best effort):
        a reader of the jsonl never meets half a group."""
        try:
            self._fp.seek(0, 2)
        except (OSError, ValueError):
            pass
        try:
            with open(self.path, "rb+") as raw:
                data = raw.read()
                keep = data.rfind(b"\n") + 1
                if keep < len(data):
                    raw.truncate(keep)
        except OSError:
            pass

    def count_for(self, group_id: str) -> int:
        with self._lock:
            if group_id in self.written:
                return self.written[group_id]
            return self._settled.get(group_id, 0)

    def settle(self, group_id: str) -> int:
        """Forget the live count of a group that has been sent; returns it."""
        with self._lock:
            count = self.written.pop(group_id, 0)
            if count:
                self._settled[group_id] = count
                self._settled.move_to_end(group_id)
                while len(self._settled) > MAX_SETTLED:
                    self._settled.popitem(last=False)
            return count

    def close(self) -> None:
        with self._lock:
            if not self.closed:
                self.closed = True
                self._fp.close()


class DroppedWriter:
    """``dropped.jsonl`` beside the groups file: every group not kept, with the reason."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fp: Any | None = None
        self.count = 0

    def write(self, group_id: str, reason: str, group: Any, detail: str = "") -> None:
        if self._fp is None:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            torn = repair_torn_tail(self.path)
            if torn:
                _warn(torn)
            self._fp = open(self.path, "a", encoding="utf-8")
        record = {"group_id": group_id, "reason": reason, "detail": detail, "ts": time.time(), "group": group}
        self._fp.write(dumps_strict(record) + "\n")
        self._fp.flush()
        self.count += 1

    def close(self) -> None:
        if self._fp is not None:
            self._fp.close()
            self._fp = None
