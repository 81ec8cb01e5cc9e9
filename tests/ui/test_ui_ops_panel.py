"""The ops panel (trainer + inference servers) joins the grid only when it has something to say."""

from __future__ import annotations

from typing import List

from environments.events import Event
from hermes_console.runtime import events as rev
from hermes_console.ui.widgets.servers_table import ServersTable
from hermes_console.ui.widgets.trainer_panel import TrainerPanel

from tests.ui.eventlog import T0, LogBuilder
from tests.ui.fakes import FakeRuntime
from tests.ui.helpers import make_app, scenario, settle


def _one_server(healthy: bool = True) -> Event:
    return rev.ServerStats(ts=T0 + 10, phase=1, servers=[
        {"url": "http://127.0.0.1:8100/v1", "healthy": healthy, "in_flight": 1, "requests": 9, "errors": 0}])


def _process_run(*extra: Event) -> List[Event]:
    b = LogBuilder()
    b.run_header(mode="process")
    return b.events() + list(extra)


async def _ops_visibility(events: List[Event], size=(200, 50)) -> tuple:
    app = make_app(FakeRuntime(events))
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        screen = app.screen
        trainer, servers = screen.query_one(TrainerPanel), screen.query_one(ServersTable)
        ops_shown = screen.query_one("#panels").has_class("-ops")
        return ops_shown, trainer.display, servers.display, servers.row_count, str(trainer.query_one("#trainer-text").render())


async def test_single_healthy_server_in_process_mode_hides_the_ops_panel() -> None:
    ops, trainer, servers, _, _ = await _ops_visibility(_process_run(_one_server()))
    assert (ops, trainer, servers) == (False, False, False)


async def test_a_down_server_shows_the_servers_table_even_alone() -> None:
    ops, trainer, servers, rows, _ = await _ops_visibility(_process_run(_one_server(healthy=False)))
    assert ops and servers and not trainer and rows == 1


async def test_serve_mode_shows_trainer_figures_and_both_servers() -> None:
    ops, trainer, servers, rows, text = await _ops_visibility(scenario("serve"))
    assert ops and trainer and servers and rows == 2
    assert "step 5/20" in text and "batch 16" in text and "waiting on trainer" in text and "on inference" in text


async def test_group_size_one_warning_is_shown() -> None:
    b = LogBuilder()
    b.run_header(mode="serve")
    b.add(5.0, rev.TrainerStatus, state="running", group_size=1, batch_size=8,
          warning="group_size is 1: run-api under-counts the queue")
    _, trainer, _, _, text = await _ops_visibility(b.events())
    assert trainer and "under-counts the queue" in text


async def test_compact_layout_reaches_the_ops_panel_through_its_tab() -> None:
    app = make_app(FakeRuntime(_process_run(_one_server())))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        for _ in range(5):  # groups -> turns -> tools -> sandboxes -> rewards -> ops
            await pilot.press("tab")
            await settle(pilot, 1)
        ops = app.screen.query_one("#ops")
        assert ops.has_class("-current") and ops.display
        assert app.screen.query_one(ServersTable).row_count == 1
