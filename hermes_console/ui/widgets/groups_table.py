"""Active groups: item, rollouts done/total, stage, age against worker_timeout."""

from __future__ import annotations

from rich.text import Text

from hermes_console.runtime.state import ConsoleState
from hermes_console.runtime.views import GroupView
from hermes_console.ui.format import budget, head
from hermes_console.ui.widgets.keyed_table import KeyedTable, Row


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

    def update_from(self, state: ConsoleState, now: float) -> None:
        timeout = state.run.worker_timeout_s
        rows: dict[str, Row] = {}
        for group in state.active_groups():
            rows[group.group_id] = self._row(group, now, timeout, state.history.group_label_of(group.group_id))
        self.sync(rows)
        title = f"Active groups ({len(rows)})"
        if self.border_title != title:
            self.border_title = title

    @staticmethod
    def _row(group: GroupView, now: float, timeout: float, label: str = "") -> Row:
        total = group.group_size or len(group.rollout_ids) or 0
        stage_style = {"scoring": "cyan", "sending": "green", "queued": "dim"}.get(group.stage, "")
        return (
            Text(head(label or group.group_id, 9), style="bold"),  # readable: g0033 (h: its rollouts)
            head(group.item_summary or "–", 36),
            f"{group.rollouts_done}/{total or '?'}",
            Text(group.stage, style=stage_style),
            budget(max(0.0, now - group.started_at), timeout or None),
        )
