"""TrendLine draws exactly what Textual's Sparkline draws (the oracle: Textual's widget,
rendered side by side in the same app), cell by cell: character, colour, background; one
line high and two (the rewards panel's)."""

from __future__ import annotations

import math
import random
import statistics

import pytest
from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.widget import Widget
from textual.widgets import Sparkline

from hermes_console.ui.widgets.trend_line import TrendLine, bucket_summaries


class _Pair(App[None]):
    CSS = "Sparkline { width: 1fr; height: 1; }  #w2, #t2 { width: 7; height: 2; }"

    def compose(self) -> ComposeResult:
        yield Sparkline([], id="w1", summary_function=max)
        yield TrendLine([], id="t1", summary_function=max)
        yield Sparkline([], id="w2", summary_function=statistics.mean)
        yield TrendLine([], id="t2", summary_function=statistics.mean)


def _cells(widget: Widget) -> list[tuple[str, object, object]]:
    out = []
    for strip in widget.render_lines(Region(0, 0, widget.size.width, widget.size.height)):
        for seg in strip:
            style = seg.style
            for ch in seg.text:
                out.append((ch, style.color if style else None, style.bgcolor if style else None))
    return out


def _series(rng: random.Random) -> list[float]:
    n = rng.choice([0, 1, 2, 3, 7, 40, 59, 60, 61, 120, 500])
    kind = rng.choice(["uniform", "flat", "steps", "negative"])
    if kind == "flat":
        return [0.5] * n
    if kind == "steps":
        return [float(i // 7 % 3) for i in range(n)]
    if kind == "negative":
        return [rng.uniform(-3, 1) for _ in range(n)]
    return [rng.random() for _ in range(n)]


@pytest.mark.parametrize("seed", range(3))
async def test_trend_line_draws_what_textuals_sparkline_draws(seed: int) -> None:
    rng = random.Random(seed)
    app = _Pair()
    async with app.run_test(size=(90, 6)) as pilot:
        pairs = [(app.query_one("#w1", Sparkline), app.query_one("#t1", TrendLine))]
        pairs.append((app.query_one("#w2", Sparkline), app.query_one("#t2", TrendLine)))
        for _ in range(25):
            for theirs, ours in pairs:
                data = _series(rng)
                theirs.data = data
                ours.data = data
            await pilot.pause()
            for theirs, ours in pairs:
                assert ours.size == theirs.size and ours.size.width > 0
                assert ours.size.height == (2 if ours.id == "t2" else 1)
                assert _cells(ours) == _cells(theirs), (theirs.id, theirs.data)


def test_buckets_are_textuals_partition() -> None:
    from textual.renderables.sparkline import Sparkline as Renderable

    for n in (1, 2, 5, 59, 60, 61, 333):
        data = [float(i) for i in range(n)]
        for width in (1, 7, 60, 90):
            theirs = [max(p) for p in Renderable._buckets(data, width)]
            assert bucket_summaries(data, width, max) == theirs
    assert math.isclose(bucket_summaries([1.0, 3.0], 1, statistics.mean)[0], 2.0)
