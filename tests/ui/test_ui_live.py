"""The console over the real RuntimeHost + embedded simulator: events flow in,
pause reaches the intake gate, quit stops the runtime and the app exits."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot

from hermes_console.runtime.config import RunSpec
from hermes_console.runtime.host import RuntimeHost
from hermes_console.runtime.state import ConsoleState
from hermes_console.sim.config import LatencyConfig, SimConfig
from hermes_console.sim.server import SimServer
from hermes_console.ui.app import ConsoleApp
from hermes_console.ui.config import ConsoleConfig
from tests.ui.helpers import quit_and_wait


# a ceiling, not an expectation: on a loaded 2-core box the first rollouts of the real runtime
# took ~60 s (see test_ui_live_controls); the wait returns as soon as the condition holds
async def wait_for(pilot: Pilot, pred: Callable[[ConsoleState], bool], what: str, timeout: float = 180.0) -> None:
    app = pilot.app
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred(app.state):
            return
        await pilot.pause(0.1)
    raise AssertionError(
        f"timed out waiting for {what}: status={app.state.status} "
        f"detail={app.state.status_detail!r} acc={app.state.accounting}"
    )


@pytest.mark.timeout(600)  # a hang detector: the waits' own ceilings fail first, naming the step
async def test_console_drives_a_live_runtime(tmp_path: Path) -> None:
    sim = SimServer(SimConfig(seed=7, latency=LatencyConfig(mode="fixed", mean_ms=20.0)))
    sim.start()
    spec = RunSpec(
        env="environments.terminal_tasks",
        flags=[
            "--openai.base_url",
            f"{sim.base_url}/v1",
            "--env.data_path_to_save_groups",
            str(tmp_path / "run" / "groups.jsonl"),
        ],
        runs_dir=str(tmp_path),
    )
    host = RuntimeHost(spec, exit_when_finished=False)
    app = ConsoleApp(
        host, config=ConsoleConfig(tick_hz=10.0, drain_deadline_s=3.0, ui_cpu_share=0.0)
    )  # screen follows state at once
    try:
        async with app.run_test(size=(160, 45)) as pilot:
            await wait_for(pilot, lambda s: s.rollouts_finished >= 2, "two finished rollouts")
            assert app.state.run.env_name in str(app.screen.query_one("#status").render())
            await pilot.press("p")
            await wait_for(pilot, lambda s: s.status in ("paused", "draining"), "intake paused")
            await _history_transcript_and_config(pilot)
            await quit_and_wait(pilot, within=180)  # confirms if groups are still draining
        assert host.done.done()
    finally:
        host.stop(0.5).result(timeout=30)
        host.join(10)
        sim.stop()


async def _history_transcript_and_config(pilot: Pilot) -> None:
    """The new views over real events (uuid ids, the env's real prompt, the resolved config)."""
    import re

    from textual.widgets import DataTable, RichLog

    from hermes_console.ui.screens.config_view import ConfigScreen
    from hermes_console.ui.screens.rollouts import RolloutsScreen
    from hermes_console.ui.screens.transcript import TranscriptScreen

    app = pilot.app
    app.screen.query_one("#turns").focus()  # not a group: all rollouts
    await pilot.press("h")
    await pilot.pause(0.3)
    assert isinstance(app.screen, RolloutsScreen)
    table = app.screen.query_one("#rollouts-table", DataTable)
    assert table.row_count >= 2
    assert re.fullmatch(r"g\d{4}-r\d+", table.get_row_at(0)[0].plain)  # readable ids over uuid ones
    await pilot.press("enter")
    await pilot.pause(0.3)
    assert isinstance(app.screen, TranscriptScreen)
    text = "\n".join(strip.text for strip in app.screen.query_one("#transcript", RichLog).lines)
    assert "user       " in text and "(not recorded)" not in text.split("\n── turn")[0].split("user")[1]
    await pilot.press("escape", "escape", "d")
    await pilot.pause(0.3)
    assert isinstance(app.screen, ConfigScreen)
    keys = {
        app.screen.query_one("#config-table", DataTable).get_row_at(i)[0].plain
        for i in range(app.screen.query_one("#config-table", DataTable).row_count)
    }
    assert {"env.group_size", "openai[0].base_url", "phase2[0].server_type"} <= keys
    await pilot.press("escape")
