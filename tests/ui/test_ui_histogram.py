"""The reward histogram's cells: bar heights in eighths, the selected bin highlighted, the axis."""

from __future__ import annotations

from rich.color import Color
from textual.app import App, ComposeResult

from hermes_console.ui.widgets.reward_histogram import BLOCKS, RewardHistogram


class _One(App[None]):
    def compose(self) -> ComposeResult:
        yield RewardHistogram(id="h")


def _cells(widget: RewardHistogram) -> list[list[tuple[str, str]]]:
    """Each cell's character and look: "selected" (bold yellow), "bar" (magenta) or other."""
    yellow, magenta = Color.parse("yellow").number, Color.parse("magenta").number
    rows = []
    for y in range(widget.size.height):
        row = []
        for seg in widget.render_line(y):
            style = seg.style
            look = "other"
            number = style.color.number if style is not None and style.color is not None else None
            if style is not None and number == yellow and style.bold:
                look = "selected"
            elif style is not None and number == magenta and not style.bold:
                look = "bar"
            row.extend((ch, look) for ch in seg.text)
        rows.append(row)
    return rows


async def test_bars_selection_and_axis_cell_by_cell() -> None:
    app = _One()
    async with app.run_test(size=(12, 5)) as pilot:
        h = app.query_one(RewardHistogram)
        h.set_counts([4, 1, 0], 0.0, 1.0)
        h.set_show_selection(True)
        h.select(1)
        await pilot.pause()
        rows = _cells(h)
        assert len(rows) == 5  # 4 bar rows + the axis
        col = 4  # 12 columns / 3 bins
        for y, row in enumerate(rows[:4]):
            level = 4 - y
            for b, count in enumerate([4, 1, 0]):
                eighths = round(count / 4 * 4 * 8)
                glyph = BLOCKS[min(8, max(0, eighths - (level - 1) * 8))]
                cells = row[b * col : (b + 1) * col]
                assert "".join(ch for ch, _ in cells) == glyph * (col - 1) + " "
                assert {look for _, look in cells} == {"selected" if b == 1 else "bar"}, (y, b, cells)
        assert "".join(ch for ch, _ in rows[4]).startswith("0.0") and "1.0" in "".join(ch for ch, _ in rows[4])
        h.set_show_selection(False)
        await pilot.pause()
        assert {look for row in _cells(h)[:4] for _, look in row} == {"bar"}
