"""Recently closed sandboxes (bounded by the state): why and when they closed, their
rollout, their last command; enter opens one (its last commands as the console saw them)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import DataTable, Static

from hermes_console.runtime.state import ConsoleState
from hermes_console.ui.format import clock, head
from hermes_console.ui.screens.drilldown import DrillDownScreen
from hermes_console.ui.widgets.footer import Footer


class ClosedSandboxesScreen(DrillDownScreen):
    def __init__(self) -> None:
        super().__init__(classes="drilldown")
        self._signature: tuple[object, ...] | None = None

    def compose(self) -> ComposeResult:
        yield Static("", id="closed-header", classes="drill-header")
        yield DataTable(id="closed-sandboxes", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#closed-sandboxes", DataTable)
        for key, label, width in (
            ("task", "sandbox", 14),
            ("rollout", "rollout", 10),
            ("closed", "closed", 8),
            ("reason", "reason", 12),
            ("cmds", "cmds", 5),
            ("exit", "exit", 5),
            ("last", "last command", None),
        ):
            table.add_column(label, key=key, width=width)
        table.border_title = "Recently closed sandboxes (enter: its last commands)"
        self.ready = True
        self.refresh_view(self.console.state, self.console.now())
        table.focus()

    def refresh_view(self, state: ConsoleState, now: float) -> None:
        closed = state.closed_sandboxes()
        signature = tuple((sb.task_id, sb.commands) for sb in closed)
        if signature == self._signature:
            return
        self._signature = signature
        self.query_one("#closed-header", Static).update(
            Text(f"{len(closed)} recently closed sandbox(es)", style="bold")
        )
        table = self.query_one("#closed-sandboxes", DataTable)
        table.clear()
        for sb in closed:
            last = sb.last_commands[-1]["command"] if sb.last_commands else "–"
            table.add_row(
                head(sb.task_id, 14),
                state.history.label_of(sb.task_id),
                clock(sb.closed_at or sb.created_at),
                sb.closed_reason or "–",
                str(sb.commands),
                "–" if sb.last_exit_code is None else str(sb.last_exit_code),
                head(last, 120),
                key=sb.task_id,
            )

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        from hermes_console.ui.screens.sandbox import SandboxScreen

        if event.row_key.value:
            self.app.push_screen(SandboxScreen(event.row_key.value))
