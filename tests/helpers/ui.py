"""Pilot steps the UI tests repeat: let the app settle, read a RichLog back as text, act on
the selected row of a table (the drill-downs), count the screen's layout passes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from textual.pilot import Pilot
from textual.screen import Screen
from textual.widgets import RichLog

from hermes_console.ui.widgets.keyed_table import KeyedTable


async def settle(pilot: Pilot, rounds: int = 3) -> None:
    """Let ticks, command workers whose futures are resolved, and repaints run.
    (Workers awaiting a held future are not waited for: they finish when the test resolves it.)"""
    for _ in range(rounds):
        await pilot.pause()
        await pilot.pause(0.01)


def log_text(log: RichLog) -> str:
    """What a RichLog shows, one line per rendered line."""
    return "\n".join(strip.text for strip in log.lines)


async def press_on_selected(pilot: Pilot, table: type[KeyedTable], *keys: str) -> str | None:
    """Focus the screen's ``table``, press ``keys`` with its cursor row selected and settle;
    returns that row's key (what the drill-down should open)."""
    widget = pilot.app.screen.query_one(table)
    widget.focus()
    selected = widget.selected_key()
    await pilot.press(*keys)
    await settle(pilot)
    return selected


@contextmanager
def layout_passes() -> Iterator[list[int]]:
    """Count the screen's layout passes (each re-arranges every widget) while in the block:
    ``with layout_passes() as passes: ...; assert passes[0] == 0``."""
    count = [0]
    real = Screen._refresh_layout

    def counted(self: Screen, *args: object, **kwargs: object) -> None:
        count[0] += 1
        real(self, *args, **kwargs)

    Screen._refresh_layout = counted  # type: ignore[method-assign]
    try:
        yield count
    finally:
        Screen._refresh_layout = real  # type: ignore[method-assign]
