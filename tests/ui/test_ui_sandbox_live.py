"""The sandbox drill-down shows the running command's output as it grows (issue 12),
from a real local sandbox: details come from the runtime's own ``sandbox_ops.details``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import RichLog

from environments import sandboxes as sb
from hermes_console.runtime import sandbox_ops
from hermes_console.runtime.payloads import SandboxDetails
from hermes_console.ui.screens.sandbox import SandboxScreen
from hermes_console.ui.widgets.sandboxes_table import SandboxesTable
from hermes_console_dev.fake_runtime import FakeRuntime
from tests.helpers.sandboxes import local_sandbox
from tests.ui.helpers import make_app, settle

pytestmark = pytest.mark.timeout(400)  # a hang detector; the steps' own ceilings fail first
REAL = "live-tail-probe"
# the printed lines are computed, so the command's own text (shown above its output) never matches them
SLOW = (
    "echo line-$((0+1)); while [ ! -e go ]; do sleep 0.05; done; echo line-$((1+1)); "
    "while [ ! -e stop ]; do sleep 0.05; done; echo done"
)


class RealDetailsRuntime(FakeRuntime):
    """Scripted events, but the drill-down's details are the real sandbox's (in a thread, as the host does)."""

    def sandbox_details(self, task_id: str) -> Future[SandboxDetails]:
        self.calls.append(("sandbox_details", (task_id,), {}))
        future: Future[SandboxDetails] = Future()

        def fetch() -> None:
            try:
                future.set_result(sandbox_ops.details(REAL))
            except BaseException as exc:  # noqa: BLE001 - handed to the UI like the host does
                future.set_exception(exc)

        threading.Thread(target=fetch, daemon=True).start()
        return future


@pytest.fixture
def real_box(tmp_path: Path) -> Iterator[sb.ManagedSandbox]:
    yield from local_sandbox(tmp_path, REAL)


def live_text(screen: SandboxScreen) -> str:
    return "\n".join(strip.text for strip in screen.query_one("#live-output", RichLog).lines)


async def until(pilot: Pilot, pred: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        await pilot.pause(0.1)
    raise AssertionError(f"timed out waiting for {what}")


async def test_drilldown_tails_a_running_commands_output_without_a_key_press(main_events, real_box) -> None:
    ws = real_box.host_workspace
    assert ws is not None
    done = []
    # the command is gated by files (go, stop), not by time: its timeout is only a backstop, far
    # above how long the UI steps take on a loaded machine (at 60 s it could cut the command short)
    runner = threading.Thread(target=lambda: done.append(real_box.execute(SLOW, 300)), daemon=True)
    runner.start()
    try:
        app = make_app(RealDetailsRuntime(main_events))
        async with app.run_test(size=(160, 45)) as pilot:
            await settle(pilot)
            app.screen.query_one(SandboxesTable).focus()
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, SandboxScreen), "sandbox drill-down")
            screen = app.screen
            await until(pilot, lambda: "line-1" in live_text(screen), "the first line, live")
            assert "line-2" not in live_text(screen) and runner.is_alive()
            (ws / "go").touch()  # the command prints its second line only now
            await until(pilot, lambda: "line-2" in live_text(screen), "the second line, auto-refreshed")
            assert runner.is_alive() and not done  # shown while the command still runs
            assert "$ echo line-$((0+1))" in live_text(screen)
            (ws / "stop").touch()
            runner.join(120)
            await until(pilot, lambda: "no command running" in live_text(screen), "the tail cleared when done")
    finally:
        (ws / "stop").touch()
        runner.join(120)
    assert done and done[0].exit_code == 0 and done[0].output == "line-1\nline-2\ndone\n"
