"""A throttled redraw's last changes are drawn even when nothing changes after them.

A throttled redraw draws a few panels a tick; the ticks that finish it leave counters (the
status bar) and panels that changed again meanwhile for "the next redraw". A replay that
reaches its end (its clock is the log's last event) or a live run that goes quiet has no next
redraw unless one is asked for: the bar kept an old position ("10% … event 512/1261") and old
counts for good. Oracle: the bar's and the panels' text against a console drawn from scratch
over the same state."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from environments import events as ev
from hermes_console.runtime import events as rev
from hermes_console.runtime.state import ConsoleState
from hermes_console.ui.widgets.groups_table import GroupsTable
from hermes_console.ui.widgets.status_bar import StatusBar
from hermes_console_dev.fake_runtime import FakeRuntime
from tests.ui.helpers import NOW, make_app, settle


def _received(gid: str) -> rev.ItemReceived:
    return rev.ItemReceived(group_id=gid, ts=NOW)


def _counts_shown(bar: StatusBar, state: ConsoleState) -> bool:
    """The state's own counts (not the bar's code) are what the bar shows."""
    shown = str(bar.render())
    acc = state.accounting
    return f"received {acc.received}" in shown and f"in flight {acc.in_flight}" in shown


@pytest.mark.parametrize(
    ("tail", "shown"),
    [
        pytest.param(
            [rev.LoopLag(lag_ms=777.0, ts=NOW)],
            lambda bar, groups: "lag 777ms" in str(bar.render()),
            id="a counter only: the bar waits",
        ),
        pytest.param(
            [_received("tail-3"), rev.RuntimeStatus(status="running", detail="a new detail", ts=NOW)],
            lambda bar, groups: "tail-3" in groups.keys() and "a new detail" in str(bar.render()),
            id="a control changes: the bar draws, groups wait",
        ),
    ],
)
async def test_changes_left_by_a_throttled_redraws_last_tick_are_drawn_once_the_run_is_quiet(
    main_events, tail: list, shown: Callable[[StatusBar, GroupsTable], bool]
) -> None:
    app = make_app(FakeRuntime(main_events))
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot, 4)
        screen = app.screen
        app.panels_per_redraw = lambda: 1  # type: ignore[method-assign]  # throttled: one panel a tick
        # Between two of the app's own ticks (no await): a throttled redraw that draws groups
        # first, its next ticks until one panel is still owed; then ``tail`` arrives, and the
        # tick that draws that last panel leaves the bar's counters or a panel that changed
        # again for "the next redraw".
        screen._drawn_at["groups"] = -2  # the least recently drawn: the first tick draws it
        app._fold(
            [_received("tail-1"), _received("tail-2"), ev.SandboxCreated(task_id="tail-box", backend="local", ts=NOW)]
        )
        app._redraw()
        assert screen._owed and "groups" not in screen._owed, "groups drawn, the rest left for the next ticks"
        for _ in range(10):
            if len(screen._owed or ()) <= 1:
                break
            app._redraw()
        assert screen._owed is not None and len(screen._owed) == 1, screen._owed
        app._fold(tail)
        app._redraw()
        assert screen._owed is None
        bar, groups = screen.query_one(StatusBar), screen.query_one(GroupsTable)
        assert not shown(bar, groups), "the last tick left it (else this test shows nothing)"
        app.panels_per_redraw = lambda: None  # type: ignore[method-assign]
        # Quiet from here on (the fixed clock: as a replay's at its end): the next ticks bring
        # what the last ones left.
        for _ in range(200):  # bounded; a loaded machine's budget spaces redraws out (seconds)
            if shown(bar, groups):
                break
            await pilot.pause(0.05)
        assert shown(bar, groups), str(bar.render())
        assert _counts_shown(bar, app.state), str(bar.render())
