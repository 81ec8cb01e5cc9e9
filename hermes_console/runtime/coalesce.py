"""Coalescing for the runtime→UI channel: a run of high-rate events folded into one item.

When the UI falls behind, :class:`~hermes_console.runtime.queue.EventQueue` stops
appending the high-rate kinds (turns, tool calls, sandbox commands, loop lag, server
stats, logs, eval progress) one by one and folds them into a :class:`Coalesced`
segment instead. ``ConsoleState.apply`` applies a segment in one step with the same
result for every counter as applying its events one by one:

- stream lines and tool rows beyond what a screen can show become counts (the last
  ``keep_lines`` / ``keep_rows`` are kept whole); ``stream_seq``/``tool_seq`` and the
  totals still advance by exactly what was emitted;
- per-entity updates keep only the latest (a sandbox's state, a rollout's turn and
  current tool, the latest server snapshot, an evaluation's progress);
- error counts, per-kind event counts, ``events_applied`` and the panel versions add up.

Why this is exact: lifecycle events (items, groups, rollouts, sandboxes created and
closed, phase switches, ...) are never folded, and the queue folds an entity's events
only into a segment that no lifecycle event about that entity is queued behind (see
queue.py). So for each rollout or sandbox a segment touches, nothing about it is born,
finishes or is evicted between its events there, and applying the segment before later
lifecycle events about other entities gives the same counters. A tool
call is folded only with its start; a finish whose start is not in the segment goes
through the queue as a plain event. Everything a segment holds per entity is bounded
by the entities alive at once (the env's concurrency), the rest by ``keep_*``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from environments import events as ev
from hermes_console.runtime import events as rev
from hermes_console.runtime import state as st
from hermes_console.runtime.state import ConsoleState
from hermes_console.runtime.views import TurnView

COALESCABLE = frozenset(
    {
        ev.TurnStarted.kind,
        ev.TurnFinished.kind,
        ev.ToolCallStarted.kind,
        ev.ToolCallFinished.kind,
        ev.SandboxCommandStarted.kind,
        ev.SandboxCommandFinished.kind,
        rev.LoopLag.kind,
        rev.ServerStats.kind,
        rev.LogRecord.kind,
        rev.EvalProgress.kind,
    }
)
DEFAULT_KEEP_LINES = 200
DEFAULT_KEEP_ROWS = 200


class _SandboxTally:
    """One sandbox's command events in a segment: counts plus the latest start/finish."""

    __slots__ = (
        "first_ts",
        "commands",
        "timeouts",
        "last_finish",
        "start_after",
        "timeouts_tool_none",
        "timeouts_unknown",
    )

    def __init__(self, ts: float) -> None:
        self.first_ts = ts
        self.commands = 0
        self.timeouts = 0
        self.last_finish: ev.SandboxCommandFinished | None = None
        self.start_after: ev.SandboxCommandStarted | None = None  # a start later than the last finish
        self.timeouts_tool_none = 0  # timed out while its rollout had no tool call open (known here)
        self.timeouts_unknown = 0  # timed out; the rollout's tool state is whatever the state says


