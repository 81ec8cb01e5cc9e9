"""The `/` filters match readable labels (g0001, g0001-r1, or a part of one), not only the
raw uuid-style ids the runtime uses -- including rollouts that start after the filter was set.

Oracle: the rollout ids of the events fed in, and the labels' documented form (groups
g0001, g0002 in start order; rollouts -r0, -r1 in their group's start order)."""

from __future__ import annotations

from textual.widgets import DataTable

from environments import events as ev
from hermes_console.runtime import events as rev
from hermes_console.ui.screens.rollouts import RolloutsScreen
from hermes_console.ui.widgets.tool_calls_table import ToolCallsTable
from hermes_console.ui.widgets.turns_stream import TurnsStream
from hermes_console_dev.fake_runtime import FakeRuntime
from tests.ui.eventlog import T0
from tests.ui.helpers import make_app, settle


def _group(t: float, group_id: str, rollouts: list[str], task: str) -> list:
    out: list = [
        rev.ItemReceived(ts=t, group_id=group_id, item_summary=task),
        ev.GroupStarted(ts=t, group_id=group_id, item_summary=task, group_size=len(rollouts), phase=1),
    ]
    for i, rid in enumerate(rollouts):
        out += [
            ev.RolloutStarted(ts=t + 0.1 * i, rollout_id=rid, group_id=group_id, item_summary=task),
            ev.TurnStarted(ts=t + 1, rollout_id=rid, turn=1),
            ev.TurnFinished(ts=t + 2, rollout_id=rid, turn=1, latency_s=1.0, content=f"turn of {rid}", tool_calls=1),
            ev.ToolCallStarted(
                ts=t + 2,
                rollout_id=rid,
                turn=1,
                call_id=f"c-{rid}",
                tool_name="terminal",
            ),
            ev.ToolCallFinished(
                ts=t + 3, rollout_id=rid, turn=1, call_id=f"c-{rid}", tool_name="terminal", duration_s=1.0
            ),
            ev.RolloutFinished(
                ts=t + 4, rollout_id=rid, group_id=group_id, reward=float(i), turns_used=1, finished_naturally=True
            ),
        ]
    return out


G1 = ("3f2a9c1d0b7e", ["7d1c-uuid-a", "9e0f-uuid-b", "a1b2-uuid-c"])
G2 = ("c0ffee123456", ["55aa-uuid-d", "66bb-uuid-e"])


def _shown(app) -> tuple[set[str], set[str]]:
    """The rollout labels in the tool calls table and in the turns stream."""
    tools = app.screen.query_one(ToolCallsTable)
    stream = app.screen.query_one(TurnsStream)
    in_tools = {tools.get_row_at(i)[1].plain for i in range(tools.row_count)}
    in_stream = {word for strip in stream.lines for word in strip.text.split() if word.startswith("g000")}
    return in_tools, in_stream


async def _filter(pilot, text: str) -> None:
    await pilot.press("slash")
    await settle(pilot)
    await pilot.press(*["backspace"] * 20, *text, "enter")
    await settle(pilot)


async def test_stream_and_tool_filters_match_readable_labels() -> None:
    runtime = FakeRuntime([rev.RuntimeStatus(ts=T0, status="running"), *_group(T0, *G1, task="count lines")])
    app = make_app(runtime)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        assert [app.state.history.label_of(r) for r in G1[1]] == ["g0001-r0", "g0001-r1", "g0001-r2"]
        await _filter(pilot, "g0001-r1")  # one rollout by its label
        assert _shown(app) == ({"g0001-r1"}, {"g0001-r1"})
        await _filter(pilot, "g0001-r")  # a part of a label: the group's rollouts
        assert _shown(app) == ({"g0001-r0", "g0001-r1", "g0001-r2"},) * 2
        # a label typed before its rollouts exist: they come in as they start
        await _filter(pilot, "g0002")
        assert _shown(app) == (set(), set())
        runtime.feed(_group(T0 + 10, *G2, task="make a file"))
        await settle(pilot)
        assert _shown(app) == ({"g0002-r0", "g0002-r1"},) * 2
        assert "filter: g0002" in str(app.screen.query_one(ToolCallsTable).border_title)


async def test_rollouts_history_filter_matches_readable_labels() -> None:
    events = [
        rev.RuntimeStatus(ts=T0, status="running"),
        *_group(T0, *G1, task="count"),
        *_group(T0 + 10, *G2, task="x"),
    ]
    app = make_app(FakeRuntime(events))
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        await pilot.press("h", "a")
        await settle(pilot)
        assert isinstance(app.screen, RolloutsScreen)
        table = app.screen.query_one("#rollouts-table", DataTable)
        for text, expected in (
            ("g0001-r2", {"g0001-r2"}),
            ("g0002", {"g0002-r0", "g0002-r1"}),
            ("g0001-r", {"g0001-r0", "g0001-r1", "g0001-r2"}),
        ):
            await pilot.press("slash", *["backspace"] * 20, *text, "enter")
            await settle(pilot)
            assert {table.get_row_at(i)[0].plain for i in range(table.row_count)} == expected, text


async def test_keys_typed_before_the_filter_input_has_focus_are_not_lost() -> None:
    """`/` then typing at once (a fast operator, keys arriving in one burst over ssh, a loaded
    box): the dialog's input takes focus a message later than the dialog shows, and the keys
    that arrive in between must land in it, enter included."""
    from hermes_console.ui.screens.filter_modal import FilterModal

    runtime = FakeRuntime([rev.RuntimeStatus(ts=T0, status="running"), *_group(T0, *G1, task="count lines")])
    app = make_app(runtime)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        await pilot.press("slash")
        await settle(pilot)
        assert isinstance(app.screen, FilterModal)
        app.screen.set_focus(None)  # the moment before the input is focused, made to last
        await pilot.press(*"g0001-r1")
        await pilot.press("enter")
        await settle(pilot)
        assert not isinstance(app.screen, FilterModal)
        assert app.screen.filter.text == "g0001-r1"
        assert _shown(app) == ({"g0001-r1"}, {"g0001-r1"})
        # again with a filter set: what is typed replaces it (it shows selected), not appends
        await pilot.press("slash")
        await settle(pilot)
        app.screen.set_focus(None)
        await pilot.press(*"g0001-r2", "enter")
        await settle(pilot)
        assert app.screen.filter.text == "g0001-r2"
