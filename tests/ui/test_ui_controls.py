"""Every operator control sends the right command (after confirming when it should)."""

from __future__ import annotations

from hermes_console.runtime import events as rev
from hermes_console.runtime.api import CommandUnavailable
from hermes_console.ui.screens.confirm import ConfirmModal
from hermes_console.ui.screens.evaluation import EvaluationScreen
from hermes_console.ui.screens.main import MainScreen
from hermes_console.ui.widgets.sandboxes_table import SandboxesTable
from hermes_console_dev.fake_runtime import FakeRuntime
from tests.ui.helpers import NOW, make_app, messages, settle


async def test_pause_then_resume_follows_runtime_status(main_events) -> None:
    runtime = FakeRuntime(main_events)
    app = make_app(runtime)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        await pilot.press("p")
        await settle(pilot)
        assert runtime.names()[-1] == "pause"
        runtime.feed([rev.RuntimeStatus(ts=NOW, status="paused")])
        await settle(pilot)
        await pilot.press("p")
        await settle(pilot)
        assert runtime.names()[-1] == "resume"


async def test_cancel_in_flight_needs_confirmation(main_events) -> None:
    runtime = FakeRuntime(main_events)
    app = make_app(runtime)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        await pilot.press("c")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmModal)
        await pilot.press("n")
        await settle(pilot)
        assert "cancel_in_flight" not in runtime.names()
        await pilot.press("c")
        await settle(pilot)
        await pilot.press("y")
        await settle(pilot)
        assert runtime.names().count("cancel_in_flight") == 1
        assert any("cancelled 3 group" in m for m in messages(app))


async def test_phase_switch_confirms_and_targets_other_phase(main_events) -> None:
    runtime = FakeRuntime(main_events, hold={"switch_phase"})
    app = make_app(runtime)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        await pilot.press("P")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmModal)
        await pilot.click("#confirm-yes")
        await settle(pilot)
        name, args, kwargs = runtime.calls[-1]
        assert (name, args) == ("switch_phase", (2,))
        # Drain progress from the runtime's events shows in the status bar.
        runtime.feed(
            [
                rev.PhaseSwitch(ts=NOW, stage="draining", from_phase=1, to_phase=2, in_flight=4),
                rev.PhaseSwitch(ts=NOW, stage="draining", from_phase=1, to_phase=2, in_flight=1),
            ]
        )
        await settle(pilot)
        status = str(app.screen.query_one("#status").render())
        assert "phase switch 1 → 2: draining" in status and "1 in flight" in status
        runtime.resolve("switch_phase", None)
        runtime.feed([rev.PhaseSwitch(ts=NOW, stage="done", from_phase=1, to_phase=2)])
        await settle(pilot)
        assert app.state.run.phase == 2
        assert "PHASE 2" in str(app.screen.query_one("#status").render())


async def test_evaluate_opens_results_when_the_evaluation_finishes(main_events) -> None:
    runtime = FakeRuntime(main_events, hold={"evaluate"})
    app = make_app(runtime)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        await pilot.press("e")
        await settle(pilot)
        assert runtime.names()[-1] == "evaluate"
        runtime.feed(
            [rev.EvalStarted(ts=NOW, eval_id="ev-9"), rev.EvalProgress(ts=NOW, eval_id="ev-9", done=3, total=10)]
        )
        await settle(pilot)
        assert "evaluation ev-9" in str(app.screen.query_one("#status").render())
        assert isinstance(app.screen, MainScreen)
        runtime.feed(
            [
                rev.EvalFinished(
                    ts=NOW,
                    eval_id="ev-9",
                    metrics={"eval/acc": 0.75},
                    samples_path="/tmp/ev-9/samples.jsonl",
                    duration_s=4.0,
                )
            ]
        )
        runtime.resolve("evaluate", {"eval/acc": 0.75})
        await settle(pilot)
        assert isinstance(app.screen, EvaluationScreen)
        header = str(app.screen.query_one("#eval-header").render())
        assert "/tmp/ev-9/samples.jsonl" in header
        table = app.screen.query_one("#eval-metrics")
        assert table.get_row("eval/acc")[1] == "0.7500"
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)


async def test_kill_and_extend_act_on_the_selected_sandbox(main_events) -> None:
    runtime = FakeRuntime(main_events)
    app = make_app(runtime)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(SandboxesTable)
        table.focus()
        table.move_cursor(row=1)
        task_id = table.selected_key()
        assert task_id
        await pilot.press("k")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmModal)
        await pilot.press("y")
        await settle(pilot)
        assert runtime.calls[-1][:2] == ("kill_sandbox", (task_id,))
        await pilot.press("x")
        await settle(pilot)
        assert runtime.calls[-1][:2] == ("extend_sandbox", (task_id, 300.0))
        assert any("lifetime now 10m00s" in m for m in messages(app))


async def test_failed_command_is_a_toast_not_a_crash(main_events) -> None:
    runtime = FakeRuntime(main_events, fail={"pause": RuntimeError("intake gate is stuck")})
    app = make_app(runtime)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        await pilot.press("p")
        await settle(pilot)
        assert app.is_running
        errors = messages(app, "error")
        assert any("pause failed: intake gate is stuck" in m for m in errors)


async def test_command_raising_synchronously_is_a_toast(main_events) -> None:
    runtime = FakeRuntime(main_events)

    def broken() -> None:
        raise ConnectionError("runtime thread is gone")

    runtime.evaluate = lambda pause_intake=False: broken()  # type: ignore[assignment]
    app = make_app(runtime)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        await pilot.press("e")
        await settle(pilot)
        assert any("evaluate failed: runtime thread is gone" in m for m in messages(app, "error"))
        await pilot.press("e")  # a failed start does not leave the console thinking one is running
        await settle(pilot)
        assert not any("already running" in m for m in messages(app))


