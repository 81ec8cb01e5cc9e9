"""A one-line sparkline drawn straight to a strip (Line API).

Textual's ``Sparkline`` draws the same bars through a Rich renderable: bucket bounds in
``Fraction`` arithmetic, a blended ``rich.Color`` and a new ``Style`` per bar, then Rich's
render and line splitting. That was 2-4 ms of the UI thread per sparkline per redraw on a
2-core box, three of them in the rewards panel (BENCHMARKS, Issue 16 session 14). This draws
exactly what Textual's draws (the test compares the two cell by cell, one and two lines high):
the same buckets, bars and colours, with the bars' styles kept per colour, and the strips made
once per change of data, size or colours.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich.color import Color as RichColor
from rich.segment import Segment
from rich.style import Style as RichStyle
from textual.strip import Strip
from textual.widgets import Sparkline

BARS = "▁▂▃▄▅▆▇█"


def bucket_summaries(data: Sequence[float], width: int, summary: Callable[[Sequence[float]], float]) -> list[float]:
    """``summary`` of each of ``width`` slices of ``data``, as Textual partitions them
    (slice ``i`` is ``data[i*n//width : (i+1)*n//width]``; empty slices are skipped)."""
    n = len(data)
    out: list[float] = []
    for i in range(width):
        part = data[i * n // width : (i + 1) * n // width]
        if part:
            out.append(summary(part))
    return out


class TrendLine(Sparkline):
    """``Sparkline`` whose lines are built without Rich's renderable pipeline."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._strips_key: tuple[object, ...] | None = None
        self._strips: list[Strip] = []
        self._styles: dict[tuple[tuple[int, int, int], RichStyle], RichStyle] = {}

    def render_line(self, y: int) -> Strip:
        width, height = self.size
        base = self.visual_style.rich_style
        if not 0 <= y < height or width <= 0:
            return Strip.blank(width, base)
        _, background = self.background_colors
        min_color = background + (
            self.get_component_styles("sparkline--min-color").color if self.min_color is None else self.min_color
        )
        max_color = background + (
            self.get_component_styles("sparkline--max-color").color if self.max_color is None else self.max_color
        )
        data = tuple(self.data or ())
        key = (data, width, height, min_color, max_color, base, self.summary_function)
        if key != self._strips_key:
            self._strips = self._lines(data, width, height, min_color.rich_color, max_color.rich_color, base)
            self._strips_key = key
        return self._strips[y]

    def _bar_style(self, rgb: tuple[int, int, int], base: RichStyle) -> RichStyle:
        """``base`` + the bar colour ``rgb``, made once per colour (a gradient has few)."""
        key = (rgb, base)
        style = self._styles.get(key)
        if style is None:
            if len(self._styles) > 4096:
                self._styles.clear()
            style = self._styles[key] = base + RichStyle.from_color(RichColor.from_rgb(*rgb))
        return style

    def _lines(
        self, data: tuple[float, ...], width: int, height: int, low: RichColor, high: RichColor, base: RichStyle
    ) -> list[Strip]:
        """Each line, top first, as Textual's renderable draws it over the widget's ``base`` style."""
        if not data:
            # Lines above an empty series are padding: Textual draws them with the background only.
            pad = Strip([Segment(" " * width, RichStyle(bgcolor=base.bgcolor))], width)
            return [pad] * (height - 1) + [Strip([Segment("▁" * width, base + RichStyle.from_color(low))], width)]
        if len(data) == 1:
            return [Strip([Segment("█" * width, base + RichStyle.from_color(high))], width)] * height
        minimum, maximum = min(data), max(data)
        extent = maximum - minimum or 1
        summaries = bucket_summaries(data, width, self.summary_function)
        lo, hi = low.triplet, high.triplet
        assert lo is not None and hi is not None
        levels = len(BARS) * height - 1
        bars: list[tuple[int, RichStyle]] = []
        index, step = 0.0, len(summaries) / width
        for _ in range(width):
            ratio = (summaries[int(index)] - minimum) / extent
            rgb = (  # as rich's Color.from_rgb rounds a blend (int() of each channel)
                int(lo.red + (hi.red - lo.red) * ratio),
                int(lo.green + (hi.green - lo.green) * ratio),
                int(lo.blue + (hi.blue - lo.blue) * ratio),
            )
            bars.append((int(ratio * levels), self._bar_style(rgb, base)))
            index += step
        lines: list[Strip] = []
        for row in reversed(range(height)):
            floor, ceiling = row * len(BARS), (row + 1) * len(BARS)
            segments: list[Segment] = []
            text, style = "", base
            for level, bar_style in bars:
                if level < floor:
                    char, cell_style = " ", base
                else:
                    char, cell_style = ("█" if level >= ceiling else BARS[level % len(BARS)]), bar_style
                if cell_style is style:
                    text += char
                else:
                    if text:
                        segments.append(Segment(text, style))
                    text, style = char, cell_style
            if text:
                segments.append(Segment(text, style))
            lines.append(Strip(segments, width))
        return lines
