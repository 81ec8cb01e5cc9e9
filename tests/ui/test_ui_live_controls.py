"""Every control and drill-down against the REAL runtime (RuntimeHost + terminal_tasks +
embedded simulator + local sandboxes), driven through the keys an operator presses.

One long scenario on purpose: the controls interact (a phase switch drains, cancel
needs live groups, kill needs a live sandbox), and starting the runtime costs seconds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable, RichLog

from environments.sandboxes import get_sandbox
from hermes_console.runtime.config import RunSpec
from hermes_console.runtime.host import RuntimeHost
from hermes_console.runtime.state import ConsoleState
from hermes_console.sim.config import LatencyConfig, SimConfig
from hermes_console.sim.server import SimServer
from hermes_console.ui.app import ConsoleApp
from hermes_console.ui.config import ConsoleConfig
from hermes_console.ui.screens.confirm import ConfirmModal
from hermes_console.ui.screens.evaluation import EvaluationScreen
from hermes_console.ui.screens.filter_modal import FilterModal
from hermes_console.ui.screens.help import HelpScreen
from hermes_console.ui.screens.main import MainScreen
from hermes_console.ui.screens.rollout import RolloutScreen
from hermes_console.ui.screens.sandbox import SandboxScreen
from hermes_console.ui.screens.transcript import TranscriptScreen
from hermes_console.ui.widgets.sandboxes_table import SandboxesTable
from tests.ui.helpers import quit_and_wait

# Ceilings, not expectations: the scenario needs ~45 s of CPU, and on a loaded 2-core machine
# single steps (the first rollout, typing into the filter) took 50-60 s, the whole test ~380 s.
# Every wait returns as soon as its condition holds.
STEP_S = 180.0


async def until(pilot: Pilot, pred: Callable[[], bool], what: str, timeout: float = STEP_S) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        await pilot.pause(0.1)
    state: ConsoleState = pilot.app.state  # type: ignore[attr-defined]
    raise AssertionError(
        f"timed out waiting for {what}: status={state.status} detail={state.status_detail!r} acc={state.accounting}"
    )


class RecordingHost(RuntimeHost):
    """The real host, remembering which commands the UI sent (and what they returned)."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.sent: list[str] = []
        self.results: dict[str, Any] = {}

    def _record(self, name: str, future: Any) -> Any:
        self.sent.append(name)
        future.add_done_callback(
            lambda f: self.results.__setitem__(name, "cancelled" if f.cancelled() else (f.exception() or f.result()))
        )
        return future

    def pause(self):  # type: ignore[override]
        return self._record("pause", super().pause())

    def resume(self):  # type: ignore[override]
        return self._record("resume", super().resume())

    def cancel_in_flight(self):  # type: ignore[override]
        return self._record("cancel_in_flight", super().cancel_in_flight())

    def kill_sandbox(self, task_id: str):  # type: ignore[override]
        return self._record("kill_sandbox", super().kill_sandbox(task_id))

    def extend_sandbox(self, task_id: str, seconds: float):  # type: ignore[override]
        return self._record("extend_sandbox", super().extend_sandbox(task_id, seconds))


async def focus_panel(pilot: Pilot, panel_id: str) -> None:
    screen = pilot.app.screen
    assert isinstance(screen, MainScreen)
    screen._focus_panel(panel_id)
    await pilot.pause()


