"""`/` filter prompt: a group or rollout id fragment; empty clears the filter."""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label


class FilterModal(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="filter-cancel")]

    def __init__(self, current: str = "") -> None:
        super().__init__(classes="filter")
        self._current = current

    def compose(self) -> ComposeResult:
        with Vertical(id="filter-dialog"):
            yield Label("Filter turns and tool calls by group or rollout id (empty = all)")
            # select_on_focus off: the focus arrives a message after the dialog shows, and keys
            # typed meanwhile (forwarded below) must not be selected and then typed over
            yield Input(
                value=self._current, placeholder="e.g. g0031 or g0031-r2", id="filter-input", select_on_focus=False
            )

    def on_mount(self) -> None:
        self.query_one("#filter-input", Input).select_all()  # typing replaces the current filter

    def on_key(self, event: events.Key) -> None:
        """Keys that arrive before the input has taken focus (typed right after `/`, in one
        burst over ssh, on a loaded box) belong to it: never dropped, enter included."""
        field = self.query_one("#filter-input", Input)
        if self.focused is field:
            return
        if event.key == "enter":
            event.stop()
            self.dismiss(field.value.strip())
        elif event.key == "backspace":
            event.stop()
            field.focus()
            if field.selection.is_empty:
                field.action_delete_left()
            else:
                field.replace("", *field.selection)
        elif event.is_printable and event.character:
            event.stop()
            field.focus()
            if field.selection.is_empty:
                field.insert_text_at_cursor(event.character)
            else:
                field.replace(event.character, *field.selection)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value.strip())

    def action_cancel(self) -> None:
        self.dismiss(None)
