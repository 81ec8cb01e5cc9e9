"""The status bar repaints without a layout of the screen when its shape is unchanged.

Its text changes every second (the run's clock, counters); a layout pass of the whole
screen for each change was a steady share of the UI's CPU (BENCHMARKS P1). The height can
only change with the number of lines or a line that wraps: those still lay out."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from textual.app import App, ComposeResult
from textual.pilot import Pilot

from hermes_console.runtime import events as rev
from hermes_console.runtime.state import ConsoleState
from hermes_console.ui.widgets.status_bar import StatusBar
from tests.ui.helpers import NOW


class BarApp(App[None]):
    def compose(self) -> ComposeResult:
        yield StatusBar(id="bar")


def _state() -> ConsoleState:
    s = ConsoleState()
    s.apply(
        rev.RunConfigured(
            env_name="e", mode="process", phase=1, group_size=4, max_in_flight=4, worker_timeout_s=60.0, total_steps=6
        )
    )
    return s


def _layout_requests(bar: StatusBar) -> list[bool]:
    """The ``layout`` flag of every refresh the bar asks for from now on."""
    layouts: list[bool] = []
    real = bar.refresh

    def spy(*regions: Any, repaint: bool = True, layout: bool = False, recompose: bool = False) -> Any:
        layouts.append(layout)
        return real(*regions, repaint=repaint, layout=layout, recompose=recompose)

    bar.refresh = spy  # type: ignore[method-assign]
    return layouts


@asynccontextmanager
async def _drawn_bar(size: tuple[int, int]) -> AsyncIterator[tuple[Pilot[None], StatusBar, list[bool], ConsoleState]]:
    """A bar drawn once from a configured run, its layout requests recorded from then on."""
    app = BarApp()
    async with app.run_test(size=size) as pilot:
        bar = app.query_one(StatusBar)
        layouts = _layout_requests(bar)
        state = _state()
        bar.update_from(state, NOW, live=True, stopping=False)
        await pilot.pause()
        yield pilot, bar, layouts, state


async def test_same_shape_repaints_and_a_new_line_or_a_wrap_lays_out() -> None:
    async with _drawn_bar((120, 20)) as (pilot, bar, layouts, state):
        text_before = str(bar.render())
        lines_before = len(text_before.splitlines())
        state.apply(rev.ItemReceived(group_id="g1"))
        layouts.clear()
        bar.update_from(state, NOW + 7, live=True, stopping=False)  # new clock and counts, same lines
        await pilot.pause()
        assert layouts == [False]
        assert str(bar.render()) != text_before  # the new text shows
        assert len(str(bar.render()).splitlines()) == lines_before

        layouts.clear()
        bar.update_from(state, NOW + 8, live=True, stopping=True, stop_note="stopping: 3 groups draining")
        await pilot.pause()
        assert layouts[0] is True  # a new line: the bar grows
        assert "3 groups draining" in str(bar.render())

        layouts.clear()
        bar.update_from(state, NOW + 9, live=True, stopping=True, stop_note="x" * 400)
        await pilot.pause()
        assert layouts[0] is True  # a line wider than the bar wraps: its height changes
        assert bar.size.height > 3


async def test_a_throttled_redraws_later_ticks_leave_counters_for_the_next_redraw_but_not_controls() -> None:
    """The ticks that finish a throttled redraw (``counters_may_wait``) do not redraw the bar for
    counters and rates (the next redraw brings them: one render of the bar per redraw, not per
    panel pair), but they do for what the operator controls or must act on."""
    app = BarApp()
    async with app.run_test(size=(160, 20)) as pilot:
        bar = app.query_one(StatusBar)
        state = _state()
        bar.update_from(state, NOW, live=True, stopping=False)
        await pilot.pause()
        shown = str(bar.render())
        state.apply(rev.ItemReceived(group_id="g1"))
        bar.update_from(state, NOW + 1, live=True, stopping=False, counters_may_wait=True)
        await pilot.pause()
        assert str(bar.render()) == shown  # a counter only: waits
        bar.update_from(state, NOW + 1, live=True, stopping=True, counters_may_wait=True)
        await pilot.pause()
        assert "STOPPING" in str(bar.render()) and "received 1" in str(bar.render())  # a control: now
        shown = str(bar.render())
        bar.update_from(state, NOW + 2, live=True, stopping=True, ui_note="UI throttled", counters_may_wait=True)
        await pilot.pause()
        assert "UI throttled" in str(bar.render()) and str(bar.render()) != shown
        state.apply(rev.ItemReceived(group_id="g2"))
        bar.update_from(state, NOW + 3, live=True, stopping=True, ui_note="UI throttled")  # the next redraw
        await pilot.pause()
        assert "received 2" in str(bar.render())


async def test_a_live_bar_has_the_budgets_line_from_its_first_frame_so_panels_never_shift() -> None:
    """The budget throttles while the env is busy and relaxes while it waits on the model:
    with the note's line coming and going, every panel below the bar moved by a line (and the
    screen was laid out again) at each turn of the env; and any busy env throttles within
    seconds of its start. A live bar has the line from its first frame."""
    async with _drawn_bar((160, 20)) as (pilot, bar, layouts, state):
        assert "UI redraws at full rate" in str(bar.render())
        unthrottled = bar.size.height
        heights, laid_out = [], []
        for second, note in enumerate(["UI throttled: redraw every 2.0s", "", "UI throttled: redraw every 3.0s", ""]):
            layouts.clear()
            bar.update_from(state, NOW + 1 + second, live=True, stopping=False, ui_note=note)
            await pilot.pause()
            laid_out.append(any(layouts))
            heights.append(bar.size.height)
            assert ("UI throttled" in str(bar.render())) == bool(note)
        assert laid_out == [False] * 4  # the note takes the line that was there
        assert heights == [unthrottled] * 4
        assert "UI redraws at full rate" in str(bar.render())


async def test_a_replays_bar_gets_the_budgets_line_when_it_first_throttles_and_keeps_it() -> None:
    """A replay is not live: no line for a budget that has not throttled; once it has, the
    line stays (a long log loading throttles, then the replay idles)."""
    async with _drawn_bar((160, 20)) as (pilot, bar, layouts, state):
        shown = []
        for second, note in enumerate(["", "UI throttled: redraw every 2.0s", ""]):
            bar.update_from(state, NOW + 1 + second, live=False, stopping=False, ui_note=note)
            await pilot.pause()
            shown.append(str(bar.render()))
        assert "UI redraws" not in shown[0] and "UI throttled" not in shown[0]
        assert "UI throttled" in shown[1]
        assert "UI redraws at full rate" in shown[2]


async def test_a_line_too_long_for_the_bar_breaks_between_its_parts_and_then_repaints() -> None:
    """The items line with drop reasons at 100 columns: it goes on two lines, broken between
    parts (each count whole on one line), each line within the bar, so a new count is a
    repaint. Left to the terminal's wrapping, the bar's height was not known from its lines and
    every redraw laid the whole screen out."""
    async with _drawn_bar((100, 20)) as (pilot, bar, layouts, state):
        state.accounting.received = 40
        state.accounting.dropped = {"identical_scores": 7, "over_length": 3}
        layouts.clear()
        bar.update_from(state, NOW + 1, live=True, stopping=False)
        await pilot.pause()
        width = bar.content_size.width
        lines = str(bar.render()).splitlines()
        assert all(len(line) <= width for line in lines), lines
        items = [line for line in lines if "errors" in line or "items" in line]
        assert len(items) == 2, items
        for part in ("dropped 10 (identical_scores 7, over_length 3)", "in flight 30", "errors 0"):
            assert any(part in line for line in items), (part, items)  # whole, on one line
        height = bar.size.height
        for second in range(2, 6):
            state.accounting.received += 1
            layouts.clear()
            bar.update_from(state, NOW + second, live=True, stopping=False)
            await pilot.pause()
            assert layouts == [False], second  # same lines: a repaint
            assert f"received {state.accounting.received}" in str(bar.render())
        assert bar.size.height == height


async def test_at_80_columns_every_count_shows_on_lines_that_fit() -> None:
    """The item counts break between each other on a narrow terminal: none is cut off."""
    async with _drawn_bar((80, 20)) as (pilot, bar, layouts, state):
        state.accounting.received = 40
        state.accounting.failed = 2
        state.accounting.dropped = {"identical_scores": 7}
        bar.update_from(state, NOW + 1, live=True, stopping=False)
        await pilot.pause()
        shown = str(bar.render())
        assert all(len(line) <= bar.content_size.width for line in shown.splitlines())
        for figure in (
            "received 40",
            "completed 0",
            "dropped 7",
            "failed 2",
            "cancelled 0",
            "in flight 31",
            "errors 0",
        ):
            assert figure in shown, (figure, shown)
