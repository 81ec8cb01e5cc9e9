"""A key only the app binds runs at the app's own queue (ui/first_hop_keys.py), and every key
does what Textual's own route would have done with it: Textual's route is the oracle."""

from __future__ import annotations

from typing import Any

import pytest
from textual.message_pump import MessagePump
from textual.widgets import Input

from hermes_console.ui import app as app_module
from hermes_console.ui.config import ConsoleConfig
from hermes_console_dev.fake_runtime import FakeRuntime
from tests.ui.helpers import make_app, settle


async def test_pause_runs_at_the_apps_queue_without_bubbling(main_events, monkeypatch) -> None:
    seen: list[str] = []  # every message queue the key passed through, in order
    dispatch = MessagePump._dispatch_message

    async def spy(self: MessagePump, message: Any) -> Any:
        if type(message).__name__ == "Key":
            seen.append(type(self).__name__)
        return await dispatch(self, message)

    runtime = FakeRuntime(main_events)
    app = make_app(runtime)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        assert app.focused is not None and app.focused.id == "groups"  # a table, inside containers
        monkeypatch.setattr(MessagePump, "_dispatch_message", spy)
        await pilot.press("p")
        await settle(pilot)
        monkeypatch.undo()
        assert runtime.names()[-1] == "pause"
        # Textual's route: the app, the table, two containers, the screen, the app again.
        assert seen == ["ConsoleApp"]


async def _outcome(
    events: list, keys: list[str], first_hop: bool, keymap: dict[str, str] | None, maximize: bool = False
) -> dict[str, Any]:
    """What the operator sees after pressing ``keys``: the commands sent, the screens, the
    focused widget and what any input holds, the display's frozen flag."""
    runtime = FakeRuntime(events)
    app = make_app(runtime, config=ConsoleConfig(tick_hz=20.0, keymap=keymap or {}))
    routed: list[str] = []
    original = app_module.app_binding_for

    def probe(app_: Any, key: str) -> Any:
        binding = original(app_, key)
        routed.append(f"{key}:{'app' if binding is not None else 'textual'}")
        return binding if first_hop else None

    app_module.app_binding_for = probe  # type: ignore[assignment]
    try:
        async with app.run_test(size=(160, 45)) as pilot:
            await settle(pilot)
            if maximize:
                app.screen.maximize(app.screen.query_one("#groups"))
                await settle(pilot)
            for key in keys:
                await pilot.press(key)
                await settle(pilot)
            inputs = [field.value for field in app.screen.query(Input)]
            return {
                "commands": runtime.names(),
                "screens": [type(screen).__name__ for screen in app.screen_stack],
                "focused": type(app.focused).__name__ if app.focused else None,
                "inputs": inputs,
                "frozen": app.frozen,
                "maximized": app.screen.maximized is not None,
                "routed": routed if first_hop else None,
            }
    finally:
        app_module.app_binding_for = original  # type: ignore[assignment]


CASES = {
    # key sequence, keymap, which keys the first hop must take (the rest go Textual's way)
    "pause and resume on the main screen": (["p", "p"], None, {"p"}),
    "freeze, help, and back": (["z", "question_mark", "p", "escape", "z"], None, {"z", "question_mark"}),
    "typed into the filter dialog": (["slash", "p", "q", "z", "enter"], None, set()),
    "a confirm dialog on top": (["c", "p", "e", "escape", "p"], None, {"c", "p"}),
    "the command palette's search": (["ctrl+p", "p", "a", "escape"], None, set()),
    "a screen's own input": (["d", "slash", "p", "z", "escape", "escape", "p"], None, {"d", "p"}),
    "a drill-down screen": (["w", "p", "escape"], None, {"w", "p"}),
    "a rebound pause": (["j", "p"], {"pause": "j"}, {"j"}),
    # Textual minimizes first; every screen has an escape handler of its own, so escape
    # always takes Textual's route
    "escape bound by the app, a panel maximized": (["escape", "escape"], {"freeze": "escape"}, set()),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_every_key_does_what_textuals_route_does(main_events, case: str) -> None:
    keys, keymap, first_hop_keys = CASES[case]
    maximize = "maximized" in case  # Textual's route minimizes on escape first
    textual = await _outcome(main_events, keys, first_hop=False, keymap=keymap, maximize=maximize)
    ours = await _outcome(main_events, keys, first_hop=True, keymap=keymap, maximize=maximize)
    routed = ours.pop("routed")
    textual.pop("routed")
    assert ours == textual
    # and the first hop did take the keys only the app binds (the test is not vacuous)
    assert {entry.split(":")[0] for entry in routed if entry.endswith(":app")} == first_hop_keys, routed
