"""The trainer panel and the server list render ConsoleState (mounted in a tiny app)."""

from __future__ import annotations

from textual.app import App, ComposeResult

from hermes_console.runtime import events as rev
from hermes_console.runtime.state import ConsoleState
from hermes_console.runtime.trainer import GROUP_SIZE_ONE_WARNING
from hermes_console.ui.widgets.servers_table import ServersTable, server_cells
from hermes_console.ui.widgets.trainer_panel import TrainerPanel, render_trainer


def _state() -> ConsoleState:
    s = ConsoleState()
    for step, sent in ((0, 2), (0, 4), (1, 6), (2, 9)):
        s.apply(
            rev.TrainerStatus(
                state="running",
                current_step=step,
                total_steps=5,
                queue_size=step + 1,
                batch_size=8,
                group_size=4,
                env_weight=0.5,
                groups_sent=sent,
                wait_trainer_s=3.0,
                wait_inference_s=1.5,
                env_id=1,
                backpressure=step == 2,
            )
        )
    s.apply(
        rev.ServerStats(
            phase=1,
            servers=[
                {
                    "url": "http://127.0.0.1:1/v1",
                    "healthy": True,
                    "in_flight": 2,
                    "requests": 40,
                    "errors": 0,
                    "latency_ms_p50": 61.0,
                },
                {
                    "url": "http://127.0.0.1:2/v1",
                    "healthy": False,
                    "in_flight": 0,
                    "requests": 9,
                    "errors": 1,
                    "connection_failures": 4,
                    "rerouted": 2,
                    "last_connection_failure": "APIConnectionError: Connection error.",
                },
            ],
        )
    )
    return s


def test_state_keeps_one_point_per_trainer_step():
    s = _state()
    assert [p.current_step for p in s.trainer_history] == [0, 1, 2]
    assert s.groups_per_trainer_step() == [2, 3]  # 4 -> 6 -> 9
    assert [r["url"] for r in s.unhealthy_servers()] == ["http://127.0.0.1:2/v1"]


def test_trainer_text_and_server_cells():
    s = _state()
    text = render_trainer(s.trainer).plain
    assert "step 2/5" in text and "weight 0.50" in text and "back-pressure" in text
    assert "waiting on trainer 3.0s  on inference 1.5s" in text
    warned = render_trainer(rev.TrainerStatus(state="running", warning=GROUP_SIZE_ONE_WARNING)).plain
    assert "under-counts" in warned
    cells = server_cells(s.servers[1])
    assert str(cells[1]) == "DOWN" and str(cells[5]) == "4" and "Connection" in cells[-1]
    assert render_trainer(None).plain.startswith("no trainer")


class _Harness(App[None]):
    def compose(self) -> ComposeResult:
        yield TrainerPanel(id="trainer")
        yield ServersTable(id="servers")


async def test_widgets_mount_and_update():
    app = _Harness()
    async with app.run_test(size=(120, 30)) as pilot:
        s = _state()
        app.query_one(TrainerPanel).update_from(s)
        table = app.query_one(ServersTable)
        table.update_from(s)
        await pilot.pause()
        assert table.row_count == 2 and table.border_title == "Servers (2, 1 down)"
        assert app.query_one(TrainerPanel).border_title == "Trainer (running)"
