"""Tool calls and errors: newest at the bottom, errors highlighted, errors-only toggle, sortable.

The rows are a function of ``ConsoleState.tool_rows`` and the view settings alone: the
newest ``MAX_ROWS`` calls that pass the filter (errors only: the errors, plus calls still
running since they may yet fail). The widget is a Line-API view (``LineTable``): it keeps
the shown calls as an index of sequence numbers into the state's rows, so a flood that
turns the whole window over costs a few list operations, and only the rows on screen are
made into text and rendered. The selection stays on its call while rows come and go.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from typing import Any

from rich.text import Text

from hermes_console.runtime.history import History
from hermes_console.runtime.state import ConsoleState
from hermes_console.runtime.views import ToolCallView
from hermes_console.ui.format import age, clock, duration, head
from hermes_console.ui.stream_filter import StreamFilter
from hermes_console.ui.widgets.keyed_table import Cell
from hermes_console.ui.widgets.line_table import LineTable

MAX_ROWS = 500  # the history screen keeps the rest
ARGS_CHARS = 32  # keeps duration and status on screen in a half-width panel


class ToolCallsTable(LineTable):
    COLUMNS = (
        ("time", "time", 8),
        ("rollout", "rollout", 10),
        ("tool", "tool", 9),
        ("args", "arguments", ARGS_CHARS),
        ("dur", "dur", 6),
        ("status", "status", 17),
    )
    HOSTED = True  # attached to several hosts: which one ran the call

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.errors_only = False
        self.filter = StreamFilter()
        self._views: dict[int, ToolCallView] = {}  # shown rows by seq, oldest first
        self._open: set[int] = set()  # shown rows drawn as running (their cells still change)
        self._last_seq = 0  # newest state row looked at (shown or filtered out)
        self._state: ConsoleState | None = None
        self._settings: tuple[object, ...] = ()
        self._history: History | None = None  # readable rollout ids (g0033-r2)
        self._now = 0.0  # the clock running calls' durations are drawn at

    @property
    def has_running(self) -> bool:
        """Rows whose duration still ticks (the screen redraws them once a second)."""
        return bool(self._open)

    # ------------------------------------------------------------------ updates

    def update_from(self, state: ConsoleState, now: float) -> None:
        """Bring the index up to ``state``: cost O(new + running rows), not O(shown rows);
        the rows' text is made only for the lines on screen, when they are drawn."""
        self._history = state.history
        if state is not self._state or self._settings != self._current_settings():
            self.rebuild(state, now)
            return
        self._now = now
        rows = state.tool_rows
        selected = self.selected_key()
        at_end = not self.row_count or self.cursor_row >= self.row_count - 1
        gone = self._left_the_state(rows[0].seq if rows else None)
        redraw = False
        for seq in list(self._open):
            if seq in gone:
                continue
            view = self._views[seq]
            if not self._wanted(view):
                gone.add(seq)  # errors only: it finished without an error
            else:
                redraw = True  # its duration ticks, or it just finished
                if view.status != "running":
                    self._open.discard(seq)
        fresh = [v for v in _newer_than(rows, self._last_seq) if self._wanted(v)][-MAX_ROWS:]
        self._last_seq = rows[-1].seq if rows else 0
        overflow = len(self._views) - len(gone) + len(fresh) - MAX_ROWS
        if overflow > 0:
            for seq in self._views:  # the oldest
                if overflow <= 0:
                    break
                if seq not in gone:
                    gone.add(seq)
                    overflow -= 1
        if fresh or gone:
            self._apply(gone, fresh)
            self._place_cursor(selected, at_end and bool(fresh))
        elif redraw:
            self.refresh()
        self._set_title(state)

    def rebuild(self, state: ConsoleState, now: float) -> None:
        """Re-list from state (first fill, filter / errors-only change; not per tick)."""
        self._history = state.history
        self._state, self._settings = state, self._current_settings()
        self._now = now
        self._views, self._open = {}, set()
        self._apply(set(), [v for v in state.tool_rows if self._wanted(v)][-MAX_ROWS:])
        self._last_seq = state.tool_rows[-1].seq if state.tool_rows else 0
        if self.row_count:
            self.move_cursor(row=self.row_count - 1)
        self._set_title(state)

    def _left_the_state(self, first: int | None) -> set[int]:
        """Shown rows older than the state's ring buffer (the oldest are first in ``_views``)."""
        gone: set[int] = set()
        if first is not None:
            for seq in self._views:
                if seq >= first:
                    break
                gone.add(seq)
        return gone

    def _apply(self, gone: set[int], fresh: list[ToolCallView]) -> None:
        """Drop ``gone``, add ``fresh`` (newer than every shown row): list operations only."""
        if len(gone) >= len(self._views):  # the whole window turned over
            self._views, self._open, order = {}, set(), []
        else:
            for seq in gone:
                del self._views[seq]
                self._open.discard(seq)
            order = [seq for seq in self._order if seq not in gone] if gone else list(self._order)
        for view in fresh:
            self._views[view.seq] = view
            if view.status == "running":
                self._open.add(view.seq)
        if self.sort_column is None:
            order.extend(view.seq for view in fresh)
        else:
            order = self._sorted(list(self._views))  # new calls land in their sorted place
        self._set_order(order)
        self._clamp_cursor()

    def _current_settings(self) -> tuple[object, ...]:
        return (self.filter.text, self.errors_only)

    def _place_cursor(self, selected: str | None, tail: bool) -> None:
        """The cursor stays on its call; on the last row it follows new calls (a tail)."""
        if not self.row_count:
            return
        if tail and self.sort_column is None:
            row: int | None = self.row_count - 1
        elif selected is not None:
            row = self.index_of(int(selected))
        else:
            return
        if row is not None and row != self.cursor_row:
            self.move_cursor(row=row)

    def selected_rollout(self) -> str | None:
        key = self.selected_key()
        view = self._views.get(int(key)) if key else None
        return view.rollout_id if view is not None else None

    @property
    def _rollout_of(self) -> dict[int, str]:
        """Rollout of each shown row by seq (attached consoles read the host from it)."""
        return {seq: view.rollout_id for seq, view in self._views.items()}

    # ------------------------------------------------------------------ helpers

    def _label(self, rollout_id: str) -> str:
        return self._history.label_of(rollout_id) if self._history is not None else rollout_id

    def _wanted(self, view: ToolCallView) -> bool:
        # A running call may still turn into an error: keep it while errors_only.
        if self.errors_only and view.status in ("ok", "cancelled"):
            return False
        return self.filter.matches(view.rollout_id, view.group_id)

    def _cells(self, key: int) -> tuple[Cell, ...]:
        view = self._views[key]
        return tuple(self._cell(view, column) for column, _, _ in self.COLUMNS)

    def _sort_cell(self, key: int, column: str) -> Cell:
        return self._cell(self._views[key], column)  # one column: a sort builds no other cell

    def _cell(self, view: ToolCallView, column: str) -> Cell:
        error = view.status == "error"
        if column == "time":
            return clock(view.ts)
        if column == "rollout":
            return Text(head(self._label(view.rollout_id), 10), style="bold")
        if column == "tool":
            return Text(view.tool_name, style="bold red" if error else "cyan")
        if column == "args":
            return Text(head(view.args_head, ARGS_CHARS), style="red" if error else "")
        if column == "dur":
            return self._duration(view, self._now)
        if column == "status":
            return self._status(view)
        if column == "host" and self.host_column is not None:
            return Text(self.host_column.host_of(view.rollout_id), style="bold")
        raise KeyError(f"ToolCallsTable has no column {column!r}; expected one of {[c for c, _, _ in self.COLUMNS]}")

    def _stamp(self, key: int) -> Hashable:
        view = self._views[key]
        ticking = int(self._now - view.ts) if view.duration_s is None else None
        return (view.status, view.duration_s, view.error_kind, view.exit_code, ticking, self._label(view.rollout_id))

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
