"""The way to the console's first frame: no restyle of what was just styled, and the runtime
starts loading only once the frame is drawn.

Textual restyles a node's whole subtree whenever one of its classes changes after it was
mounted (``App.update_styles``). The main screen used to set its size classes, the optional
panels' "-absent", the first panel's "-current" and the footer keys' "-compact" after
mounting, then Textual restyled it all again when the screen resumed: about half of the
styling work before the first frame. Here those classes are in place as the widgets mount.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from textual.app import App
from textual.dom import DOMNode
from textual.events import ScreenResume
from textual.widget import Widget

from hermes_console.ui.app import ConsoleApp
from hermes_console.ui.config import ConsoleConfig
from hermes_console.ui.screens.main import MainScreen
from hermes_console.ui.widgets.groups_table import GroupsTable
from hermes_console_dev.fake_runtime import FakeRuntime
from tests.ui.helpers import make_app, settle


def _record_restyles(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every subtree restyle Textual does: (node, nodes in its subtree)."""
    seen: list[tuple[str, int]] = []
    original = App.update_styles

    def recorded(self: App[Any], node: DOMNode, animate: bool = True) -> None:
        if isinstance(node, Widget) and node.is_attached:
            seen.append((f"{type(node).__name__}#{node.id}", len(list(node.walk_children(with_self=True)))))
        original(self, node, animate)

    monkeypatch.setattr(App, "update_styles", recorded)
    return seen


@pytest.mark.parametrize("size", [(200, 50), (160, 45), (120, 40), (80, 24)])
async def test_the_main_screen_is_not_restyled_on_the_way_to_its_first_frame(
    monkeypatch: pytest.MonkeyPatch, size: tuple[int, int]
) -> None:
    restyles = _record_restyles(monkeypatch)
    app = make_app(FakeRuntime([]), config=ConsoleConfig(tick_hz=20.0, ui_cpu_share=0.0))
    first_frame: list[list[tuple[str, int]]] = []

    async with app.run_test(size=size) as pilot:
        app.call_after_refresh(lambda: first_frame.append(list(restyles)))
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, MainScreen)
        assert first_frame, "no first frame"
        # Only the focused table may restyle (its :focus); the screen and its containers never.
        big = [(name, n) for name, n in first_frame[0] if n > 3 and not name.startswith("GroupsTable")]
        assert big == [], big
        # ...and the classes are the ones the layout asks for at this size.
        compact = size[0] < 120 or size[1] < 34
        assert screen.has_class("-compact") == compact
        assert screen.has_class("-medium") == (not compact and size[0] < 166)
        assert screen.query_one("#groups").has_class("-current")
        assert screen.query_one("#row-top").has_class("-current-row")
        for panel_id in ("trainer", "servers"):
            assert screen.query_one(f"#{panel_id}").has_class("-absent")
            assert screen.query_one(f"#tab-{panel_id}").has_class("-hidden")
        assert screen.query_one("#row-servers").has_class("-absent")
        assert isinstance(screen.focused, GroupsTable)


async def test_a_resumed_main_screen_is_restyled_after_the_first_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the first resume (right after composing) skips Textual's restyle of the tree."""
    app = make_app(FakeRuntime([]), config=ConsoleConfig(tick_hz=20.0, ui_cpu_share=0.0))
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        main = app.screen
        restyles = _record_restyles(monkeypatch)
        main.post_message(ScreenResume())  # e.g. switched back to: Textual asks for a restyle
        await settle(pilot)
        assert any(name.startswith("MainScreen") for name, _ in restyles), restyles


class _StartProbe(FakeRuntime):
    """Notes what the console had drawn when it asked the runtime to start."""

    def __init__(self) -> None:
        super().__init__([])
        self.start_seen = threading.Event()
        self.status_width_at_start: int | None = None
        self.app: ConsoleApp | None = None

    def start(self) -> None:
        assert self.app is not None
        screen = self.app.screen
        # A laid-out screen: the first frame was composed and arranged before this call.
        status = screen.query("#status")
        self.status_width_at_start = status.first().region.width if status else 0
        super().start()
        self.start_seen.set()


async def test_the_runtime_starts_loading_after_the_first_frame() -> None:
    runtime = _StartProbe()
    app = ConsoleApp(runtime, config=ConsoleConfig(tick_hz=20.0, ui_cpu_share=0.0))
    runtime.app = app
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        assert runtime.start_seen.wait(10)
        assert runtime.status_width_at_start == 160, "the runtime started before the main screen was laid out"


async def test_a_quit_before_the_first_frame_starts_no_runtime() -> None:
    """The runtime starts from a callback after the first frame; a stop that came first
    (quit, SIGTERM) must not be followed by a runtime starting up behind it."""
    runtime = FakeRuntime([])
    app = make_app(runtime, config=ConsoleConfig(tick_hz=20.0, ui_cpu_share=0.0))
    app._start_runtime = False  # the test runs the first-frame callback itself
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        app.stopping = True
        app._start_in_worker()
        await app.workers.wait_for_complete()
        assert not runtime.started
        app.stopping = False
        app._start_in_worker()
        await app.workers.wait_for_complete()
        assert runtime.started  # the same call starts it when no stop came first
