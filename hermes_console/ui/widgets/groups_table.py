"""Active groups: item, rollouts done/total, stage, age against worker_timeout."""

from __future__ import annotations

from typing import Any

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.strip import Strip

from hermes_console.runtime.state import ConsoleState
from hermes_console.runtime.views import GroupView
from hermes_console.ui.format import age, budget, head, level_style
from hermes_console.ui.widgets.keyed_table import Cell, KeyedTable, Row
from hermes_console.ui.widgets.status_bar import STATUS_STYLES

WAITING_STYLE = Style.parse(STATUS_STYLES["loading"])  # the status bar's "LOADING" look


class GroupsTable(KeyedTable):
    HOSTED = True
    COLUMNS = (
        ("group", "group", 9),
        ("item", "item", 36),
        ("rollouts", "done", 5),
        ("stage", "stage", 11),
        ("age", "age / timeout", 14),
    )
    # Everything but the free-text item column, with each column's padding (1 + 1) and the
    # panel's border and scrollbar: the item column gets what is left (MainScreen._apply_size).
    FIXED_WIDTH = 9 + 5 + 11 + 14 + 2 * 5 + 4

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # group id -> (what its first columns show, their cells) and (what its age shows, that cell):
        # a redraw builds cells only for groups that changed; the same row object is handed to
        # ``sync`` again for the others, which skips them without comparing cells.
        self._heads: dict[str, tuple[tuple[object, ...], Row]] = {}
        self._ages: dict[str, tuple[tuple[object, ...], Cell]] = {}
        self._rows: dict[str, tuple[Row, Cell, Row]] = {}  # group id -> (head cells, age cell, the row)
        self.cell_builds = 0  # rows whose first columns were built (tests count them)
        self.age_builds = 0
        self.waiting_note = ""  # drawn under the header while there are no rows (the env loading)

    def show_waiting(self, note: str) -> None:
        """Say what the run waits for (the env loading) on the empty table's first line.

        Drawn by the table itself: Textual's loading indicator covers the widget with another
        and lays the whole screen out when it comes and again when it goes."""
        if note != self.waiting_note:
            self.waiting_note = note
            self.refresh()

    def render_line(self, y: int) -> Strip:
        if y == 1 and self.waiting_note and not self.row_count:
            base = self.rich_style
            note = Segment(f" ⋯ {self.waiting_note}", base + WAITING_STYLE)
            return Strip([note]).adjust_cell_length(self.size.width, base)
        return super().render_line(y)

    def update_from(self, state: ConsoleState, now: float) -> None:
        timeout = state.run.worker_timeout_s
        labels = state.history.group_label_of
        heads, ages, last = self._heads, self._ages, self._rows
        rows: dict[str, Row] = {}
        shown: dict[str, tuple[Row, Cell, Row]] = {}
        for group in state.active_groups():
            gid = group.group_id
            label = labels(gid)
            key = (
                label,
                group.item_summary,
                group.rollouts_done,
                group.group_size,
                len(group.rollout_ids),
                group.stage,
            )
            head_cached = heads.get(gid)
            if head_cached is None or head_cached[0] != key:
                head_cached = heads[gid] = (key, self._head_cells(group, label))
                self.cell_builds += 1
            elapsed = max(0.0, now - group.started_at)
            # Everything the age cell's text and colour depend on (format.budget): whole seconds.
            age_key = (age(elapsed), timeout, level_style(elapsed / timeout) if timeout else None)
            age_cached = ages.get(gid)
            if age_cached is None or age_cached[0] != age_key:
                age_cached = ages[gid] = (age_key, budget(elapsed, timeout or None))
                self.age_builds += 1
            made = last.get(gid)
            if made is None or made[0] is not head_cached[1] or made[1] is not age_cached[1]:
                made = (head_cached[1], age_cached[1], (*head_cached[1], age_cached[1]))
            shown[gid] = made
            rows[gid] = made[2]
        for gone in [g for g in heads if g not in rows]:
            heads.pop(gone, None)
            ages.pop(gone, None)
        self._rows = shown
        self.sync(rows)
        title = f"Active groups ({len(rows)})"
        if self.border_title != title:
            self.border_title = title

    @staticmethod
    def _head_cells(group: GroupView, label: str) -> Row:
        total = group.group_size or len(group.rollout_ids) or 0
        stage_style = {"scoring": "cyan", "sending": "green", "queued": "dim"}.get(group.stage, "")
        return (
            Text(head(label or group.group_id, 9), style="bold"),  # readable: g0033 (h: its rollouts)
            head(group.item_summary or "–", 36),
            f"{group.rollouts_done}/{total or '?'}",
            Text(group.stage, style=stage_style),
        )

    @classmethod
    def _row(cls, group: GroupView, now: float, timeout: float, label: str = "") -> Row:
        """One row built from scratch (the oracle the cached rows equal)."""
        return (*cls._head_cells(group, label), budget(max(0.0, now - group.started_at), timeout or None))
