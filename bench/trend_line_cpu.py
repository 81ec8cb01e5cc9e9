"""UI-thread CPU of a reward-trend redraw: Textual's ``Sparkline`` vs our ``TrendLine``.

    python -m bench.trend_line_cpu [--rounds 5] [--redraws 40] [--points 120] [--size 97x2]

The rewards panel draws three sparklines of the last 120 steps, 97 x 2 cells in a 160 x 45
console. One sample = new data (one more step, as when a group is scored), the widget's
``render_lines`` (what the compositor asks for; timed alone too) and the rest of the repaint
(``pilot.pause``), measured with ``time.thread_time`` (this thread's CPU, not waits). Both widgets sit in one headless
app and take turns; rounds alternate which goes first. The drawn cells are compared after
every sample (they must be equal). Medians; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import time
from typing import Any

from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.widget import Widget
from textual.widgets import Sparkline

from bench.common import load_average, median, rnd
from hermes_console.ui.widgets.trend_line import TrendLine


class _Pair(App[None]):
    def __init__(self, width: int, height: int) -> None:
        super().__init__()
        self._w, self._h = width, height

    def compose(self) -> ComposeResult:
        yield Sparkline([], id="textual", summary_function=max)
        yield TrendLine([], id="ours", summary_function=max)

    def on_mount(self) -> None:
        for widget in self.query(Sparkline):
            widget.styles.width, widget.styles.height = self._w, self._h


def _cells(widget: Widget) -> list[tuple[str, Any, Any]]:
    """Each cell drawn: character, colour, background."""
    region = Region(0, 0, widget.size.width, widget.size.height)
    return [
        (char, seg.style.color if seg.style else None, seg.style.bgcolor if seg.style else None)
        for strip in widget.render_lines(region)
        for seg in strip
        for char in seg.text
    ]


def _series(step: int, points: int) -> list[float]:
    return [0.5 + 0.4 * math.sin((step + i) / 7.0) for i in range(points)]


async def _round(width: int, height: int, redraws: int, points: int, ours_first: bool) -> dict[str, list[float]]:
    app = _Pair(width, height)
    out: dict[str, list[float]] = {"textual": [], "ours": [], "textual_lines": [], "ours_lines": []}
    async with app.run_test(size=(width + 2, 2 * height + 2)) as pilot:
        widgets = {"textual": app.query_one("#textual", Sparkline), "ours": app.query_one("#ours", TrendLine)}
        order = ["ours", "textual"] if ours_first else ["textual", "ours"]
        for step in range(redraws + 1):
            data = _series(step, points)
            for name in order:
                widget = widgets[name]
                c0 = time.thread_time()
                widget.data = data
                c1 = time.thread_time()
                widget.render_lines(Region(0, 0, widget.size.width, widget.size.height))
                c2 = time.thread_time()
                await pilot.pause()
                if step:  # the first is a warm-up
                    out[name].append(1000 * (time.thread_time() - c0))
                    out[f"{name}_lines"].append(1000 * (c2 - c1))
            if _cells(widgets["ours"]) != _cells(widgets["textual"]):
                raise AssertionError(f"TrendLine drew other cells than Sparkline at step {step}")
    return out


def run(rounds: int = 5, redraws: int = 40, points: int = 120, width: int = 97, height: int = 2) -> dict[str, Any]:
    load_before = load_average()
    samples: dict[str, list[float]] = {"textual": [], "ours": [], "textual_lines": [], "ours_lines": []}
    for r in range(rounds):
        got = asyncio.run(_round(width, height, redraws, points, ours_first=bool(r % 2)))
        for name, values in got.items():
            samples[name].extend(values)
    textual, ours = median(samples["textual"]), median(samples["ours"])
    return {
        "size": f"{width}x{height}",
        "points": points,
        "samples_per_side": len(samples["ours"]),
        "textual_sparkline_ms_per_redraw": rnd(textual, 3),
        "trend_line_ms_per_redraw": rnd(ours, 3),
        "ratio_textual_over_ours": rnd(textual / ours, 2) if ours else None,
        "textual_sparkline_render_lines_ms": rnd(median(samples["textual_lines"]), 3),
        "trend_line_render_lines_ms": rnd(median(samples["ours_lines"]), 3),
        "same_cells": True,
        "load_average_before": load_before,
        "load_average_after": load_average(),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--redraws", type=int, default=40)
    ap.add_argument("--points", type=int, default=120)
    ap.add_argument("--size", default="97x2")
    args = ap.parse_args(argv)
    width, height = (int(x) for x in args.size.split("x"))
    print(json.dumps(run(args.rounds, args.redraws, args.points, width, height), indent=1))


if __name__ == "__main__":
    main()
