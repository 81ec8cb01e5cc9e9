"""``rollouts.jsonl`` in the run dir: one line per finished rollout, and one per group fate.

The console keeps a bounded history in memory (runtime/history.py); this file is the
whole of it on disk, for every rollout of the run: ids, item, score, turns, tool errors,
where the time went (generation / tools / reward), the env's reward_details, errors.
Group lines (``"kind": "group"``) say whether the group was kept, dropped (and why),
failed or cancelled. Written from the event tap (any thread), one flushed line each.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import IO, Any

from environments import events as ev
from hermes_console.runtime import events as rev

logger = logging.getLogger(__name__)
MAX_OPEN = 10_000  # running rollouts whose time is summed; past it the oldest (never finished) go


class RolloutLog:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._fp: IO[str] | None = None
        self._failed = False
        self._time: dict[str, dict[str, float]] = {}  # rollout id -> generation_s, tool_s, llm_calls
        self._item: dict[str, str] = {}

    def tap(self, event: ev.Event) -> None:
        """The queue tap: never raises (a full disk costs this file, not the run)."""
        try:
            self._on(event)
        except Exception as exc:  # noqa: BLE001
            if not self._failed:
                self._failed = True
                logger.warning("rollouts.jsonl: stopped writing %s: %s", self.path, exc)

    def _on(self, e: ev.Event) -> None:
        if isinstance(e, ev.RolloutStarted):
            with self._lock:
                self._time[e.rollout_id] = {"generation_s": 0.0, "tool_s": 0.0, "llm_calls": 0}
                self._item[e.rollout_id] = e.item_summary
                while len(self._time) > MAX_OPEN:  # rollouts of cancelled groups never finish
                    oldest = next(iter(self._time))
                    self._time.pop(oldest)
                    self._item.pop(oldest, None)
        elif isinstance(e, ev.TurnFinished):
            with self._lock:
                t = self._time.get(e.rollout_id)
                if t is not None:
                    t["generation_s"] += max(0.0, e.latency_s)
                    t["llm_calls"] += 1
        elif isinstance(e, ev.ToolCallFinished):
            with self._lock:
                t = self._time.get(e.rollout_id)
                if t is not None:
                    t["tool_s"] += max(0.0, e.duration_s)
        elif isinstance(e, ev.RolloutFinished):
            with self._lock:
                t = self._time.pop(e.rollout_id, {})
                item = self._item.pop(e.rollout_id, "")
            self._write(
                {
                    "kind": "rollout",
                    "ts": e.ts,
                    "rollout_id": e.rollout_id,
                    "group_id": e.group_id,
                    "item": item,
                    "phase": e.phase,
                    "score": e.reward,
                    "turns": e.turns_used,
                    "finished_naturally": e.finished_naturally,
                    "tool_errors": e.tool_error_count,
                    "duration_s": round(e.duration_s, 4),
                    "generation_s": round(t.get("generation_s", 0.0), 4),
                    "tool_s": round(t.get("tool_s", 0.0), 4),
                    "reward_s": round(e.reward_s, 4),
                    "llm_calls": int(t.get("llm_calls", 0)),
                    "tokens": e.token_count,
                    "trainable_tokens": e.trainable_tokens,
                    "reward_details": e.reward_details,
                    "error": e.error,
                    "reward_error": e.reward_error,
                }
            )
        elif isinstance(e, (rev.ItemCompleted, ev.ItemDropped, ev.ItemFailed, rev.ItemCancelled)):
            outcome, reason = _fate(e)
            self._write({"kind": "group", "ts": e.ts, "group_id": e.group_id, "outcome": outcome, "reason": reason})

    def _write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, default=str) + "\n"
        with self._lock:
            if self._fp is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fp = self.path.open("a", encoding="utf-8")
            self._fp.write(line)
            self._fp.flush()

    def close(self) -> None:
        with self._lock:
            if self._fp is not None:
                self._fp.close()
                self._fp = None


def _fate(e: ev.Event) -> tuple[str, str]:
    if isinstance(e, rev.ItemCompleted):
        return "kept", ""
    if isinstance(e, ev.ItemDropped):
        return "dropped", e.reason
    if isinstance(e, ev.ItemFailed):
        return "failed", e.error_kind
    return "cancelled", getattr(e, "reason", "")
