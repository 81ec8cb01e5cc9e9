"""Rewards: histogram of recent rewards, mean/p50/p90 per step as sparklines,
and the share of groups whose scores were all identical (no learning signal)."""

from __future__ import annotations

import math

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Label, Static

from hermes_console.runtime.state import ConsoleState
from hermes_console.ui.widgets.reward_histogram import RewardHistogram
from hermes_console.ui.widgets.trend_line import TrendLine

SPARK_STEPS = 120
HIST_BINS = 10


class RewardsPanel(Horizontal):
    can_focus = True
    # left / right pick a histogram bin; enter (the screen's drill-down) opens its rollouts.
    BINDINGS = [Binding("left", "bin(-1)", "Bin ←", show=False), Binding("right", "bin(1)", "Bin →", show=False)]

    def action_bin(self, step: int) -> None:
        histogram = self.query_one(RewardHistogram)
        histogram.select(histogram.selected + step)

    def on_focus(self) -> None:
        self.query_one(RewardHistogram).set_show_selection(True)

    def on_blur(self) -> None:
        self.query_one(RewardHistogram).set_show_selection(False)

    def selected_bin(self) -> tuple:
        """(index, bins, lo, hi) of the highlighted histogram bin."""
        histogram = self.query_one(RewardHistogram)
        return histogram.selected, len(histogram.counts) or HIST_BINS, histogram.lo, histogram.hi

    def compose(self) -> ComposeResult:
        yield RewardHistogram(id="reward-histogram")
        with Vertical(id="reward-trends"):
            for name in ("mean", "p50", "p90"):
                with Horizontal(classes="trend-row"):
                    yield Label(name, classes="trend-label")
                    yield TrendLine([], id=f"spark-{name}", summary_function=max)
        yield Static("", id="reward-summary")

    def on_mount(self) -> None:
        self.border_title = "Rewards"
        self._seen = (-1, -1)
        self._summary_lines = -1  # lines of the summary last shown (its height, when compact)

    def update_from(self, state: ConsoleState) -> None:
        key = (state.rollouts_finished, state.groups_scored)
        if key == self._seen:
            return  # nothing new to draw
        self._seen = key
        rewards = list(state.recent_rewards)
        lo = min([0.0, *rewards])
        hi = max([1.0, *rewards])
        self.query_one(RewardHistogram).set_counts(state.reward_histogram(HIST_BINS, lo, hi), lo, hi)
        steps = list(state.reward_steps)[-SPARK_STEPS:]
        for name in ("mean", "p50", "p90"):
            data: list[float] = [getattr(s, name) for s in steps]
            self.query_one(f"#spark-{name}", TrendLine).data = data
        summary = self._summary(state)
        lines = summary.plain.count("\n")
        # Static.update asks for a layout pass (a re-arrangement of the whole screen) every
        # time; only a summary whose height follows its text (auto: compact) can need one,
        # when its number of lines changed. Beside the histogram its height is the row's.
        shown = self.query_one("#reward-summary", Static)
        height = shown.styles.height
        follows_text = height is None or height.is_auto
        shown.update(summary, layout=follows_text and lines != self._summary_lines)
        self._summary_lines = lines
        self.border_title = f"Rewards (last {len(rewards)} rollouts, {len(steps)} steps)"

    @staticmethod
    def _summary(state: ConsoleState) -> Text:
        s = state.reward_summary()

        def fmt(v: float) -> str:
            return "–" if math.isnan(v) else f"{v:.3f}"

        text = Text()
        text.append("mean ", style="dim")
        text.append(fmt(s["mean"]), style="bold")
        text.append("  p50 ", style="dim")
        text.append(fmt(s["p50"]))
        text.append("  p90 ", style="dim")
        text.append(fmt(s["p90"]))
        share = state.identical_share()
        text.append("\nidentical-score groups ", style="dim")
        text.append(f"{share:.0%}", style="bold yellow" if share >= 0.25 else "bold")
        text.append(f" ({state.identical_score_groups}/{state.groups_scored})", style="dim")
        last = state.reward_steps[-1] if state.reward_steps else None
        if last is not None:
            text.append("\nlast step ", style="dim")
            text.append(f"mean {last.mean:.3f} p50 {last.p50:.3f} p90 {last.p90:.3f}")
        return text
