"""Panels: follow / "N new", filter, reasoning toggle, errors-only, compact layout, loading."""

from __future__ import annotations

import threading

from environments import events as ev
from hermes_console.ui.app import ConsoleApp
from hermes_console.ui.config import ConsoleConfig
from hermes_console.ui.screens.main import MainScreen
from hermes_console.ui.widgets.groups_table import GroupsTable
from hermes_console.ui.widgets.tool_calls_table import ToolCallsTable
from hermes_console.ui.widgets.turns_stream import TurnsStream
from hermes_console_dev.fake_runtime import FakeRuntime
from tests.ui.helpers import NOW, make_app, scenario, settle


def more_turns(n: int, rollout_id: str = "g0034-r1") -> list:
    return [
        ev.TurnFinished(ts=NOW, rollout_id=rollout_id, turn=100 + i, latency_s=0.1, content=f"late line {i}")
        for i in range(n)
    ]


async def test_stream_stops_following_on_scroll_up_and_counts_new_lines(main_events) -> None:
    runtime = FakeRuntime(main_events)
    app = make_app(runtime)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        stream = app.screen.query_one(TurnsStream)
        stream.focus()
        assert stream.following and stream.is_vertical_scroll_end
        await pilot.press("pageup")
        await settle(pilot)
        assert not stream.following
        scroll_y = stream.scroll_y
        runtime.feed(more_turns(7))
        await settle(pilot)
        assert stream.new_lines == 7
        assert "7 new" in str(stream.border_title)
        assert stream.scroll_y == scroll_y  # the operator's view did not jump
        await pilot.press("f")
        await settle(pilot)
        assert stream.following and stream.new_lines == 0
        assert stream.is_vertical_scroll_end
        runtime.feed(more_turns(3))
        await settle(pilot)
        assert stream.new_lines == 0 and stream.is_vertical_scroll_end


async def test_end_key_follows_again(main_events) -> None:
    app = make_app(FakeRuntime(main_events))
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        stream = app.screen.query_one(TurnsStream)
        stream.focus()
        await pilot.press("home")
        assert not stream.following
        await pilot.press("end")
        assert stream.following


async def test_filter_limits_stream_and_tool_calls_to_one_rollout(main_events) -> None:
    runtime = FakeRuntime(main_events)
    app = make_app(runtime)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        await pilot.press("slash")
        await settle(pilot)
        await pilot.press(*"g0033-r2", "enter")
        await settle(pilot)
        stream = app.screen.query_one(TurnsStream)
        tools = app.screen.query_one(ToolCallsTable)
        lines = [strip.text for strip in stream.lines]
        assert lines and all("g0033-r2" in line for line in lines)
        assert tools.row_count > 0
        assert {tools.get_row_at(i)[1].plain for i in range(tools.row_count)} == {"g0033-r2"}
        assert "filter: g0033-r2" in str(tools.border_title)
        # New events for other rollouts stay out; matching ones come in.
        runtime.feed(more_turns(2, "g0031-r0") + more_turns(1, "g0033-r2"))
        await settle(pilot)
        assert [strip.text for strip in stream.lines][-1].endswith("late line 0")
        assert all("g0033-r2" in strip.text for strip in stream.lines)
        # Empty filter shows everything again.
        await pilot.press("slash")
        await settle(pilot)
        for _ in range(8):
            await pilot.press("backspace")
        await pilot.press("enter")
        await settle(pilot)
        assert len({t.text.split()[1] for t in stream.lines if len(t.text.split()) > 1}) > 1


async def test_reasoning_collapsed_by_default_and_toggles(main_events) -> None:
    app = make_app(FakeRuntime(main_events))
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        stream = app.screen.query_one(TurnsStream)
        text = "\n".join(s.text for s in stream.lines)
        assert "reasoning (" in text and "I should inspect calc.py" not in text.replace("\n", " ")
        await pilot.press("r")
        await settle(pilot)
        text = " ".join(s.text for s in stream.lines)
        assert "reasoning (" not in text and "inspect calc.py" in text
        assert "reasoning shown" in str(stream.border_subtitle)


async def test_errors_only_toggle() -> None:
    app = make_app(FakeRuntime(scenario("errors")))
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        tools = app.screen.query_one(ToolCallsTable)
        all_rows = tools.row_count
        assert all_rows == len(app.state.tool_rows)
        await pilot.press("o")
        await settle(pilot)
        statuses = [tools.get_row_at(i)[5].plain for i in range(tools.row_count)]
        assert 0 < len(statuses) < all_rows
        # Errors, plus the calls still running (they may yet fail): the same rule on a
        # rebuild as on live updates, so the table does not depend on when `o` was pressed.
        running = {v.seq for v in app.state.tool_rows if v.status == "running"}
        assert all(s.startswith("✖") or s == "… running" for s in statuses)
        assert sum(s.startswith("✖") for s in statuses) == app.state.tool_errors_total
        assert sum(s == "… running" for s in statuses) == len(running)
        assert "errors only" in str(tools.border_title)
        await pilot.press("o")
        await settle(pilot)
        assert tools.row_count == all_rows


async def test_group_age_is_coloured_against_worker_timeout(main_events) -> None:
    app = make_app(FakeRuntime(main_events))
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(GroupsTable)
        ages = {key: table.get_row(key)[4] for key in table.keys()}
        styles = {cell.plain: str(cell.style) for cell in ages.values()}
        assert styles["9m20s / 10m00s"] == "bold red"  # 93%
        assert styles["7m50s / 10m00s"] == "yellow"  # 78%
        assert styles["40s / 10m00s"] == ""


