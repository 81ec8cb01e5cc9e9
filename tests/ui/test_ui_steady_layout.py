"""A run's screen is laid out when it is first drawn and when the terminal changes size, not
at the moments every run goes through once: the env finishing its loading, the turns stream
and the tool-call table first overflowing their panels, the UI's budget first throttling.
Each of those re-arranged every widget (a layout pass: 20-50 ms of the UI thread at 160x45,
taken from the env's GIL while its first groups run; BENCHMARKS P1, session 22). At 200
columns the scenario's status lines fit without a fourth line (at 160 its first data-health
report needs one: a layout, once, for text that grew; tests/ui/test_ui_status_repaint.py)."""

from __future__ import annotations

import threading

from hermes_console.ui.app import ConsoleApp
from hermes_console.ui.config import ConsoleConfig
from hermes_console.ui.screens.main import MainScreen
from hermes_console.ui.widgets.groups_table import GroupsTable
from hermes_console.ui.widgets.servers_table import ServersTable
from hermes_console.ui.widgets.status_bar import StatusBar
from hermes_console.ui.widgets.tool_calls_table import ToolCallsTable
from hermes_console.ui.widgets.turns_stream import TurnsStream
from hermes_console_dev.fake_runtime import FakeRuntime
from tests.helpers.ui import layout_passes
from tests.ui.helpers import NOW, scenario, settle

THROTTLED = "UI throttled: redraw every 2.0s (CPU 9% of a core, budget 2%)"


async def _until(pilot, done, rounds: int = 200) -> None:
    """The next ticks drain and draw (more of them on a loaded box); bounded."""
    for _ in range(rounds):
        if done():
            return
        await pilot.pause(0.05)


async def test_loading_overflowing_streams_and_the_first_throttle_lay_nothing_out() -> None:
    release = threading.Event()

    run = scenario("main")
    header = 2  # loading, then the run's configuration (its servers): known while the env loads

    class SlowStart(FakeRuntime):
        def start(self) -> None:
            release.wait(5)  # the env's setup takes seconds
            super().start()
            self.feed(run[header:])

    assert run[1].kind == "run_configured"
    app = ConsoleApp(SlowStart(run[:header]), now=NOW, config=ConsoleConfig(tick_hz=20.0))
    note = [""]
    app.ui_note = lambda: note[0]  # type: ignore[method-assign]
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, MainScreen)
        status = app.screen.query_one(StatusBar)
        assert "LOADING" in str(status.render())
        groups = app.screen.query_one(GroupsTable)
        assert "loading terminal_tasks" in groups.render_line(1).text  # the table says what it waits for
        # The configured servers have their panel before the first health check, unchecked.
        servers = app.screen.query_one(ServersTable)
        assert not servers.has_class("-absent") and servers.row_count == 2
        assert [str(servers.get_row_at(i)[1]) for i in range(2)] == ["–", "–"]
        with layout_passes() as passes:
            release.set()
            await app.workers.wait_for_complete()
            await _until(
                pilot,
                lambda: (
                    "RUNNING" in str(status.render())
                    and bool(groups.row_count)
                    and str(servers.get_row_at(0)[1]) == "up"
                ),
            )
            assert "RUNNING" in str(status.render())
            assert groups.row_count and "loading" not in groups.render_line(1).text
            assert [str(servers.get_row_at(i)[1]) for i in range(2)] == ["up", "up"]
            turns, tools = app.screen.query_one(TurnsStream), app.screen.query_one(ToolCallsTable)
            # both streams hold more than their panels show
            assert turns.virtual_size.height > turns.scrollable_content_region.height
            assert tools.virtual_size.height > tools.scrollable_content_region.height
            note[0] = THROTTLED
            app.redraw_soon()
            await _until(pilot, lambda: "UI throttled" in str(status.render()))
            assert "UI throttled" in str(status.render())
            assert passes[0] == 0
