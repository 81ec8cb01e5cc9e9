"""Config view (`d`): every resolved value with its source, secrets hidden; filter and sort.

Oracle: the values resolve() put into the env and server configs, and the layer the
test itself set each one in (flag, config file, mode default, config_init())."""

from __future__ import annotations

import textwrap

from textual.widgets import DataTable

from environments.terminal_tasks.env import TerminalTasksEnv
from hermes_console.runtime import events as rev
from hermes_console.runtime.config import RunSpec, resolve
from hermes_console.runtime.config_rows import config_rows
from hermes_console.ui.screens.config_view import ConfigScreen
from hermes_console_dev.fake_runtime import FakeRuntime
from tests.ui.eventlog import T0
from tests.ui.helpers import make_app, settle


def _rows(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        textwrap.dedent("""
        env:
          max_agent_turns: 5
        openai:
          base_url: http://127.0.0.1:9999/v1
          api_key: sk-do-not-show-1234567890
    """)
    )
    spec = RunSpec(
        env=TerminalTasksEnv,
        mode="process",
        flags=["--env.group_size", "3"],
        config_path=str(cfg),
        runs_dir=str(tmp_path / "runs"),
    )
    resolved = resolve(spec, TerminalTasksEnv)
    return resolved, config_rows(resolved)


def test_config_rows_carry_each_values_source_and_hide_secrets(tmp_path, tokenizer_path) -> None:
    resolved, rows = _rows(tmp_path)
    by_key = {r["key"]: r for r in rows}
    assert by_key["env.group_size"]["value"] == "3" and by_key["env.group_size"]["source"] == "flags"
    assert by_key["env.max_agent_turns"]["value"] == "5"
    assert by_key["env.max_agent_turns"]["source"].startswith("config file")
    assert by_key["env.use_wandb"]["source"].startswith("process mode default")
    assert by_key["env.agent_temperature"]["source"] == "config_init()"
    assert by_key["env.agent_temperature"]["value"] == repr(resolved.env_config.agent_temperature)
    assert by_key["openai[0].base_url"]["value"] == "http://127.0.0.1:9999/v1"
    assert by_key["openai[0].api_key"]["value"] == "(set, hidden)"
    assert by_key["phase2[0].server_type"]["value"] == "vllm"
    assert not any("sk-do-not-show" in r["value"] for r in rows)
    # one row per field of each model: nothing resolved is left out
    assert {k for k in by_key if k.startswith("env.")} == {f"env.{k}" for k in resolved.env_config.model_dump()}


async def test_config_view_filters_and_sorts(tmp_path, tokenizer_path) -> None:
    _, rows = _rows(tmp_path)
    events = [
        rev.RunConfigured(
            ts=T0,
            env_name="terminal_tasks",
            mode="process",
            phase=1,
            group_size=3,
            max_in_flight=4,
            worker_timeout_s=600.0,
            config=rows,
        )
    ]
    app = make_app(FakeRuntime(events))
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        await pilot.press("d")
        await settle(pilot)
        assert isinstance(app.screen, ConfigScreen)
        table = app.screen.query_one("#config-table", DataTable)
        assert table.row_count == len(rows)
        await pilot.press("slash", *"flags", "enter")
        await settle(pilot)
        shown = [table.get_row_at(i) for i in range(table.row_count)]
        assert [r[0].plain for r in shown] == [
            r["key"] for r in rows if "flags" in f"{r['key']} {r['value']} {r['source']}".lower()
        ]
        assert "env.group_size" in [r[0].plain for r in shown]
        await pilot.click("#config-table", offset=(40, 0))  # the value header: sort by value
        await settle(pilot)
        values = [table.get_row_at(i)[1].plain for i in range(table.row_count)]
        assert values == sorted(values)
        await pilot.press("escape")
        await settle(pilot)
        assert not isinstance(app.screen, ConfigScreen)
