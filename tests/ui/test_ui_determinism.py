"""Widgets render from ConsoleState alone: the same events, batched differently, draw the same screen.

The turns stream and the tool calls table used to append "rows since the last seq" under a
time-budgeted drain, so how the events were split into drain steps changed what they showed
(the reason the `errors` snapshot was once left out of the comparison). Here one event log is
applied one event per redraw, in uneven chunks, and all at once; every main panel must render
the same text, and so must the whole screen.
"""

from __future__ import annotations

import re

from textual.geometry import Region
from textual.widget import Widget

from hermes_console.ui.widgets.tool_calls_table import ToolCallsTable
from hermes_console.ui.widgets.turns_stream import TurnsStream
from tests.ui.fakes import FakeRuntime
from tests.ui.helpers import make_app, scenario, settle

PANELS = ("status", "groups", "turns", "tools", "sandboxes", "rewards")


def _panel_text(widget: Widget) -> str:
    lines = widget.render_lines(Region(0, 0, widget.size.width, widget.size.height))
    return "\n".join(strip.text for strip in lines)


async def _render(events: list, chunk: int) -> tuple[dict[str, str], str, list[str], list[list[str]]]:
    app = make_app(FakeRuntime([]))
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        for start in range(0, len(events), chunk):
            app.apply_events(events[start : start + chunk], force=True)  # one redraw per batch
            if start // chunk % 25 == 0:
                await pilot.pause()  # let layout and a paint happen between some batches
        await settle(pilot)
        screen = app.screen
        panels = {name: _panel_text(screen.query_one(f"#{name}", Widget)) for name in PANELS}
        # SVG element ids are derived per export; the drawn text is what must match.
        svg = re.sub(r"terminal-\d+", "terminal", app.export_screenshot())
        stream = [strip.text for strip in screen.query_one(TurnsStream).lines]
        tools = screen.query_one(ToolCallsTable)
        rows = [[getattr(c, "plain", str(c)) for c in tools.get_row_at(i)] for i in range(tools.row_count)]
        return panels, svg, stream, rows


async def test_same_events_in_any_batching_draw_the_same_screen() -> None:
    events = scenario("errors")
    assert len(events) > 50, "the errors scenario should be long enough to batch several ways"
    one_by_one = await _render(events, 1)
    uneven = await _render(events, 7)
    at_once = await _render(events, len(events))
    for other in (uneven, at_once):
        for name in PANELS:
            assert one_by_one[0][name] == other[0][name], f"panel {name} differs between batchings"
        assert one_by_one[2] == other[2], "the turns stream's lines differ between batchings"
        assert one_by_one[3] == other[3], "the tool calls table's rows differ between batchings"
        assert one_by_one[1] == other[1], "the screen differs between batchings"
    assert one_by_one[2] and one_by_one[3]
