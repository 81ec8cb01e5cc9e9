"""Rollouts: the history of finished rollouts, sortable and filterable.

Reached with `h` (all rollouts, or the focused group's), and from the reward
histogram (enter on a bin: the rollouts whose score fell in it). `enter` opens a
rollout's transcript. Memory keeps the last ``MAX_RECORDS`` rollouts; the full
record of every group is on disk (groups.jsonl / dropped.jsonl in the run dir).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.events import Resize
from textual.widgets import DataTable, Input, Static

from hermes_console.runtime.history import MAX_RECORDS, RolloutRecord, bin_index
from hermes_console.runtime.state import ConsoleState
from hermes_console.ui.bindings import bindings_for
from hermes_console.ui.format import duration, head, visible
from hermes_console.ui.screens.drilldown import DrillDownScreen
from hermes_console.ui.throttle import Throttle
from hermes_console.ui.widgets.footer import Footer

# (key, label, width, sort key)
COLUMNS: list[tuple[str, str, int | None, Callable[[RolloutRecord], Any]]] = [
    ("id", "rollout", 11, lambda r: r.label),
    ("item", "item / task", 30, lambda r: r.item.lower()),
    ("score", "score", 6, lambda r: -math.inf if r.score is None else r.score),
    ("turns", "turns", 5, lambda r: r.turns),
    ("errors", "tool err", 8, lambda r: r.tool_errors),
    ("duration", "duration", 8, lambda r: r.duration_s),
    ("phase", "ph", 2, lambda r: r.phase),
    ("outcome", "outcome", 26, lambda r: (r.outcome, r.drop_reason)),
    ("finished", "finished", 8, lambda r: r.finished_at),
    ("error", "error", None, lambda r: r.error),
]
SORT_KEYS = [c[0] for c in COLUMNS]
QUICK = {"zero": "score == 0", "errors": "errors", "dropped": "dropped"}


@dataclass(frozen=True)
class RolloutQuery:
    """What the table shows: every field narrows the rows."""

    text: str = ""
    group_id: str | None = None
    score_bin: tuple[int, int, float, float] | None = None  # index, bins, lo, hi of the reward histogram
    quick: str | None = None  # zero | errors | dropped
    sort: str = "finished"
    descending: bool = True

    def matches(self, r: RolloutRecord) -> bool:
        if self.group_id is not None and r.group_id != self.group_id:
            return False
        if self.score_bin is not None:
            index, bins, lo, hi = self.score_bin
            if r.score is None or bin_index(r.score, bins, lo, hi) != index:
                return False
        if self.quick == "zero" and r.score != 0:
            return False
        if self.quick == "errors" and not (r.tool_errors or r.error or r.status == "error"):
            return False
        if self.quick == "dropped" and r.outcome not in ("dropped", "failed", "cancelled"):
            return False
        if self.text:
            haystack = r.search_text()
            return all(word in haystack for word in self.text.lower().split())
        return True

    def describe(self, group_label: str = "") -> str:
        parts = []
        if self.group_id is not None:
            parts.append(f"group {group_label or self.group_id}")
        if self.score_bin is not None:
            index, bins, lo, hi = self.score_bin
            width = (hi - lo) / bins
            start = "" if index == 0 else f"{lo + index * width:.2f} ≤ "
            end = "" if index == bins - 1 else f" < {lo + (index + 1) * width:.2f}"
            parts.append(f"{start}score{end} (histogram bin {index + 1}/{bins})")
        if self.quick:
            parts.append(QUICK[self.quick])
        if self.text:
            parts.append(f"text “{self.text}”")
        return " · ".join(parts) or "all"


def select(records: list[RolloutRecord], query: RolloutQuery) -> list[RolloutRecord]:
    """The records the query shows, in its order (pure: tested without Textual)."""
    column = next(c for c in COLUMNS if c[0] == query.sort)
    rows = [r for r in records if query.matches(r)]
    rows.sort(key=lambda r: r.label)  # stable tie order
    rows.sort(key=column[3], reverse=query.descending)
    return rows


def outcome_cell(r: RolloutRecord) -> Text:
    style = {
        "kept": "green",
        "dropped": "yellow",
        "failed": "bold red",
        "cancelled": "dim",
        "pending": "cyan",
        "evaluated": "blue",
    }.get(r.outcome, "")
    text = Text(r.outcome, style=style)
    if r.drop_reason:
        text.append(f" {r.drop_reason}", style="dim")
    return text


def score_cell(r: RolloutRecord) -> Text:
    if r.score is None:
        return Text("–", style="dim")
    style = "bold green" if r.score >= 0.999 else "red" if r.score <= 0 else ""
    return Text(f"{r.score:.2f}", style=style)


class RolloutsScreen(DrillDownScreen):
    BINDINGS = bindings_for("rollouts")

    def __init__(self, query: RolloutQuery | None = None) -> None:
        super().__init__(classes="drilldown")
        self.query_spec = query or RolloutQuery()
        self._drawn: tuple[object, ...] | None = None
        self._throttle = Throttle()
        self.shown: list[str] = []  # rollout ids in table order

    def compose(self) -> ComposeResult:
        yield Static("", id="rollouts-header", classes="drill-header")
        yield Input(
            placeholder="filter: words over task / item / ids / errors (enter to apply, esc to close)",
            id="rollouts-filter",
            classes="-hidden",
        )
        yield DataTable(id="rollouts-table", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#rollouts-table", DataTable)
        for key, label, width, _ in COLUMNS:
            table.add_column(label, key=key, width=width)
        self._fit_columns(self.app.size.width)
        table.focus()
        self.ready = True
        self.refresh_view(self.console.state, self.console.now())

    # ------------------------------------------------------------------ drawing

    def on_resize(self, event: Resize) -> None:
        self._fit_columns(event.size.width)

    def _fit_columns(self, width: int) -> None:
        """Free text shrinks first: the item column gives way so score / outcome stay on screen."""
        table = self.query_one("#rollouts-table", DataTable)
        item_width = max(10, min(30, width - 96))
        for column_key, column in table.columns.items():
            if column_key.value == "item" and column.width != item_width:
                column.width = item_width
                column.auto_width = False
                table.refresh(layout=True)
                self._drawn = None  # cells are cropped when added: rebuild at the new width

    def refresh_view(self, state: ConsoleState, now: float) -> None:
        key = (state.history.records_version, self.query_spec)
        if key == self._drawn:
            return
        # A busy run finishes rollouts every tick: rebuild a long table at most once a second
        # (a changed query redraws at once).
        if self._drawn is not None and self._drawn[1] == self.query_spec and not self._throttle.due():
            self._throttle.later(self, lambda: self.refresh_view(self.console.state, self.console.now()))
            return
        self._drawn = key
        records = select(list(state.history.records.values()), self.query_spec)
        self._fill(records)
        self.query_one("#rollouts-header", Static).update(self._header(state, records))

    def _fill(self, records: list[RolloutRecord]) -> None:
        table = self.query_one("#rollouts-table", DataTable)
        selected = self.selected_rollout()
        table.clear()
        for r in records:
            table.add_row(*self._cells(r), key=r.rollout_id)
        self.shown = [r.rollout_id for r in records]
        self._label_columns(table)
        if selected in self.shown:  # the cursor stays on its rollout, wherever it moved
            table.move_cursor(row=self.shown.index(selected), animate=False)

    def _label_columns(self, table: DataTable) -> None:
        for key, label, _, _ in COLUMNS:
            arrow = (" ▼" if self.query_spec.descending else " ▲") if key == self.query_spec.sort else ""
            for column_key, column in table.columns.items():
                if column_key.value == key:
                    column.label = Text(label + arrow, style="bold" if arrow else "")

    @staticmethod
    def _cells(r: RolloutRecord) -> tuple[object, ...]:
        from hermes_console.ui.format import clock

        return (
            Text(r.label, style="bold"),
            head(visible(r.item) or "–", 60),
            score_cell(r),
            str(r.turns),
            Text(str(r.tool_errors), style="red" if r.tool_errors else "dim"),
            duration(r.duration_s),
            str(r.phase),
            outcome_cell(r),
            clock(r.finished_at),
            Text(head(visible(r.error), 120), style="red") if r.error else Text("", style="dim"),
        )

    def _header(self, state: ConsoleState, records: list[RolloutRecord]) -> Text:
        q = self.query_spec
        total = len(state.history.records)
        text = Text("Rollouts", style="bold")
        text.append(f"   {len(records)} shown of {total} in memory", style="")
        if state.history.totals["rollouts"] > total or total >= MAX_RECORDS:
            text.append(f" (last {MAX_RECORDS}; every rollout is on disk: rollouts.jsonl in the run dir)", style="dim")
        text.append("\nfilter ", style="dim")
        text.append(q.describe(state.history.group_label_of(q.group_id or "")), style="bold cyan")
        text.append("   sort ", style="dim")
        text.append(f"{q.sort} {'▼' if q.descending else '▲'}")
        scores = [r.score for r in records if r.score is not None]
        if scores:
            text.append(f"   mean score {sum(scores) / len(scores):.3f}", style="dim")
        return text

    # ------------------------------------------------------------------ queries

    def selected_rollout(self) -> str | None:
        table = self.query_one("#rollouts-table", DataTable)
        if not table.row_count:
            return None
        try:
            row_key, _ = table.coordinate_to_cell_key(table.cursor_coordinate)
        except Exception:  # noqa: BLE001 - the cursor can point past a just-removed row
            return None
        return row_key.value

    def set_query(self, **changes: object) -> None:
        self.query_spec = replace(self.query_spec, **changes)  # type: ignore[arg-type]
        self.refresh_view(self.console.state, self.console.now())

    # ------------------------------------------------------------------ actions

    def action_open_rollout(self) -> None:
        rollout_id = self.selected_rollout()
        if rollout_id is None:
            self.app.notify("No rollout matches the filter.", severity="warning")
            return
        from hermes_console.ui.screens.transcript import TranscriptScreen

        self.app.push_screen(TranscriptScreen(rollout_id))

    @on(DataTable.RowSelected, "#rollouts-table")
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_open_rollout()

    @on(DataTable.HeaderSelected, "#rollouts-table")
    def _header_selected(self, event: DataTable.HeaderSelected) -> None:
        event.stop()
        self.sort_by(str(event.column_key.value))

    def sort_by(self, key: str) -> None:
        """Sort by ``key``; the same column again reverses the order."""
        if key == self.query_spec.sort:
            self.set_query(descending=not self.query_spec.descending)
        else:
            self.set_query(sort=key, descending=key in ("score", "errors", "duration", "turns", "finished"))

    def action_sort_next(self) -> None:
        index = SORT_KEYS.index(self.query_spec.sort)
        self.sort_by(SORT_KEYS[(index + 1) % len(SORT_KEYS)])

    def action_sort_reverse(self) -> None:
        self.set_query(descending=not self.query_spec.descending)

    def _quick(self, name: str) -> None:
        self.set_query(quick=None if self.query_spec.quick == name else name)

    def action_quick_zero(self) -> None:
        self._quick("zero")

    def action_quick_errors(self) -> None:
        self._quick("errors")

    def action_quick_dropped(self) -> None:
        self._quick("dropped")

    def action_clear_filters(self) -> None:
        self.set_query(text="", group_id=None, score_bin=None, quick=None)
        self.query_one("#rollouts-filter", Input).value = ""

    def action_filter_rollouts(self) -> None:
        box = self.query_one("#rollouts-filter", Input)
        box.remove_class("-hidden")
        box.value = self.query_spec.text
        box.focus()

    @on(Input.Submitted, "#rollouts-filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.set_query(text=event.value.strip())
        self._close_filter()

    def _close_filter(self) -> None:
        self.query_one("#rollouts-filter", Input).add_class("-hidden")
        self.query_one("#rollouts-table", DataTable).focus()

    def action_back(self) -> None:
        box = self.query_one("#rollouts-filter", Input)
        if not box.has_class("-hidden"):
            self._close_filter()  # escape closes the filter box first
            return
        super().action_back()


def bin_query(index: int, bins: int, lo: float, hi: float) -> RolloutQuery:
    """The rollouts of reward histogram bin ``index``, best first."""
    return RolloutQuery(score_bin=(index, bins, lo, hi), sort="score")
