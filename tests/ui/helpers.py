"""Shared helpers for the UI tests: a console over a FakeRuntime at a fixed clock.

(Imported as ``tests.ui.helpers``: tests/ has no __init__.py, so helper modules are
addressed from the repo root, which ``python -m pytest`` puts on sys.path.)"""

from __future__ import annotations

import time

from textual.pilot import Pilot

from hermes_console.ui.app import ConsoleApp
from hermes_console.ui.config import ConsoleConfig
from hermes_console.ui.screens.confirm import ConfirmModal
from hermes_console_dev.fake_runtime import FakeRuntime
from tests.helpers.ui import settle as settle  # re-exported: the UI tests import it from here
from tests.ui.eventlog import END, SCENARIOS, T0

NOW = T0 + END  # every scenario's last event: ages render the same on every run


def make_app(runtime: FakeRuntime, *, config: ConsoleConfig | None = None) -> ConsoleApp:
    return ConsoleApp(runtime, now=NOW, config=config or ConsoleConfig(tick_hz=20.0))


def messages(app: ConsoleApp, severity: str | None = None) -> list[str]:
    return [n.message for n in app._notifications if severity is None or n.severity == severity]


def scenario(name: str) -> list:
    return SCENARIOS[name]()


async def quit_and_wait(pilot: Pilot, within: float = 60.0) -> None:
    """Press q (confirming if groups are still draining) and wait for the app to exit;
    the ceiling is generous, a graceful stop normally takes a second or two."""
    await pilot.press("q")
    await pilot.pause()
    if isinstance(pilot.app.screen, ConfirmModal):
        await pilot.press("y")
    end = time.monotonic() + within
    while pilot.app.is_running and time.monotonic() < end:
        await pilot.pause(0.1)
    assert not pilot.app.is_running, f"the app did not exit within {within}s of quit"