@pytest.mark.timeout(900)  # the steps' own ceilings fail first, naming the step
async def test_every_control_against_the_live_runtime(tmp_path: Path) -> None:
    # 100 ms per LLM call: groups are always in flight (for cancel) yet finish quickly.
    sim = SimServer(SimConfig(seed=3, latency=LatencyConfig(mode="fixed", mean_ms=100.0)))
    sim.start()
    spec = RunSpec(
        env="environments.terminal_tasks",
        flags=[
            "--openai.base_url",
            f"{sim.base_url}/v1",
            "--env.total_steps",
            "100000",
            "--env.data_path_to_save_groups",
            str(tmp_path / "run" / "groups.jsonl"),
        ],
        runs_dir=str(tmp_path),
    )
    host = RecordingHost(spec, exit_when_finished=False)
    app = ConsoleApp(
        host, config=ConsoleConfig(tick_hz=10.0, drain_deadline_s=3.0, ui_cpu_share=0.0)
    )  # screen follows state at once
    state = lambda: app.state  # noqa: E731 - the app replaces nothing, but read it fresh
    try:
        async with app.run_test(size=(200, 50)) as pilot:
            await until(pilot, lambda: state().rollouts_finished >= 1 and state().live_sandboxes(), "rollouts")

            # ---- drill-downs: group row -> rollout transcript; tool row -> rollout
            await focus_panel(pilot, "groups")
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, RolloutScreen), "rollout drill-down from a group")
            await pilot.press("escape")
            await until(pilot, lambda: isinstance(app.screen, MainScreen), "back to main")
            await focus_panel(pilot, "tools")
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, RolloutScreen), "rollout drill-down from a tool call")
            await pilot.press("escape")

            # ---- sandbox: extend, drill down, run a diagnostic, kill (confirm).
            # Rollout sandboxes come and go within seconds, so the operator acts on one
            # that stays: opened in the same registry the runtime uses (same process).
            # Pause first (the operator's move too): in-flight groups drain and their
            # sandboxes close, so the probe is the one live row and stays selected.
            await pilot.press("p")
            await until(pilot, lambda: state().status == "paused" and not state().live_sandboxes(), "drained")
            probe = "operator-probe"
            await asyncio.to_thread(lambda: get_sandbox(probe).execute("echo ready", 10))
            await until(pilot, lambda: probe in state().sandboxes, "probe sandbox shown")
            await focus_panel(pilot, "sandboxes")
            table = app.screen.query_one(SandboxesTable)
            await until(pilot, lambda: probe in table.keys(), "probe sandbox row")
            table.move_cursor(row=table.get_row_index(probe))
            await pilot.pause()
            before = state().sandboxes[probe].lifetime_s
            await pilot.press("x")
            await until(pilot, lambda: state().sandboxes[probe].lifetime_s > before, "lifetime extended")
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, SandboxScreen), "sandbox drill-down")
            await pilot.press("d")
            await pilot.press(*"echo diag-ok")
            await pilot.press("enter")
            log = app.screen.query_one("#diagnostic-output", RichLog)
            await until(pilot, lambda: any("diag-ok" in str(line.text) for line in log.lines), "diagnostic output")
            await pilot.press("escape")
            await until(pilot, lambda: isinstance(app.screen, MainScreen), "back to main")
            await focus_panel(pilot, "sandboxes")
            table = app.screen.query_one(SandboxesTable)
            table.move_cursor(row=table.get_row_index(probe))
            await pilot.pause()
            await pilot.press("k")
            await until(pilot, lambda: isinstance(app.screen, ConfirmModal), "kill confirmation")
            await pilot.press("y")
            await until(pilot, lambda: state().sandboxes[probe].state == "closed", "killed sandbox closed")
            assert state().sandboxes[probe].closed_reason == "killed"
            assert host.sent.count("extend_sandbox") == 1 and host.results.get("kill_sandbox") is True
            await pilot.press("p")
            await until(pilot, lambda: state().status == "running", "resumed")
            assert host.sent[:2] == ["pause", "extend_sandbox"] and "resume" in host.sent

            # ---- filter, help, palette
            await pilot.press("slash")
            await until(pilot, lambda: isinstance(app.screen, FilterModal), "filter modal")
            group_id = next(iter(state().groups))
            await pilot.press(*group_id[:8])
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, MainScreen), "filter applied")
            assert app.screen.filter.text == group_id[:8]
            await pilot.press("question_mark")
            await until(pilot, lambda: isinstance(app.screen, HelpScreen), "help")
            await pilot.press("escape")
            await pilot.press("ctrl+p")
            await until(pilot, lambda: app.screen.__class__.__name__ == "CommandPalette", "command palette")
            await pilot.press("escape")
            await until(pilot, lambda: isinstance(app.screen, MainScreen), "palette closed")

            # ---- phase switch 1 -> 2 (confirm, drain, rebuild) and phase-2 rollouts finish
            await pilot.press("P")
            await until(pilot, lambda: isinstance(app.screen, ConfirmModal), "phase confirmation")
            await pilot.press("y")
            await until(pilot, lambda: state().run.phase == 2, "phase 2")
            done_before = sum(1 for r in state().rollouts.values() if r.phase == 2 and r.status != "running")
            await until(
                pilot,
                lambda: (
                    sum(1 for r in state().rollouts.values() if r.phase == 2 and r.status != "running") > done_before
                ),
                "a phase-2 rollout",
            )
            # the env's data checks pass on real Phase 2 data (sampled tokens with their logprobs)
            phase2 = [r for r in state().rollouts.values() if r.phase == 2 and r.status == "done"]
            assert phase2 and not [r.data_problems for r in phase2 if r.data_problems]

            # ---- evaluate now: results screen opens with the metrics
            await pilot.press("e")
            await until(pilot, lambda: isinstance(app.screen, EvaluationScreen), "evaluation results")
            view = next(reversed(state().evals.values()))
            assert view.status == "done" and "eval/pass_rate" in view.metrics
            # a task row opens its real eval rollout's transcript
            # the screen is pushed before it is composed: wait for its table, not just the screen
            await until(pilot, lambda: bool(app.screen.query("#eval-tasks")), "the evaluation tasks table")
            tasks = app.screen.query_one("#eval-tasks", DataTable)
            await until(pilot, lambda: tasks.row_count > 0, "eval task rows")
            task = str(tasks.get_row_at(0)[0])
            tasks.focus()
            tasks.move_cursor(row=0)
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, TranscriptScreen), "the eval rollout's transcript")
            opened = state().rollouts[app.screen.rollout_id]
            assert opened.group_id.startswith("eval-") and opened.item_summary == task
            await pilot.press("escape")
            await until(pilot, lambda: isinstance(app.screen, EvaluationScreen), "back to the evaluation")
            await pilot.press("escape")
            await until(pilot, lambda: isinstance(app.screen, MainScreen), "back to main")

            # ---- cancel in-flight (confirm): every item accounted
            await until(pilot, lambda: state().accounting.in_flight > 0, "live groups to cancel")
            await pilot.press("c")
            await until(pilot, lambda: isinstance(app.screen, ConfirmModal), "cancel confirmation")
            await pilot.press("y")
            await until(pilot, lambda: state().accounting.cancelled > 0, "cancelled groups")
            acc = state().accounting
            assert acc.received == acc.completed + acc.dropped_total + acc.failed + acc.cancelled + acc.in_flight

            # ---- quit: confirm, graceful stop, the app exits
            await quit_and_wait(pilot, within=STEP_S)
        assert host.done.done()
    finally:
        host.stop(0.5).result(timeout=60)
        host.join(60)
        sim.stop()
