"""The tool calls table is a Line-API view: a flood that turns its whole window over between
two redraws shows exactly the state's newest calls and renders only the lines on screen.

Oracles: the newest ``MAX_ROWS`` calls are what this test fed (their arguments and sequence
numbers, read from the events and ``state.tool_rows``, not from the widget); the rendering
cost is counted in lines made into strips (``lines_rendered``), a structural count, not a
timing: a DataTable-like table built 500 rows per turnover, this one about a screenful.
"""

from __future__ import annotations

from environments import events as ev
from hermes_console.ui.config import ConsoleConfig
from hermes_console.ui.widgets.tool_calls_table import MAX_ROWS, ToolCallsTable
from hermes_console_dev.fake_runtime import FakeRuntime
from tests.ui.helpers import NOW, make_app, settle

FLOOD = 5_000


def _calls(first: int, n: int) -> list:
    """``n`` finished calls over 64 rollouts; every 7th fails (errors are drawn differently)."""
    out: list = []
    for i in range(first, first + n):
        call = dict(rollout_id=f"flood-r{i % 64}", turn=i, call_id=f"c{i}", tool_name="terminal")
        out += [
            ev.ToolCallStarted(ts=NOW, args_head=f"echo {i}", **call),
            ev.ToolCallFinished(ts=NOW, duration_s=0.01, exit_code=1 if i % 7 == 0 else 0, **call),
        ]
    return out


def _screen_text(tools: ToolCallsTable) -> list[str]:
    """The table's content lines as drawn now (header first)."""
    return [tools.render_line(y).text for y in range(tools.scrollable_content_region.height)]


async def test_a_whole_window_turnover_shows_the_newest_calls_and_renders_only_visible_lines(main_events) -> None:
    app = make_app(FakeRuntime(main_events), config=ConsoleConfig(tick_hz=20.0, ui_cpu_share=0.0))
    async with app.run_test(size=(200, 80)) as pilot:
        await settle(pilot)
        tools = app.screen.query_one(ToolCallsTable)
        visible = tools.scrollable_content_region.height - 1  # rows under the header
        assert 5 <= visible < 100, visible
        for round_no in range(2):  # twice: the second turnover replaces a window of flood rows
            before = tools.lines_rendered
            app.apply_events(_calls(round_no * FLOOD, FLOOD), force=True)  # one redraw
            await settle(pilot)
            newest = list(app.state.tool_rows)[-MAX_ROWS:]
            assert [v.args_head for v in newest] == [
                f"echo {i}" for i in range((round_no + 1) * FLOOD - MAX_ROWS, (round_no + 1) * FLOOD)
            ]
            assert [key.value for key in tools.rows] == [str(v.seq) for v in newest]
            assert tools.row_count == MAX_ROWS
            assert [tools.get_row_at(i)[3].plain for i in (0, MAX_ROWS - 1)] == [
                newest[0].args_head,
                newest[-1].args_head,
            ]
            # The cursor follows the tail: the newest call is selected and drawn on the last line.
            assert tools.selected_key() == str(newest[-1].seq)
            rendered = tools.lines_rendered - before
            assert visible <= rendered <= 2 * visible, f"{rendered} lines rendered for {visible} on screen"
            shown = _screen_text(tools)
            assert f"echo {(round_no + 1) * FLOOD - 1} " in shown[-1], shown[-3:]
            assert f"echo {(round_no + 1) * FLOOD - visible} " in shown[1], shown[:3]


async def test_keys_and_mouse_move_the_cursor_and_open_the_call(main_events) -> None:
    """Cursor keys, page keys, home / end, a click on a row selects it, a click on the
    selected row opens its rollout; off the last row the cursor no longer follows new calls."""
    from hermes_console.ui.screens.rollout import RolloutScreen

    runtime = FakeRuntime(main_events)
    app = make_app(runtime, config=ConsoleConfig(tick_hz=20.0, ui_cpu_share=0.0))
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        tools = app.screen.query_one(ToolCallsTable)
        tools.focus()
        last = tools.row_count - 1
        assert tools.row_count > 20 and tools.cursor_row == last
        page = tools.scrollable_content_region.height - 1
        await pilot.press("up", "up")
        assert tools.cursor_row == last - 2
        await pilot.press("pageup")
        assert tools.cursor_row == last - 2 - (page + 1) + 1
        await pilot.press("home")
        assert tools.cursor_row == 0 and tools.scroll_y == 0
        await pilot.press("pagedown")
        assert tools.cursor_row == page
        await pilot.press("down")
        assert tools.cursor_row == page + 1
        # Off the tail: new calls arrive, the selection stays on its call.
        selected = tools.selected_key()
        runtime.feed(_calls(0, 3))
        await settle(pilot)
        assert tools.row_count == last + 4 and tools.selected_key() == selected
        await pilot.press("end")
        assert tools.cursor_row == tools.row_count - 1
        runtime.feed(_calls(3, 2))
        await settle(pilot)
        assert tools.cursor_row == tools.row_count - 1 and "echo 4" in tools.get_row_at(tools.cursor_row)[3].plain
        # A click on the row above the cursor (content line = rows from the top + the header + the border).
        row_y = 1 + 1 + tools.cursor_row - 1 - int(tools.scroll_y)
        await pilot.click(ToolCallsTable, offset=(20, row_y))
        await settle(pilot)
        assert tools.cursor_row == tools.row_count - 2
        expected = tools.selected_rollout()
        await pilot.click(ToolCallsTable, offset=(20, row_y))
        await settle(pilot)
        assert isinstance(app.screen, RolloutScreen) and app.screen.rollout_id == expected


