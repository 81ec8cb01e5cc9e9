"""Vertical-bar histogram of recent rewards, drawn with eighth blocks."""

from __future__ import annotations

from typing import List

from rich.text import Text
from textual.widget import Widget

BLOCKS = " ▁▂▃▄▅▆▇█"


class RewardHistogram(Widget):
    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.counts: List[int] = []
        self.lo = 0.0
        self.hi = 1.0

    def set_counts(self, counts: List[int], lo: float, hi: float) -> None:
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
        rows: List[Text] = []
        for level in range(height, 0, -1):
            row = Text()
            for count in self.counts:
                eighths = round(count / peak * height * 8)
                filled = eighths - (level - 1) * 8
                glyph = BLOCKS[min(8, max(0, filled))]
                row.append((glyph * max(1, col - 1)) + " ", style="magenta")
            rows.append(row)
        axis = f"{self.lo:<{col * bins // 2}.1f}{self.hi:>{col * bins - col * bins // 2 - 1}.1f}"
        rows.append(Text(axis, style="dim"))
        return Text("\n").join(rows)