async def test_compact_layout_at_80x24_tabs_between_panels(main_events) -> None:
    app = make_app(FakeRuntime(main_events))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, MainScreen) and screen.compact
        visible = [p.id for p in screen.query(".panel") if p.display and p.has_class("-current")]
        assert visible == ["groups"]
        seen = []
        for _ in range(6):
            await pilot.press("tab")
            await settle(pilot, 1)
            seen.append([p.id for p in screen.query(".panel.-current")][0])
            assert screen.query_one(f"#{seen[-1]}").region.height > 3  # actually on screen
        # Two servers: the Servers tab is in the cycle; no trainer outside serve mode.
        assert seen == ["turns", "tools", "sandboxes", "rewards", "servers", "groups"]


async def test_wide_layout_shows_every_panel(main_events) -> None:
    app = make_app(FakeRuntime(main_events))
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert not screen.compact
        shown = {p.id: p.region for p in screen.query(".panel") if p.display}
        assert set(shown) == {"groups", "turns", "tools", "sandboxes", "rewards", "servers"}  # no trainer: not serve
        for panel_id, region in shown.items():
            # The server list is exactly as tall as its rows (2 + header + border).
            assert region.width > 20 and region.height >= (5 if panel_id == "servers" else 8), panel_id


async def test_first_frame_shows_loading_while_runtime_starts() -> None:
    release = threading.Event()

    class SlowStart(FakeRuntime):
        def start(self) -> None:
            release.wait(5)  # loading an env can take seconds
            super().start()
            self.feed(scenario("main"))

    runtime = SlowStart()
    app = ConsoleApp(runtime, now=NOW, config=ConsoleConfig(tick_hz=20.0))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, MainScreen)
        assert "LOADING" in str(app.screen.query_one("#status").render())
        # The groups panel says what the run waits for; the other panels are laid out and drawn
        # (empty) while the env loads, not all at once as its first groups arrive (BENCHMARKS P1).
        groups = app.screen.query_one("#groups")
        assert "loading the env" in groups.render_line(1).text  # nothing reported yet
        for panel in ("#turns", "#tools", "#sandboxes", "#rewards"):
            assert app.screen.query_one(panel).region.height > 2, panel
        release.set()
        await app.workers.wait_for_complete()
        # the run's events are drained and drawn on the next ticks (more of them on a loaded box)
        for _ in range(200):  # bounded
            if "RUNNING" in str(app.screen.query_one("#status").render()):
                break
            await pilot.pause(0.05)
        assert app.state.status == "running"
        assert "RUNNING" in str(app.screen.query_one("#status").render())
        assert "loading" not in groups.render_line(1).text


async def test_tool_calls_sort_by_any_column_and_keep_the_selection(main_events) -> None:
    """Like the Groups/Sandboxes tables: a header click sorts (again: reverse), `s` moves to
    the next column, `S` reverses; new calls land in their sorted place and the cursor
    stays on the call it was on."""
    from hermes_console.ui.widgets.keyed_table import sort_value

    runtime = FakeRuntime(main_events)
    app = make_app(runtime)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        tools = app.screen.query_one(ToolCallsTable)
        tools.focus()
        columns = [key for key, _, _ in ToolCallsTable.COLUMNS]

        def column(name: str) -> list[tuple]:
            index = columns.index(name)
            return [sort_value(tools.get_row_at(i)[index]) for i in range(tools.row_count)]

        def labels() -> list[str]:
            return [str(c.label.plain) for c in tools.columns.values()]

        # The "tool" header, clicked (inside the panel's border, past time and rollout).
        await pilot.click(ToolCallsTable, offset=(1 + 10 + 12 + 2, 1))
        await settle(pilot)
        assert tools.sort_column == "tool" and "tool ▲" in labels()
        assert column("tool") == sorted(column("tool"))
        await pilot.click(ToolCallsTable, offset=(1 + 10 + 12 + 2, 1))
        await settle(pilot)
        assert tools.sort_reverse and column("tool") == sorted(column("tool"), reverse=True)
        await pilot.press("s")  # next column: arguments, ascending
        await settle(pilot)
        assert tools.sort_column == "args" and not tools.sort_reverse
        assert column("args") == sorted(column("args"))
        await pilot.press("s", "s")  # dur, then status
        await settle(pilot)
        assert tools.sort_column == "status" and column("status") == sorted(column("status"))
        await pilot.press("S")
        await settle(pilot)
        assert tools.sort_reverse and "status ▼" in labels()
        assert column("status") == sorted(column("status"), reverse=True)

        # Rows update under the sort; the cursor stays on its call.
        tools.move_cursor(row=tools.row_count // 2)
        selected, rollout = tools.selected_key(), tools.selected_rollout()
        before = tools.row_count
        new_calls = []
        for i in range(6):
            call = dict(rollout_id="g0034-r1", turn=200 + i, call_id=f"late-{i}", tool_name="terminal")
            new_calls += [
                ev.ToolCallStarted(ts=NOW, args_head=f'{{"command": "echo {i}"}}', **call),
                ev.ToolCallFinished(ts=NOW, duration_s=0.5, exit_code=i % 2, **call),
            ]
        runtime.feed(new_calls)
        await settle(pilot)
        assert tools.row_count == before + 6
        assert tools.selected_key() == selected and tools.selected_rollout() == rollout
        assert column("status") == sorted(column("status"), reverse=True)
