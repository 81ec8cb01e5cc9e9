"""Drill-downs: rollout transcript, sandbox details + diagnostics + controls, evaluation results."""

from __future__ import annotations

from textual.widgets import Input, RichLog

from hermes_console.ui.screens.confirm import ConfirmModal
from hermes_console.ui.screens.main import MainScreen
from hermes_console.ui.screens.rollout import RolloutScreen
from hermes_console.ui.screens.sandbox import SandboxScreen
from hermes_console.ui.widgets.groups_table import GroupsTable
from hermes_console.ui.widgets.sandboxes_table import SandboxesTable
from hermes_console.ui.widgets.tool_calls_table import ToolCallsTable
from hermes_console_dev.fake_runtime import FakeRuntime
from tests.helpers.ui import log_text, press_on_selected
from tests.ui.helpers import make_app, messages, scenario, settle


async def test_enter_on_group_opens_running_rollout_transcript(main_events) -> None:
    app = make_app(FakeRuntime(main_events))
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        group_id = await press_on_selected(pilot, GroupsTable, "enter")
        assert isinstance(app.screen, RolloutScreen)
        rollout = app.state.rollouts[app.screen.rollout_id]
        assert rollout.group_id == group_id and rollout.status == "running"
        header = str(app.screen.query_one("#rollout-header").render())
        assert f"group {group_id}" in header and "Phase 1 (chat)" in header
        text = log_text(app.screen.query_one("#transcript", RichLog))
        assert "user" in text and rollout.item_summary in text
        assert "tool call  terminal" in text
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)


async def test_finished_rollout_shows_reward_reasoning_and_errors() -> None:
    app = make_app(FakeRuntime(scenario("errors")))
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        failed = next(r for r in app.state.rollouts.values() if r.error and r.status == "error")
        app.push_screen(RolloutScreen(failed.rollout_id))
        await settle(pilot)
        header = str(app.screen.query_one("#rollout-header").render())
        assert "reward" in header and "tokens" in header and "nodes" in header
        assert "error: APITimeoutError" in header
        text = log_text(app.screen.query_one("#transcript", RichLog))
        assert "reasoning" in text and "★ reward" in text


async def test_enter_on_tool_row_opens_its_rollout(main_events) -> None:
    app = make_app(FakeRuntime(main_events))
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        tools = app.screen.query_one(ToolCallsTable)
        tools.focus()
        expected = tools.selected_rollout()
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, RolloutScreen) and app.screen.rollout_id == expected


async def test_sandbox_drilldown_details_diagnostic_kill_extend(main_events) -> None:
    runtime = FakeRuntime(main_events)
    app = make_app(runtime)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        task_id = await press_on_selected(pilot, SandboxesTable, "enter")
        screen = app.screen
        assert isinstance(screen, SandboxScreen) and screen.task_id == task_id
        assert ("sandbox_details", (task_id,), {}) in runtime.calls
        assert screen.query_one("#process-tree").row_count == 2
        assert "cwd /tmp/hermes/sandbox" in str(screen.query_one("#sandbox-header").render())
        assert "cat calc.py" in log_text(screen.query_one("#recent-commands", RichLog))
        await pilot.press("d")
        assert isinstance(app.focused, Input)
        await pilot.press(*"ls", "enter")
        await settle(pilot)
        assert runtime.calls[-1][:2] == ("run_in_sandbox", (task_id, "ls"))
        output = log_text(screen.query_one("#diagnostic-output", RichLog))
        assert "$ ls" in output and "drwxr-xr-x" in output and "exit 0" in output
        screen.query_one("#process-tree").focus()
        await pilot.press("x")
        await settle(pilot)
        assert runtime.calls[-1][:2] == ("extend_sandbox", (task_id, 300.0))
        await pilot.press("X")  # the running command's timeout, not the lifetime
        await settle(pilot)
        assert runtime.calls[-1][:2] == ("extend_command", (task_id, 300.0))
        await pilot.press("k")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmModal)
        await pilot.press("y")
        await settle(pilot)
        assert runtime.calls[-1][:2] == ("kill_sandbox", (task_id,))
        assert any(f"sandbox {task_id} killed" in m for m in messages(app))


async def test_sandbox_details_failure_is_reported(main_events) -> None:
    runtime = FakeRuntime(main_events, fail={"sandbox_details": KeyError("no such sandbox")})
    app = make_app(runtime)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        task_id = next(iter(app.state.live_sandboxes())).task_id
        app.push_screen(SandboxScreen(task_id))
        await settle(pilot)
        assert any("sandbox details failed" in m and "no such sandbox" in m for m in messages(app, "error"))
        assert app.screen.query_one("#process-tree").row_count == 0


async def test_drill_down_key_rebinding_applies_to_screen_binding(main_events) -> None:
    from hermes_console.ui.config import ConsoleConfig

    app = make_app(FakeRuntime(main_events), config=ConsoleConfig(tick_hz=20.0, keymap={"drill-down": "v"}))
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        app.screen.query_one(SandboxesTable).focus()
        await pilot.press("v")
        await settle(pilot)
        assert isinstance(app.screen, SandboxScreen)


