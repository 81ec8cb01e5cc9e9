"""`w`: where the time goes, errors by kind with their last cause, graphs with axes.
Oracle: the events fed in (tool errors by kind, turn latencies, finished rollouts per 10 s)."""

from __future__ import annotations

import math

from textual.widgets import DataTable, Static
from textual_plotext import PlotextPlot

from environments import events as ev
from hermes_console.runtime.history import BUCKET_S
from hermes_console.ui.screens.insight import InsightScreen
from hermes_console.ui.widgets.run_graphs import series
from hermes_console_dev.fake_runtime import FakeRuntime
from tests.ui.helpers import make_app, scenario, settle


async def test_insight_shows_time_split_errors_by_kind_and_graphs() -> None:
    events = scenario("errors")
    app = make_app(FakeRuntime(events))
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        await pilot.press("w")
        await settle(pilot, 4)
        assert isinstance(app.screen, InsightScreen)
        kinds = app.screen.query_one("#insight-errors", DataTable)
        rows = {kinds.get_row_at(i)[0].plain: kinds.get_row_at(i) for i in range(kinds.row_count)}
        tool_errors = [
            e for e in events if isinstance(e, ev.ToolCallFinished) and e.error and e.error_kind != "timeout"
        ]
        assert rows["tool"][1] == str(len(tool_errors))
        last = max(tool_errors, key=lambda e: e.ts)
        assert rows["tool"][3].plain == f"{last.tool_name}: {last.error}"
        reward_errors = [e for e in events if isinstance(e, ev.RolloutFinished) and e.reward_error]
        assert rows["reward"][1] == str(len(reward_errors))
        recent = app.screen.query_one("#insight-recent", DataTable)
        assert recent.row_count == min(50, len(app.state.history.errors))
        header = str(app.screen.query_one("#insight-time", Static).render())
        assert "generation" in header and "LLM latency p50" in header and "bottleneck" in header
        plots = list(app.screen.query(PlotextPlot))
        assert len(plots) == 4 and all(p.size.height > 5 for p in plots)
        await pilot.press("escape")


def test_graph_series_come_from_the_events() -> None:
    from hermes_console.runtime.state import ConsoleState

    events = scenario("small")
    state = ConsoleState()
    state.apply_all(events)
    data = series(list(state.history.buckets))
    finished = [e for e in events if isinstance(e, ev.RolloutFinished)]
    ((_, xs, ys),) = data["rate"]
    assert math.isclose(sum(ys) * BUCKET_S, len(finished))
    assert xs[-1] == 0.0 and all(b < a for a, b in zip(xs[1:], xs))  # minutes before now, increasing to 0
    # the mean reward of the latest slice is the mean of the rewards finished in it
    last_start = state.history.buckets[-1].start
    assert last_start == math.floor(last_start / BUCKET_S) * BUCKET_S
    in_last = [e.reward for e in finished if e.ts >= last_start]
    means = dict(zip(data["reward"][0][1], data["reward"][0][2]))
    if in_last:
        assert math.isclose(means[0.0], sum(in_last) / len(in_last))
