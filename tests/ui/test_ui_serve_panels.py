"""Trainer panel and server list on the main screen: each appears only when it has
something to say, and each is its own tab in the compact layout."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Tabs

from environments.events import Event
from hermes_console.runtime import events as rev
from hermes_console.ui.app import ConsoleApp
from hermes_console.ui.format import age
from hermes_console.ui.screens.main import MainScreen
from hermes_console.ui.widgets.servers_table import ServersTable
from hermes_console.ui.widgets.trainer_panel import TrainerPanel
from hermes_console_dev.fake_runtime import FakeRuntime
from tests.ui.eventlog import T0, LogBuilder, serve_run
from tests.ui.helpers import NOW, make_app, messages, scenario, settle

SERVER = "http://127.0.0.1:8100/v1"


def _servers(*healthy: bool, at: float = 10.0) -> Event:
    return rev.ServerStats(
        ts=T0 + at,
        phase=1,
        servers=[
            {"url": f"http://127.0.0.1:{8100 + i}/v1", "healthy": up, "in_flight": 1, "requests": 9, "errors": 0}
            for i, up in enumerate(healthy)
        ],
    )


def _run(mode: str, *extra: Event) -> list[Event]:
    b = LogBuilder()
    b.run_header(mode=mode)
    return b.events() + list(extra)


def _shown(app: ConsoleApp) -> dict[str, bool]:
    screen = app.screen
    return {"trainer": screen.query_one(TrainerPanel).display, "servers": screen.query_one(ServersTable).display}


def _visible_tabs(app: ConsoleApp) -> list[str]:
    return [
        (t.id or "").removeprefix("tab-") for t in app.screen.query_one(Tabs).query("Tab") if not t.has_class("-hidden")
    ]


async def _state_of(events: list[Event], size: tuple[int, int] = (200, 50)) -> tuple[dict[str, bool], int, str]:
    app = make_app(FakeRuntime(events))
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        trainer_text = str(app.screen.query_one("#trainer-text").render())
        return _shown(app), app.screen.query_one(ServersTable).row_count, trainer_text


# ---------------------------------------------------------------------- when they appear


async def test_trainer_panel_appears_only_in_serve_mode() -> None:
    shown, _, _ = await _state_of(_run("process", _servers(True, True)))
    assert shown["trainer"] is False
    shown, _, text = await _state_of(scenario("serve"))
    assert shown["trainer"] is True
    assert "step 5/20" in text and "batch 16" in text and "own 3, all envs 6" in text
    # Where the time goes, and which side holds things up (the scene waits more on inference).
    assert "waiting on trainer 13.6s  on inference 42.5s" in text and "bottleneck: inference" in text


async def test_trainer_panel_shows_in_serve_mode_before_the_first_trainer_status() -> None:
    shown, _, text = await _state_of(_run("serve"))
    assert shown["trainer"] is True and text.startswith("no trainer")


async def test_servers_table_is_hidden_with_one_healthy_server() -> None:
    shown, _, _ = await _state_of(_run("process", _servers(True)))
    assert shown["servers"] is False


async def test_servers_table_shows_two_servers() -> None:
    shown, rows, _ = await _state_of(_run("process", _servers(True, True)))
    assert shown["servers"] is True and rows == 2


async def test_a_single_server_that_is_down_shows_the_table() -> None:
    shown, rows, _ = await _state_of(_run("process", _servers(False)))
    assert shown == {"trainer": False, "servers": True} and rows == 1


async def test_group_size_one_warning_is_shown() -> None:
    _, _, text = await _state_of(serve_run(group_size=1))
    assert "! group_size is 1" in text and "under-counts" in text
    _, _, text = await _state_of(serve_run(group_size=4))
    assert "group_size is 1" not in text


# ---------------------------------------------------------------------- what they show


async def test_the_down_server_row_is_red_and_says_for_how_long() -> None:
    events = scenario("serve")
    down_since = next(
        row["down_since"]
        for e in reversed(events)
        if isinstance(e, rev.ServerStats)
        for row in e.servers
        if not row["healthy"]
    )
    app = make_app(FakeRuntime(events))
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(ServersTable)
        assert table.border_title == "Servers (2, 1 down)"
        down, up = (table.get_row(key) for key in table.keys())
        assert str(down[1]) == "DOWN" and str(up[1]) == "up"
        assert isinstance(down[0], Text) and "red" in str(down[0].style) and "red" not in str(up[0].style)
        assert str(down[2]) == age(NOW - down_since) and str(up[2]) == "–"
        assert "Connection refused" in str(down[-1])


async def test_enter_on_a_server_shows_its_whole_last_error() -> None:
    app = make_app(FakeRuntime(scenario("serve")))
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        app.screen.query_one(ServersTable).focus()
        await pilot.press("enter")
        await settle(pilot)
        assert any(SERVER in m and "Connection refused" in m for m in messages(app, "error"))


async def test_wide_serve_layout_fits_every_panel() -> None:
    app = make_app(FakeRuntime(scenario("serve")))
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        screen = app.screen
        regions = {p.id: p.region for p in screen.query(".panel")}
        for panel_id, region in regions.items():
            assert region.width > 20 and region.height >= 5, panel_id
        assert regions["servers"].height == 2 + 3  # rows + header + border, no more
        assert regions["servers"].width == screen.size.width  # room for every column
        assert regions["trainer"].y == regions["rewards"].y  # beside the rewards
        assert regions["groups"].height >= 12 and regions["tools"].height >= 12  # the busy panels keep room


# ---------------------------------------------------------------------- compact (80×24)


async def test_compact_serve_reaches_trainer_and_servers_through_their_tabs() -> None:
    app = make_app(FakeRuntime(scenario("serve")))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert _visible_tabs(app) == ["groups", "turns", "tools", "sandboxes", "rewards", "trainer", "servers"]
        seen = []
        for _ in range(7):
            await pilot.press("tab")
            await settle(pilot, 1)
            current = app.screen.query_one(".panel.-current")
            seen.append(current.id)
            assert current.region.height > 8 and current.region.width >= 76, current.id
        assert seen == ["turns", "tools", "sandboxes", "rewards", "trainer", "servers", "groups"]


async def test_compact_tabs_skip_panels_with_nothing_to_say() -> None:
    app = make_app(FakeRuntime(_run("process", _servers(True))))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert _visible_tabs(app) == ["groups", "turns", "tools", "sandboxes", "rewards"]
        seen = []
        for _ in range(5):
            await pilot.press("tab")
            await settle(pilot, 1)
            seen.append(app.screen.query_one(".panel.-current").id)
        assert seen == ["turns", "tools", "sandboxes", "rewards", "groups"]


async def test_servers_tab_goes_away_when_the_second_server_does() -> None:
    runtime = FakeRuntime(_run("process", _servers(True, False)))
    app = make_app(runtime)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, MainScreen)
        screen.query_one(Tabs).active = "tab-servers"
        await settle(pilot)
        assert screen.query_one(".panel.-current").id == "servers"
        runtime.feed([_servers(True, at=20.0)])  # back to one healthy server
        await settle(pilot)
        assert "servers" not in _visible_tabs(app)
        assert screen.query_one(".panel.-current").id == "groups"  # not a blank tab
        assert screen.query_one("#groups").region.height > 8