class Coalesced:
    """A folded run of events; applied by ``ConsoleState.apply`` via :meth:`apply_to`."""

    kind = "coalesced"

    def __init__(self, keep_lines: int = DEFAULT_KEEP_LINES, keep_rows: int = DEFAULT_KEEP_ROWS) -> None:
        self.count = 0
        self.kinds: dict[str, int] = {}  # plain dicts: a segment is built on the env's thread, keep it cheap
        self.drained = False  # taken by the consumer: nothing may fold into it any more
        self.first_ts: float | None = None
        self.ts = 0.0  # latest event time
        # stream lines: total and the newest few (ts, rollout_id, kind, text)
        self.lines = 0
        self.kept_lines: deque[tuple[float, str, str, str]] = deque(maxlen=keep_lines)
        # tool calls: started here and still open; finished here (start + finish)
        self.open_calls: dict[tuple[str, str], ev.ToolCallStarted] = {}
        self.closed_calls = 0
        self.kept_rows: deque[tuple[ev.ToolCallStarted, ev.ToolCallFinished]] = deque(maxlen=keep_rows)
        self.tool_errors = 0
        self.errors: dict[str, int] = {}
        self.rollout_tool_errors: dict[str, int] = {}
        self.current_tool: dict[str, str | None] = {}  # rollout -> its open tool after this segment
        # turns: the latest start and finish per rollout
        self.turns: dict[str, tuple[ev.TurnStarted | None, ev.TurnFinished | None]] = {}
        self.sandboxes: dict[str, _SandboxTally] = {}
        self.loop_lag: rev.LoopLag | None = None
        self.loop_lag_max = 0.0
        self.servers_first: rev.ServerStats | None = None
        self.servers_last: rev.ServerStats | None = None
        self.server_errors = 0  # increases between the snapshots of this segment
        self.logs: deque[rev.LogRecord] | None = None  # made on the first log record
        self.log_errors_not_kept = 0
        self.eval_progress: dict[str, rev.EvalProgress] = {}

    # ------------------------------------------------------------------ folding (producer side)

    def add(self, event: Any) -> bool:
        """Fold ``event`` in; False if it cannot be folded (the caller queues it as is)."""
        kind = type(event).kind
        folder = _FOLDERS.get(kind)
        if folder is None or not folder(self, event):
            return False
        self.count += 1
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        ts = event.ts
        if self.first_ts is None:
            self.first_ts = ts
        if ts > self.ts:
            self.ts = ts
        return True

    def _error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1

    def _line(self, ts: float, rollout_id: str, kind: str, text: str) -> None:
        self.lines += 1
        self.kept_lines.append((ts, rollout_id, kind, text))

    def _fold_turn_started(self, e: ev.TurnStarted) -> bool:
        self.turns[e.rollout_id] = (e, None)
        return True

    def _fold_turn_finished(self, e: ev.TurnFinished) -> bool:
        started, _ = self.turns.get(e.rollout_id, (None, None))
        self.turns[e.rollout_id] = (started if started is not None and started.turn == e.turn else None, e)
        if e.error:
            self._error("api_error")
        for kind, text in st.turn_lines(e):
            self._line(e.ts, e.rollout_id, kind, text)
        return True

    def _fold_tool_started(self, e: ev.ToolCallStarted) -> bool:
        key = (e.rollout_id, e.call_id)
        if key in self.open_calls:
            return False  # a repeated call id: let the reducer decide
        self.open_calls[key] = e
        self.current_tool[e.rollout_id] = e.tool_name
        self._line(e.ts, e.rollout_id, "tool", f"{e.tool_name}({e.args_head})")
        return True

    def _fold_tool_finished(self, e: ev.ToolCallFinished) -> bool:
        start = self.open_calls.pop((e.rollout_id, e.call_id), None)
        if start is None:
            return False  # its start is already queued or was never sent: the reducer matches it
        self.closed_calls += 1
        self.kept_rows.append((start, e))
        self.current_tool[e.rollout_id] = None
        if e.error:
            self.rollout_tool_errors[e.rollout_id] = self.rollout_tool_errors.get(e.rollout_id, 0) + 1
            self.tool_errors += 1
            self._error(f"tool:{e.error_kind or 'error'}")
            self._line(e.ts, e.rollout_id, "error", f"{e.tool_name} failed: {e.error}")
        else:
            self._line(e.ts, e.rollout_id, "result", e.result_head)
        return True

    def _sandbox(self, task_id: str, ts: float) -> _SandboxTally:
        sb = self.sandboxes.get(task_id)
        if sb is None:
            sb = self.sandboxes[task_id] = _SandboxTally(ts)
        return sb

    def _fold_cmd_started(self, e: ev.SandboxCommandStarted) -> bool:
        self._sandbox(e.task_id, e.ts).start_after = e
        return True

    def _fold_cmd_finished(self, e: ev.SandboxCommandFinished) -> bool:
        sb = self._sandbox(e.task_id, e.ts)
        sb.commands += 1
        sb.last_finish = e
        sb.start_after = None
        if e.timed_out:
            sb.timeouts += 1
            # Counted as an error only outside a tool call (see the reducer); a rollout's sandbox has its id.
            if e.task_id in self.current_tool:
                sb.timeouts_tool_none += self.current_tool[e.task_id] is None
            else:
                sb.timeouts_unknown += 1
        return True

    def _fold_loop_lag(self, e: rev.LoopLag) -> bool:
        self.loop_lag = e
        self.loop_lag_max = max(self.loop_lag_max, e.lag_ms)
        return True

    def _fold_server_stats(self, e: rev.ServerStats) -> bool:
        if self.servers_first is None:
            self.servers_first = e
        else:
            assert self.servers_last is not None
            self.server_errors += st.server_error_increase(self.servers_last.servers, e.servers)
        self.servers_last = e
        return True

    def _fold_log(self, e: rev.LogRecord) -> bool:
        logs = self.logs
        if logs is None:
            logs = self.logs = deque(maxlen=st.MAX_LOGS)
        if len(logs) == logs.maxlen and logs[0].level in ("ERROR", "CRITICAL"):
            self.log_errors_not_kept += 1  # the reducer counts it even though its line scrolls away
        logs.append(e)
        return True

    def _fold_eval_progress(self, e: rev.EvalProgress) -> bool:
        self.eval_progress[e.eval_id] = e
        return True

    # ------------------------------------------------------------------ applying (UI side)

    def apply_to(self, s: ConsoleState) -> None:
        if self.count == 0:
            return
        # Timeouts whose tool state was not seen here depend on the state before this segment.
        for task_id, sb in self.sandboxes.items():
            if not sb.timeouts:
                continue
            rollout = s.rollouts.get(task_id)  # no rollout is born or evicted inside a segment
            if rollout is None:
                counted = sb.timeouts  # no rollout view: the reducer counts every timeout
            else:
                counted = sb.timeouts_tool_none + (sb.timeouts_unknown if rollout.current_tool is None else 0)
            if counted:
                s.errors_by_kind["sandbox_timeout"] += counted
        self._apply_turns(s)
        self._apply_tools(s)
        self._apply_sandboxes(s)
        self._apply_stream(s)
        self._apply_latest(s)
        for kind, n in self.errors.items():
            s.errors_by_kind[kind] += n
        s.events_applied += self.count
        s.version += self.count
        for kind, n in self.kinds.items():
            for section in st._SECTIONS.get(kind, ()):
                setattr(s, section, getattr(s, section) + n)
        if s.first_ts is None:
            s.first_ts = self.first_ts
        s.last_ts = self.ts if s.last_ts is None else max(s.last_ts, self.ts)

    def _apply_turns(self, s: ConsoleState) -> None:
        for rollout_id, (started, finished) in self.turns.items():
            r = s.rollouts.get(rollout_id)
            if r is None:
                continue
            if started is not None:
                r.turn = started.turn
                r.turns.append(TurnView(turn=started.turn, started_at=started.ts))
            if finished is not None:
                st.apply_turn_finished(r, finished)

    def _apply_tools(self, s: ConsoleState) -> None:
        not_kept = self.closed_calls - len(self.kept_rows)
        s.tool_seq += not_kept  # rows not shown still take their sequence numbers
        s.tool_calls_total += not_kept
        for start, finish in self.kept_rows:
            row = st._new_tool_row(s, start, start.args_head)
            row.status = "error" if finish.error else "ok"
            row.duration_s = finish.duration_s
            row.result_head = finish.result_head
            row.error = finish.error
            row.error_kind = finish.error_kind
            row.exit_code = finish.exit_code
        for start in self.open_calls.values():
            s._open_tools[f"{start.rollout_id}/{start.call_id}"] = st._new_tool_row(s, start, start.args_head)
        s.tool_errors_total += self.tool_errors
        for rollout_id, tool in self.current_tool.items():
            r = s.rollouts.get(rollout_id)
            if r is not None:
                r.current_tool = tool
                r.tool_errors += self.rollout_tool_errors.get(rollout_id, 0)

    def _apply_sandboxes(self, s: ConsoleState) -> None:
        for task_id, tally in self.sandboxes.items():
            sb = st._sandbox(s, task_id, tally.first_ts)
            done = tally.last_finish
            if done is not None:
                if sb.state != "closed":
                    sb.state = "idle"
                sb.running_command = None
                sb.running_since = None
                sb.running_timeout_s = None
                sb.last_activity = done.ts
                sb.last_exit_code = done.exit_code
            sb.commands += tally.commands
            sb.timeouts += tally.timeouts
            start = tally.start_after
            if start is not None:
                sb.state = "running"
                sb.running_command = start.command
                sb.running_since = start.ts
                sb.running_timeout_s = start.timeout_s
                sb.last_activity = start.ts

    def _apply_stream(self, s: ConsoleState) -> None:
        s.stream_seq += self.lines - len(self.kept_lines)  # lines beyond the kept ones are a count
        for ts, rollout_id, kind, text in self.kept_lines:
            s._push_stream(ts, rollout_id, s._group_of(rollout_id), kind, text)

    def _apply_latest(self, s: ConsoleState) -> None:
        if self.loop_lag is not None:
            s.loop_lag_ms = self.loop_lag.lag_ms
            s.loop_lag_max_ms = max(s.loop_lag_max_ms, self.loop_lag_max)
        if self.servers_first is not None and self.servers_last is not None:
            st._on_server_stats(s, self.servers_first)
            if self.server_errors:
                s.errors_by_kind["server_http_error"] += self.server_errors
            s.servers = [dict(x) for x in self.servers_last.servers]
        if self.log_errors_not_kept:
            s.errors_by_kind["log_error"] += self.log_errors_not_kept
        for record in self.logs or ():
            st._on_log(s, record)
        for progress in self.eval_progress.values():
            st._on_eval_progress(s, progress)


def entity_of(event: Any) -> str | None:
    """The rollout or sandbox an event is about (they share ids), None for run-wide ones."""
    return getattr(event, "rollout_id", None) or getattr(event, "task_id", None)


_FOLDERS: dict[str, Callable[[Coalesced, Any], bool]] = {
    ev.TurnStarted.kind: Coalesced._fold_turn_started,
    ev.TurnFinished.kind: Coalesced._fold_turn_finished,
    ev.ToolCallStarted.kind: Coalesced._fold_tool_started,
    ev.ToolCallFinished.kind: Coalesced._fold_tool_finished,
    ev.SandboxCommandStarted.kind: Coalesced._fold_cmd_started,
    ev.SandboxCommandFinished.kind: Coalesced._fold_cmd_finished,
    rev.LoopLag.kind: Coalesced._fold_loop_lag,
    rev.ServerStats.kind: Coalesced._fold_server_stats,
    rev.LogRecord.kind: Coalesced._fold_log,
    rev.EvalProgress.kind: Coalesced._fold_eval_progress,
}
