"""Help lists every binding; the keymap file rebinds by id; bad entries get a clear message;
the command palette offers every action."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.command import CommandPalette
from textual.widgets import DataTable

from hermes_console.ui.app import ConsoleApp, run_console
from hermes_console.ui.bindings import CONTROLS, binding_ids
from hermes_console.ui.config import ConsoleConfig, KeymapError, load_console_config, load_keymap, parse_keymap
from hermes_console.ui.screens.help import HelpScreen
from hermes_console.ui.screens.main import MainScreen
from hermes_console_dev.fake_runtime import FakeRuntime
from tests.ui.helpers import NOW, make_app, settle


async def test_help_lists_every_binding_with_its_key(main_events) -> None:
    app = make_app(FakeRuntime(main_events), config=ConsoleConfig(tick_hz=20.0, keymap={"pause": "F6"}))
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        await settle(pilot)
        assert isinstance(app.screen, HelpScreen)
        table = app.screen.query_one(DataTable)
        ids = {table.get_row_at(i)[1] for i in range(table.row_count)}
        assert ids == set(binding_ids())
        assert table.get_row("pause")[0] == "F6"  # shows the effective (rebound) key
        assert table.get_row("filter")[0] == "/"
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)


async def test_keymap_rebinds_controls_by_id(main_events, tmp_path: Path) -> None:
    keys = tmp_path / "keys.yaml"
    keys.write_text("pause: ctrl+space\nevaluate: [E, f9]\n")
    config = load_console_config(keys)
    config.tick_hz = 20.0
    runtime = FakeRuntime(main_events)
    app = ConsoleApp(runtime, now=NOW, config=config)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        await pilot.press("p")  # the old key no longer pauses
        await settle(pilot)
        assert "pause" not in runtime.names()
        await pilot.press("ctrl+space")
        await settle(pilot)
        assert runtime.names()[-1] == "pause"
        await pilot.press("f9")
        await settle(pilot)
        assert runtime.names()[-1] == "evaluate"


def test_invalid_keymap_entries_are_reported_with_file_and_id(tmp_path: Path) -> None:
    keys = tmp_path / "keys.yaml"
    keys.write_text("pause: ctrl+space\npuase: x\nquit: ''\nfilter: 'ctrl+ +'\n")
    with pytest.raises(KeymapError) as info:
        load_keymap(keys)
    message = str(info.value)
    assert str(keys) in message
    assert "unknown binding id 'puase'" in message and "valid ids:" in message
    assert "quit: expected a key" in message
    assert "filter: invalid key" in message


def test_keymap_file_must_be_a_mapping_and_readable(tmp_path: Path) -> None:
    with pytest.raises(KeymapError, match="expected a mapping"):
        parse_keymap(["p"], "keys.yaml")
    with pytest.raises(KeymapError, match="cannot read keymap file"):
        load_keymap(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("pause: [unclosed\n")
    with pytest.raises(KeymapError, match="not valid YAML"):
        load_keymap(bad)


def test_run_console_refuses_a_bad_default_keymap(monkeypatch, tmp_path: Path, capsys) -> None:
    from hermes_console.ui import config as config_module

    bad = tmp_path / "keys.yaml"
    bad.write_text("nonsense: p\n")
    monkeypatch.setattr(config_module, "DEFAULT_KEYS_FILE", bad)
    assert run_console(FakeRuntime()) == 2
    assert "unknown binding id 'nonsense'" in capsys.readouterr().err


def test_every_control_has_an_action_the_app_or_a_screen_implements() -> None:
    from hermes_console.ui.screens.config_view import ConfigScreen
    from hermes_console.ui.screens.drilldown import DrillDownScreen
    from hermes_console.ui.screens.rollouts import RolloutsScreen
    from hermes_console.ui.screens.sandbox import SandboxScreen
    from hermes_console.ui.screens.transcript import TranscriptScreen

    owners = {
        "app": ConsoleApp,
        "main": MainScreen,
        "drilldown": DrillDownScreen,
        "sandbox": SandboxScreen,
        "rollouts": RolloutsScreen,
        "transcript": TranscriptScreen,
        "config": ConfigScreen,
    }
    for spec in CONTROLS:
        owner = owners[spec.scope]
        assert hasattr(owner, f"action_{spec.action}"), f"{spec.id}: {owner.__name__} lacks action_{spec.action}"


def test_the_palette_finds_each_screen_s_controls_from_its_bindings() -> None:
    """commands.py imports no screen: it reads the scopes a screen binds (base classes too)."""
    from hermes_console.ui.bindings import scopes_of
    from hermes_console.ui.screens.evaluation import EvaluationScreen
    from hermes_console.ui.screens.rollout import RolloutScreen
    from hermes_console.ui.screens.sandbox import SandboxScreen

    expected = {
        ConsoleApp: {"app"},
        MainScreen: {"main"},
        SandboxScreen: {"sandbox", "drilldown"},
        RolloutScreen: {"drilldown"},
        EvaluationScreen: {"drilldown"},
    }
    for cls, scopes in expected.items():
        assert scopes_of(object.__new__(cls)) == scopes, cls.__name__


async def test_command_palette_lists_and_runs_console_actions(main_events) -> None:
    runtime = FakeRuntime(main_events)
    app = make_app(runtime)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+p")
        await settle(pilot)
        assert isinstance(app.screen, CommandPalette)
        await pilot.press(*"Pause / resume")
        await settle(pilot, 4)
        await pilot.press("enter")
        await settle(pilot, 4)
        assert runtime.names()[-1] == "pause"
