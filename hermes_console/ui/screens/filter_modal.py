"""`/` filter prompt: a group or rollout id fragment; empty clears the filter."""

from __future__ import annotations

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
            yield Input(value=self._current, placeholder="e.g. g0031 or g0031-r2", id="filter-input")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value.strip())

    def action_cancel(self) -> None:
        self.dismiss(None)