async def test_replay_disables_controls_but_panels_work(main_events) -> None:
    runtime = FakeRuntime(main_events, live=False)
    app = ConsoleApp_for_replay(runtime)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        for key in ("p", "c", "P", "e", "x"):
            await pilot.press(key)
            await settle(pilot, 1)
        assert isinstance(app.screen, MainScreen)  # no confirm modal opened
        assert [n for n in runtime.names() if n != "start"] == []
        assert len([m for m in messages(app, "warning") if "disabled while replaying" in m]) >= 4
        assert "REPLAY" in str(app.screen.query_one("#status").render())
        assert app.screen.query_one("#groups").row_count == 5
        # Ages in replay are measured against the log's own clock, not the wall clock.
        assert app.now() == app.state.last_ts == NOW


def ConsoleApp_for_replay(runtime: FakeRuntime):
    from hermes_console.ui.app import ConsoleApp
    from hermes_console.ui.config import ConsoleConfig

    return ConsoleApp(runtime, config=ConsoleConfig(tick_hz=20.0))


async def test_quit_confirms_while_live_then_stops_runtime(main_events) -> None:
    runtime = FakeRuntime(main_events, hold={"stop"})
    app = make_app(runtime)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        await pilot.press("q")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmModal)
        await pilot.press("y")
        await pilot.pause()
        assert runtime.calls[-1] == ("stop", (10.0,), {})
        assert app.stopping
        assert "STOPPING" in str(app.screen.query_one("#status").render())
        runtime.resolve("stop", None)
        await settle(pilot)
        assert not app.is_running
    assert app.return_code == 0


async def test_quit_without_live_rollouts_needs_no_confirmation() -> None:
    runtime = FakeRuntime([rev.RuntimeStatus(ts=NOW, status="finished")])
    app = make_app(runtime)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        await pilot.press("q")
        await settle(pilot)
        assert not app.is_running
    assert "stop" in runtime.names()


async def test_command_unavailable_from_runtime_is_reported() -> None:
    runtime = FakeRuntime([], fail={"pause": CommandUnavailable("pause is not available while loading")})
    app = make_app(runtime)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("p")
        await settle(pilot)
        assert any("not available while loading" in m for m in messages(app, "error"))


async def test_kill_and_extend_never_act_on_a_panel_without_focus(main_events) -> None:
    from hermes_console.ui.widgets.groups_table import GroupsTable

    runtime = FakeRuntime(main_events)
    app = make_app(runtime)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        app.screen.query_one(SandboxesTable).move_cursor(row=1)  # a row is selected there ...
        app.screen.query_one(GroupsTable).focus()  # ... but the operator is on the groups panel
        await settle(pilot)
        for key in ("k", "x"):
            await pilot.press(key)
            await settle(pilot)
            assert not isinstance(app.screen, ConfirmModal)
        assert "kill_sandbox" not in runtime.names() and "extend_sandbox" not in runtime.names()
        assert any("focus the Sandboxes panel" in m for m in messages(app, "warning"))


async def test_kill_from_a_tool_call_row_targets_that_rollouts_sandbox(main_events) -> None:
    from hermes_console.ui.widgets.tool_calls_table import ToolCallsTable

    runtime = FakeRuntime(main_events)
    app = make_app(runtime)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        tools = app.screen.query_one(ToolCallsTable)
        tools.focus()
        live = {sb.task_id for sb in app.state.live_sandboxes()}
        for row in range(tools.row_count - 1, -1, -1):  # the newest call whose sandbox is open
            tools.move_cursor(row=row)
            if tools.selected_rollout() in live:
                break
        target = tools.selected_rollout()
        assert target in live
        await pilot.press("x")
        await settle(pilot)
        assert runtime.calls[-1][:2] == ("extend_sandbox", (target, 300.0))


async def test_phase_switch_progress_follows_the_live_in_flight_count(main_events) -> None:
    from hermes_console.ui.widgets.status_bar import StatusBar

    runtime = FakeRuntime(main_events)
    app = make_app(runtime)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        start = app.state.accounting.in_flight
        assert start >= 3
        live_groups = [g.group_id for g in app.state.groups.values() if g.status == "running"]
        runtime.feed([rev.PhaseSwitch(ts=NOW, stage="draining", from_phase=1, to_phase=2, in_flight=start)])
        await settle(pilot)
        assert f" {start} in flight" in str(app.screen.query_one(StatusBar).render())
        runtime.feed([rev.ItemCompleted(ts=NOW, group_id=gid, scores=[1.0]) for gid in live_groups[:2]])
        await settle(pilot)
        text = str(app.screen.query_one(StatusBar).render())
        assert f" {start - 2} in flight" in text  # not stuck at the count the switch started from


def test_serve_mode_status_shows_the_trainers_step_not_groups_sent() -> None:
    from hermes_console.runtime.state import ConsoleState
    from hermes_console.ui.widgets.status_bar import StatusBar

    s = ConsoleState()
    s.apply(
        rev.RunConfigured(
            env_name="e", mode="serve", phase=1, group_size=4, max_in_flight=4, worker_timeout_s=60.0, total_steps=6
        )
    )
    for i in range(12):  # 12 groups sent over 3 trainer steps
        s.apply(rev.ItemReceived(group_id=f"g{i}"))
        s.apply(rev.ItemCompleted(group_id=f"g{i}", step=i + 1))
    s.apply(rev.TrainerStatus(state="running", current_step=3, total_steps=6))
    line = StatusBar()._run_line(s, NOW, live=True, stopping=False).plain
    assert "step 3/6" in line and "step 12/6" not in line
