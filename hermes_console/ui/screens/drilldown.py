"""Base for drill-down screens: refreshed by the app tick while on top, `escape` goes back."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from textual.screen import Screen

from hermes_console.runtime.state import ConsoleState
from hermes_console.ui.bindings import bindings_for

if TYPE_CHECKING:
    from hermes_console.ui.console_api import ConsoleHost


class DrillDownScreen(Screen[None]):
    BINDINGS = bindings_for("drilldown")
    ready = False  # set by subclasses once composed; the app tick skips them until then

    @property
    def console(self) -> ConsoleHost:
        return cast("ConsoleHost", self.app)

    def refresh_view(self, state: ConsoleState, now: float) -> None:
        """Called by the app tick with the latest state; override to redraw what changed."""

    def on_screen_resume(self) -> None:
        if self.ready:
            self.refresh_view(self.console.state, self.console.now())

    def action_back(self) -> None:
        self.dismiss(None)
