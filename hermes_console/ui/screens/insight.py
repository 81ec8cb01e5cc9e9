"""Where the time goes, errors by kind, and the run's graphs (`w`).

Per run: rollout time split into generation / tools / reward / other, queue
wait, generated tokens per second, LLM latency p50/p95 and a bottleneck line.
Errors: one row per kind (server, tool, timeout, reward, sandbox, send, item)
with its count, rate over the last minute and last cause; the last errors
below with where they happened. Graphs over time sit beside them.
"""

from __future__ import annotations

import math

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.events import Resize
from textual.widgets import DataTable, Static

from hermes_console.runtime.history import ERROR_KINDS, History
from hermes_console.runtime.state import ConsoleState
from hermes_console.ui.format import bar, clock, duration, head, visible
from hermes_console.ui.screens.drilldown import DrillDownScreen
from hermes_console.ui.throttle import Throttle
from hermes_console.ui.widgets.footer import Footer
from hermes_console.ui.widgets.run_graphs import RunGraphs

RECENT_ERRORS = 50
NARROW_WIDTH = 110  # below: no graphs (the error tables get the width)
ERROR_HELP = {
    "server": "inference: API errors, empty replies, transport failures",
    "tool": "tool calls that failed (exit codes, bad args, unknown tools)",
    "timeout": "tool / command / worker timeouts",
    "reward": "compute_reward raised (scored 0)",
    "sandbox": "sandbox cleanup failures",
    "send": "groups the trainer API did not confirm",
    "item": "items dropped or failed as a whole",
}


class InsightScreen(DrillDownScreen):
    def __init__(self) -> None:
        super().__init__(classes="drilldown")
        self._drawn: tuple[object, ...] | None = None
        self._throttle = Throttle()

    def compose(self) -> ComposeResult:
        with Horizontal(id="insight-body"):
            with Vertical(id="insight-left"):
                yield Static("", id="insight-time", classes="drill-header")
                yield DataTable(id="insight-errors", cursor_type="row", zebra_stripes=True)
                yield DataTable(id="insight-recent", cursor_type="row", zebra_stripes=True)
            yield RunGraphs(id="insight-graphs")
        yield Footer()

    def on_mount(self) -> None:
        kinds = self.query_one("#insight-errors", DataTable)
        kinds.border_title = "Errors by kind"
        for key, label, width in (
            ("kind", "kind", 8),
            ("count", "count", 6),
            ("rate", "/min (1m)", 9),
            ("last", "last cause", None),
        ):
            kinds.add_column(label, key=key, width=width)
        recent = self.query_one("#insight-recent", DataTable)
        recent.border_title = f"Last {RECENT_ERRORS} errors"
        for key, label, width in (
            ("time", "time", 8),
            ("kind", "kind", 8),
            ("where", "where", 16),
            ("detail", "detail", 18),
            ("cause", "cause", None),
        ):
            recent.add_column(label, key=key, width=width)
        self.set_class(self.app.size.width < NARROW_WIDTH, "-narrow")
        self.ready = True
        self.refresh_view(self.console.state, self.console.now())

    def on_resize(self, event: Resize) -> None:
        # Narrow terminals: the error tables need the width more than the graphs do.
        self.set_class(event.size.width < NARROW_WIDTH, "-narrow")

    def refresh_view(self, state: ConsoleState, now: float) -> None:
        h = state.history
        key = (h.version, state.rewards_version, int(now))
        if key == self._drawn:
            return
        if self._drawn is not None and not self._throttle.due():  # at most once a second
            self._throttle.later(self, lambda: self.refresh_view(self.console.state, self.console.now()))
            return
        self._drawn = key
        self.query_one("#insight-time", Static).update(time_text(h, state))
        self._errors(h, now)
        self.query_one(RunGraphs).update_from(state)

    def _errors(self, h: History, now: float) -> None:
        kinds = self.query_one("#insight-errors", DataTable)
        kinds.clear()
        last = {}
        for record in h.errors:
            last[record.kind] = record
        for kind in ERROR_KINDS:
            count = h.error_counts.get(kind, 0)
            rate = h.error_rate(kind, now)
            cause = last.get(kind)
            kinds.add_row(
                Text(kind, style="bold red" if count else "dim"),
                str(count),
                Text(f"{rate:.1f}", style="red" if rate else "dim"),
                Text(head(visible(cause.cause), 200), style="") if cause else Text(ERROR_HELP[kind], style="dim"),
                key=kind,
            )
        recent = self.query_one("#insight-recent", DataTable)
        recent.clear()
        for i, record in enumerate(reversed(list(h.errors)[-RECENT_ERRORS:])):
            recent.add_row(
                clock(record.ts),
                record.kind,
                head(visible(record.where), 16),
                head(record.detail, 18),
                head(visible(record.cause), 300),
                key=str(i),
            )


def time_text(h: History, state: ConsoleState) -> Text:
    """The run's time split, throughput and latency, as text (pure, used by tests too)."""
    split = h.time_split()
    busy = sum(v for k, v in split.items() if k != "queue")
    n = int(h.totals["rollouts"])
    text = Text("Where the time goes", style="bold")
    text.append(f"   {n} finished rollouts", style="dim")
    for name in ("generation", "tool", "reward", "other"):
        share = split[name] / busy if busy > 0 else 0.0
        mean = split[name] / n if n else math.nan
        text.append(f"\n{name:<11}", style="dim")
        text.append(
            bar(share, 20), style={"generation": "cyan", "tool": "yellow", "reward": "magenta"}.get(name, "dim")
        )
        text.append(f" {share:>4.0%}  {duration(mean)} per rollout")
    text.append("\nqueue wait ", style="dim")
    text.append(f"{duration(split['queue'] / n if n else math.nan)} per rollout (item received → rollout started)")
    p50, p95 = h.latency_percentiles()
    tps = h.tokens_per_s()
    text.append("\nLLM latency ", style="dim")
    text.append(f"p50 {duration(p50)}  p95 {duration(p95)}", style="bold")
    text.append(f"  over the last {len(h.latencies)} calls", style="dim")
    text.append("   generated ", style="dim")
    text.append("–" if math.isnan(tps) else f"{tps:.0f} tok/s", style="bold")
    text.append(f"   rollouts/s {state.rollouts_per_s():.2f}", style="dim")
    text.append("\nbottleneck ", style="dim")
    text.append(h.bottleneck(), style="bold yellow")
    return text
