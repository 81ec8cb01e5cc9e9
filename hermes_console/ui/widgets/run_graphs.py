"""The run over time, with axes: rollouts/s, reward mean/p50/p90, errors/s, LLM latency.

Drawn with textual-plotext (plotext in a Textual widget). One point per
``BUCKET_S`` slice of event time (runtime/history.py); the x axis is minutes
before the latest slice, so a replayed log draws the same graphs.
"""

from __future__ import annotations

import math

from textual.app import ComposeResult
from textual.containers import Vertical
from textual_plotext import PlotextPlot

from hermes_console.runtime.history import BUCKET_S, Bucket
from hermes_console.runtime.state import ConsoleState, percentile

GRAPHS = (
    ("rate", "rollouts/s"),
    ("reward", "reward mean / p50 / p90"),
    ("errors", "errors/s"),
    ("latency", "LLM latency p50 / p95 (s)"),
)


def series(buckets: list[Bucket]) -> dict[str, list[tuple[str, list[float], list[float]]]]:
    """Per graph: (name, xs, ys) lines. xs are minutes before the latest bucket (pure, tested)."""
    if not buckets:
        return {key: [] for key, _ in GRAPHS}
    last = buckets[-1].start
    xs = [(b.start - last) / 60.0 for b in buckets]

    def line(values: list[float]) -> tuple[list[float], list[float]]:
        pts = [(x, v) for x, v in zip(xs, values) if not math.isnan(v)]
        return [p[0] for p in pts], [p[1] for p in pts]

    def stat(field: str, q: float) -> list[float]:
        """Per slice: the mean (q < 0, exact) or the q-th percentile of its sample."""
        out = []
        for b in buckets:
            sample = getattr(b, field)
            if not sample.count:
                out.append(math.nan)
            else:
                out.append(sample.mean() if q < 0 else percentile(sample.sorted_values(), q))
        return out

    return {
        "rate": [("rollouts/s", *line([b.rollouts / BUCKET_S for b in buckets]))],
        "reward": [
            ("mean", *line(stat("rewards", -1))),
            ("p50", *line(stat("rewards", 50))),
            ("p90", *line(stat("rewards", 90))),
        ],
        "errors": [("errors/s", *line([b.errors / BUCKET_S for b in buckets]))],
        "latency": [("p50", *line(stat("latencies", 50))), ("p95", *line(stat("latencies", 95)))],
    }


class RunGraphs(Vertical):
    def compose(self) -> ComposeResult:
        for key, _ in GRAPHS:
            yield PlotextPlot(id=f"graph-{key}", classes="run-graph")

    def on_mount(self) -> None:
        self.border_title = "Over time (x: minutes before now)"
        self._drawn = -1

    def update_from(self, state: ConsoleState) -> None:
        if state.history.version == self._drawn:
            return
        self._drawn = state.history.version
        data = series(list(state.history.buckets))
        for key, title in GRAPHS:
            widget = self.query_one(f"#graph-{key}", PlotextPlot)
            plt = widget.plt
            plt.clear_data()
            plt.clear_figure()
            plt.title(title)
            lines = data[key]
            for name, xs, ys in lines:
                if xs:
                    plt.plot(xs, ys, label=name if len(lines) > 1 else None, marker="braille")
            if key in ("rate", "errors", "latency"):
                plt.ylim(0, None)
            widget.refresh()