async def test_a_panel_that_shrinks_keeps_the_newest_call_or_the_selected_call_on_screen(main_events) -> None:
    """When the layout gives the table fewer lines (a smaller terminal, a neighbour panel that
    grew), a table at its tail still shows the newest call on its last line, and a selected
    call that was on screen stays on screen. (Found by the batching-determinism test, seed 28:
    the panel lost two lines after the last redraw and the two newest calls fell below it.)"""
    app = make_app(FakeRuntime(main_events), config=ConsoleConfig(tick_hz=20.0, ui_cpu_share=0.0))
    async with app.run_test(size=(200, 80)) as pilot:
        await settle(pilot)
        tools = app.screen.query_one(ToolCallsTable)
        app.apply_events(_calls(0, 300), force=True)
        await settle(pilot)
        assert "echo 299 " in _screen_text(tools)[-1]
        before = tools.scrollable_content_region.height
        await pilot.resize_terminal(200, 50)
        await settle(pilot)
        assert tools.scrollable_content_region.height < before  # the oracle needs a smaller panel
        assert tools.selected_key() == str(app.state.tool_rows[-1].seq)
        assert "echo 299 " in _screen_text(tools)[-1], _screen_text(tools)[-3:]
        # Off the tail: the selected call, third from the bottom, stays on screen when the panel
        # loses more than two lines.
        tools.focus()
        await pilot.press("up", "up")
        await settle(pilot)
        assert "echo 297 " in _screen_text(tools)[-3], _screen_text(tools)[-3:]
        before = tools.scrollable_content_region.height
        await pilot.resize_terminal(200, 40)
        await settle(pilot)
        assert tools.scrollable_content_region.height < before - 2
        shown = _screen_text(tools)
        assert tools.selected_key() == str(app.state.tool_rows[-3].seq)
        assert any("echo 297 " in line for line in shown[1:]), shown


async def test_a_window_that_moves_up_by_a_few_rows_renders_only_the_new_ones(main_events) -> None:
    """With a full window, each new call pushes the oldest out and every row moves up. Its
    zebra stripe moves with it, and its line is re-assembled from cached cells, not rendered
    again: only the new rows are made into text (structural count). The oracle for the looks:
    every line equals the same line rendered from empty caches (segments, styles, row/column meta)."""
    app = make_app(FakeRuntime(main_events), config=ConsoleConfig(tick_hz=20.0, ui_cpu_share=0.0))
    async with app.run_test(size=(200, 60)) as pilot:
        await settle(pilot)
        tools = app.screen.query_one(ToolCallsTable)
        app.apply_events(_calls(0, MAX_ROWS + 50), force=True)
        await settle(pilot)
        visible = tools.scrollable_content_region.height - 1
        first = MAX_ROWS + 50

        def stripes() -> dict[str, object]:
            """Each shown call's line background, by its command."""
            out = {}
            for y in range(1, visible + 1):
                strip = tools.render_line(y)
                text = strip.text
                if "echo " in text and y - 1 + int(tools.scroll_y) != tools.cursor_row:
                    out[text.split("echo ")[1].split()[0]] = list(strip)[0].style.bgcolor
            return out

        for _ in range(3):
            shown = stripes()
            before = tools.lines_rendered
            app.apply_events(_calls(first, 3), force=True)  # three new calls, three old ones leave
            first += 3
            await settle(pilot)
            assert tools.row_count == MAX_ROWS
            assert "echo %d " % (first - 1) in _screen_text(tools)[-1]
            rendered = tools.lines_rendered - before
            assert rendered <= 3 + 1, f"{rendered} lines rendered for 3 new calls ({visible} on screen)"
            lines = [tools.render_line(y) for y in range(visible + 1)]
            tools._strips.clear()
            getattr(tools, "_rows", {}).clear()
            tools._cell_cache.clear()
            fresh = [tools.render_line(y) for y in range(visible + 1)]
            assert [list(s) for s in lines] == [list(s) for s in fresh]
            now = stripes()  # a call keeps its stripe as it moves up (odd and even rows still alternate)
            assert len(set(now.values())) == 2 and all(now[c] == shown[c] for c in now.keys() & shown.keys())
