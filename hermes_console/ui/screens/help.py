"""`?` help: every binding with its id, current key and description."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label

from hermes_console.ui.bindings import unique_controls

SCOPE_NAMES = {
    "app": "everywhere",
    "main": "main screen",
    "drilldown": "drill-downs",
    "sandbox": "sandbox screen",
    "rollouts": "rollouts history",
    "transcript": "transcript",
    "config": "config view",
}


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "close", "Close", id="help-close")]

    def compose(self) -> ComposeResult:
        with Vertical(id="help-dialog"):
            yield Label(
                "hermes-console — key bindings (rebind by id in ~/.config/hermes-console/keys.yaml)", id="help-title"
            )
            yield DataTable(id="help-table", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("key", "id", "where", "what it does")
        keymap = self.app._keymap  # the effective rebinds (normalized key names)
        for spec in unique_controls():
            keys = keymap.get(spec.id, spec.key)
            shown = ", ".join(self.app.get_key_display(Binding(k.strip(), "")) for k in keys.split(","))
            table.add_row(shown, spec.id, SCOPE_NAMES.get(spec.scope, spec.scope), spec.description, key=spec.id)
        table.focus()

    def action_close(self) -> None:
        self.dismiss(None)