async def test_sandbox_drilldown_shows_the_machine_and_the_tasks_overrides(main_events) -> None:
    from hermes_console.runtime.payloads import ShellState
    from hermes_console_dev.fake_runtime import FakeResults, sample_details

    details = sample_details(
        shell=ShellState(
            shell_pid=4242,
            shell_uptime_s=75.0,
            shell_restarts=1,
            machine_restarts=0,
            busy=True,
            agent_processes_stopped=2,
        ),
        overrides={"cwd": "/app", "docker_image": "tb2/task:1\x1b]52;c;x\x07"},
    )
    runtime = FakeRuntime(main_events, results=FakeResults(sandbox_details=details))
    app = make_app(runtime)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        await press_on_selected(pilot, SandboxesTable, "enter")
        header = str(app.screen.query_one("#sandbox-header").render())
        assert "shell pid 4242" in header and "restarts 1 shell / 0 machine" in header and "busy" in header
        assert "2 agent process(es) stopped before verification" in header
        assert "overrides cwd=/app" in header and "docker_image=tb2/task:1" in header
        assert "\x1b" not in header  # model/env text stays text


async def test_sandbox_screen_opens_its_rollout_transcript(main_events) -> None:
    from hermes_console.ui.screens.transcript import TranscriptScreen

    runtime = FakeRuntime(main_events)
    app = make_app(runtime)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        # the sandbox's task id is its rollout's id (RolloutStarted.rollout_id == SandboxCreated.task_id)
        task_id = next(iter(app.state.live_sandboxes())).task_id
        assert task_id in {e.rollout_id for e in main_events if e.kind == "rollout_started"}
        app.push_screen(SandboxScreen(task_id))
        await settle(pilot)
        await pilot.press("t")
        await settle(pilot)
        assert isinstance(app.screen, TranscriptScreen) and app.screen.rollout_id == task_id
        await pilot.press("escape")
        await settle(pilot)
        app.push_screen(SandboxScreen("no-such-rollout"))
        await settle(pilot)
        await pilot.press("t")
        await settle(pilot)
        assert isinstance(app.screen, SandboxScreen)
        assert any("no rollout no-such-rollout" in m for m in messages(app, "warning"))


async def test_evaluation_shows_a_per_task_table_and_integers_as_integers(main_events, tmp_path) -> None:
    import json

    from hermes_console.runtime import events as rev
    from hermes_console.ui.screens.evaluation import EvaluationScreen
    from tests.ui.eventlog import T0

    samples = [
        {"task_id": "fizzbuzz", "reward": 1.0, "passed": True, "turns_used": 3},
        {"task_id": "calc", "reward": 0.25, "passed": False, "turns_used": 7},
        {"task_id": "grep", "reward": 0.0, "passed": False, "turns_used": 2},
    ]
    path = tmp_path / "samples.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in samples))
    runtime = FakeRuntime(main_events)
    app = make_app(runtime)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        runtime.feed(
            [
                rev.EvalStarted(ts=T0, eval_id="ev-7"),
                rev.EvalFinished(
                    ts=T0 + 1,
                    eval_id="ev-7",
                    samples_path=str(path),
                    duration_s=1.0,
                    metrics={"eval/total_tasks": 3.0, "eval/pass_rate": 1 / 3, "eval/n": 3},
                ),
            ]
        )
        await settle(pilot)
        app.push_screen(EvaluationScreen("ev-7"))
        await settle(pilot)
        metrics = app.screen.query_one("#eval-metrics")
        assert metrics.get_row("eval/total_tasks")[1] == "3" and metrics.get_row("eval/n")[1] == "3"
        assert metrics.get_row("eval/pass_rate")[1] == "0.3333"
        tasks = app.screen.query_one("#eval-tasks")
        rows = [tasks.get_row_at(i) for i in range(tasks.row_count)]
        assert rows == [
            [
                s["task_id"],
                f"{s['reward']:g}" if s["reward"] in (0.0, 1.0) else f"{s['reward']:.4f}",
                "yes" if s["passed"] else "no",
                str(s["turns_used"]),
                "–",  # no eval rollout events fed: no transcript to open
            ]
            for s in samples
        ]


async def test_closed_sandbox_keeps_its_last_commands() -> None:
    from environments import events as ev

    events = scenario("small")
    closed = [e.task_id for e in events if isinstance(e, ev.SandboxClosed)]
    finished = [e for e in events if isinstance(e, ev.SandboxCommandFinished)]
    task_id = max(closed, key=lambda t: sum(1 for e in finished if e.task_id == t))
    # more commands than are kept (late reports of the closed sandbox's commands)
    extra = [
        ev.SandboxCommandFinished(
            ts=events[-1].ts + i, task_id=task_id, command=f"echo extra {i}", exit_code=0, duration_s=0.1
        )
        for i in range(4)
    ]
    events = events + extra
    finished += extra
    commands = [e.command for e in finished if e.task_id == task_id]
    assert len(commands) > 5
    assert commands
    runtime = FakeRuntime(events, fail={"sandbox_details": KeyError("sandbox is closed")})
    app = make_app(runtime)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        # recently closed, newest first (the events' order of SandboxClosed, reversed)
        assert [sb.task_id for sb in app.state.closed_sandboxes()] == list(reversed(closed))
        from hermes_console.ui.screens.closed_sandboxes import ClosedSandboxesScreen

        await pilot.press("C")  # the list of recently closed sandboxes, newest first
        await settle(pilot)
        assert isinstance(app.screen, ClosedSandboxesScreen)
        table = app.screen.query_one("#closed-sandboxes")
        keys = [row.key.value for row in table.ordered_rows]
        assert keys == list(reversed(closed))
        row = keys.index(task_id)
        assert table.get_row_at(row)[-1] == commands[-1][:120]
        table.move_cursor(row=row)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, SandboxScreen) and app.screen.task_id == task_id
        text = log_text(app.screen.query_one("#recent-commands", RichLog))
        last = commands[-5:]
        assert all(f"$ {c[:40]}" in text for c in last), text
        assert text.count("$ ") == len(last)
