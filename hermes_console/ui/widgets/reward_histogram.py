"""Vertical-bar histogram of recent rewards, drawn with eighth blocks."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widget import Widget

BLOCKS = " ▁▂▃▄▅▆▇█"


class RewardHistogram(Widget):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.counts: list[int] = []
        self.lo = 0.0
        self.hi = 1.0
        self.selected = 0  # the bin `enter` opens (highlighted while the panel has focus)
        self.show_selection = False

    def select(self, index: int) -> None:
        """Move the selection to bin ``index`` (clamped)."""
        index = max(0, min(index, max(0, len(self.counts) - 1)))
        if index != self.selected:
            self.selected = index
            self.refresh()

    def set_show_selection(self, shown: bool) -> None:
        if shown != self.show_selection:
            self.show_selection = shown
            self.refresh()

    def set_counts(self, counts: list[int], lo: float, hi: float) -> None:
        if counts != self.counts or (lo, hi) != (self.lo, self.hi):
            self.counts, self.lo, self.hi = list(counts), lo, hi
            self.refresh()

    def render(self) -> Text:
        height = max(1, self.size.height - 1)  # last row holds the axis labels
        width = max(1, self.size.width)
        if not self.counts or not any(self.counts):
            return Text("no rewards yet", style="dim")
        bins = len(self.counts)
        col = max(1, min(4, width // bins))  # characters per bin
        peak = max(self.counts)
        eighths = [round(count / peak * height * 8) for count in self.counts]
        bar = max(1, col - 1)
        picked = self.selected if self.show_selection and 0 <= self.selected < bins else None
        rows: list[Text] = []
        for level in range(height, 0, -1):
            # One string and one or two styled spans per row (a span per bin made every
            # redraw of this panel cost ~12 ms in Rich's line splitting).
            cells = [BLOCKS[min(8, max(0, e - (level - 1) * 8))] * bar + " " for e in eighths]
            row = Text("".join(cells), style="magenta")
            if picked is not None:
                start = sum(len(c) for c in cells[:picked])
                row.stylize("bold yellow", start, start + len(cells[picked]))
            rows.append(row)
        axis = f"{self.lo:<{col * bins // 2}.1f}{self.hi:>{col * bins - col * bins // 2 - 1}.1f}"
        rows.append(Text(axis, style="dim"))
        return Text("\n").join(rows)
