"""Tool calls and errors: newest at the bottom, errors highlighted, errors-only toggle."""

from __future__ import annotations

from collections import deque

from rich.text import Text
from textual.widgets import DataTable

from hermes_console.runtime.history import History
from hermes_console.runtime.state import ConsoleState
from hermes_console.runtime.views import ToolCallView
from hermes_console.ui.format import age, clock, duration, head
from hermes_console.ui.stream_filter import StreamFilter
from hermes_console.ui.widgets.keyed_table import HostColumn, host_column_of

MAX_ROWS = 500
ARGS_CHARS = 32  # keeps duration and status on screen in a half-width panel


class ToolCallsTable(DataTable):
    """Appends new calls by sequence number; updates only rows still running."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.errors_only = False
        self.filter = StreamFilter()
        self._last_seq = 0
        self._open: dict[int, ToolCallView] = {}
        self._order: deque[int] = deque()
        self._rollout_of: dict[int, str] = {}
        self._running_cells: dict[int, str] = {}  # last drawn duration of still-running calls
        self.host_column: HostColumn | None = None
        self._history: History | None = None  # readable rollout ids (g0033-r2)

    def on_mount(self) -> None:
        self.host_column = host_column_of(self.app)  # attached to several hosts: which one ran the call
        if self.host_column is not None:
            self.add_column("host", key="host", width=self.host_column.host_width)
        self.add_column("time", key="time", width=8)
        self.add_column("rollout", key="rollout", width=10)
        self.add_column("tool", key="tool", width=9)
        self.add_column("arguments", key="args", width=ARGS_CHARS)
        self.add_column("dur", key="dur", width=6)
        self.add_column("status", key="status", width=17)

    @property
    def has_running(self) -> bool:
        """Rows whose duration still ticks (the screen redraws them once a second)."""
        return bool(self._open)

    # ------------------------------------------------------------------ updates

    def update_from(self, state: ConsoleState, now: float, max_new: int = 200) -> None:
        self._history = state.history
        at_end = self.cursor_row >= self.row_count - 1
        fresh = _newer_than(state.tool_rows, self._last_seq)
        if fresh:
            self._last_seq = fresh[-1].seq
        # The first fill shows a full page of history; later ticks are capped so a flood stays cheap.
        limit = MAX_ROWS if not self._order else max_new
        if self._order and len(fresh) > limit:
            # A flood: DataTable.remove_row is O(rows), so start over with the newest page
            # instead of trimming hundreds of rows one by one.
            self._reset()
        for view in fresh[-limit:]:
            self._append(view, now)
        for seq, view in list(self._open.items()):
            self._refresh_row(seq, view, now)
        self._trim()
        if fresh and at_end and self.row_count:
            self.move_cursor(row=self.row_count - 1, animate=False)
        self._set_title(state)

    def rebuild(self, state: ConsoleState, now: float) -> None:
        """Re-list after a filter change (not per tick)."""
        self._history = state.history
        self._reset()
        matching = [v for v in state.tool_rows if self._wanted(v)][-MAX_ROWS:]
        for view in matching:
            self._append(view, now)
        self._last_seq = state.tool_seq
        if self.row_count:
            self.move_cursor(row=self.row_count - 1, animate=False)
        self._set_title(state)

    def _reset(self) -> None:
        self.clear()
        self._open.clear()
        self._order.clear()
        self._rollout_of.clear()
        self._running_cells.clear()

    def selected_rollout(self) -> str | None:
        if not self.row_count:
            return None
        row_key, _ = self.coordinate_to_cell_key(self.cursor_coordinate)
        return self._rollout_of.get(int(row_key.value or 0))

    # ------------------------------------------------------------------ helpers

    def _label(self, rollout_id: str) -> str:
        return self._history.label_of(rollout_id) if self._history is not None else rollout_id

    def _wanted(self, view: ToolCallView) -> bool:
        if self.errors_only and view.status != "error":
            return False
        return self.filter.matches(view.rollout_id, view.group_id)

    def _append(self, view: ToolCallView, now: float) -> None:
        # A running call may still turn into an error: keep it open even when errors_only.
        if not self.filter.matches(view.rollout_id, view.group_id):
            return
        if self.errors_only and view.status in ("ok", "cancelled"):
            return
        key = str(view.seq)
        error = view.status == "error"
        host = () if self.host_column is None else (Text(self.host_column.host_of(view.rollout_id), style="bold"),)
        self.add_row(
            *host,
            clock(view.ts),
            Text(head(self._label(view.rollout_id), 10), style="bold"),
            Text(view.tool_name, style="bold red" if error else "cyan"),
            Text(head(view.args_head, ARGS_CHARS), style="red" if error else ""),
            self._duration(view, now),
            self._status(view),
            key=key,
        )
        self._order.append(view.seq)
        self._rollout_of[view.seq] = view.rollout_id
        if view.status == "running":
            self._open[view.seq] = view

    def _refresh_row(self, seq: int, view: ToolCallView, now: float) -> None:
        key = str(seq)
        if key not in self.rows:
            self._open.pop(seq, None)
            return
        if self.errors_only and view.status in ("ok", "cancelled"):
            self.remove_row(key)
            self._open.pop(seq, None)
            return
        if view.status == "running":
            cell = self._duration(view, now)
            if self._running_cells.get(seq) != cell.plain:
                self._running_cells[seq] = cell.plain
                self.update_cell(key, "dur", cell)
            return
        self._running_cells.pop(seq, None)
        self.update_cell(key, "dur", self._duration(view, now))
        self.update_cell(key, "status", self._status(view))
        if view.status == "error":
            self.update_cell(key, "tool", Text(view.tool_name, style="bold red"))
            self.update_cell(key, "args", Text(head(view.args_head, ARGS_CHARS), style="red"))
        self._open.pop(seq, None)

    def _trim(self) -> None:
        while len(self._order) > MAX_ROWS:
            seq = self._order.popleft()
            self._rollout_of.pop(seq, None)
            self._open.pop(seq, None)
            if str(seq) in self.rows:
                self.remove_row(str(seq))

    @staticmethod
    def _duration(view: ToolCallView, now: float) -> Text:
        if view.duration_s is None:
            return Text(age(now - view.ts), style="cyan")
        return Text(duration(view.duration_s))

    @staticmethod
    def _status(view: ToolCallView) -> Text:
        if view.status == "running":
            return Text("… running", style="cyan")
        if view.status == "cancelled":
            return Text("– cancelled", style="yellow")
        if view.status == "error":
            label = view.error_kind or "error"
            if view.exit_code is not None:
                label += f" ({view.exit_code})"
            return Text(f"✖ {label}", style="bold white on red")
        exit_code = f" ({view.exit_code})" if view.exit_code is not None else ""
        return Text(f"ok{exit_code}", style="green")

    def _set_title(self, state: ConsoleState) -> None:
        flags: list[str] = []
        if self.errors_only:
            flags.append("errors only")
        if self.filter:
            flags.append(f"filter: {self.filter.text}")
        suffix = f" — {' · '.join(flags)}" if flags else ""
        title = f"Tool calls ({state.tool_calls_total}, {state.tool_errors_total} errors){suffix}"
        if self.border_title != title:
            self.border_title = title


def _newer_than(rows: deque[ToolCallView], seq: int) -> list[ToolCallView]:
    """Rows with a sequence number above ``seq``, oldest first, without scanning the whole deque."""
    out: list[ToolCallView] = []
    for view in reversed(rows):
        if view.seq <= seq:
            break
        out.append(view)
    out.reverse()
    return out
