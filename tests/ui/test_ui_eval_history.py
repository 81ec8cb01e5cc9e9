"""Evaluation screen: enter on a task row opens that eval rollout's transcript; the history
table lists every evaluation of the session (step, time, scores) and enter shows one; `V`
opens it without running a new evaluation.

Oracles: the samples files and events fed in (task ids, rollout ids, metrics, the step of
the last kept group before each evaluation)."""

from __future__ import annotations

import json
from pathlib import Path

from textual.widgets import DataTable

from environments import events as ev
from hermes_console.runtime import events as rev
from hermes_console.ui.format import clock
from hermes_console.ui.screens.evaluation import EvaluationScreen
from hermes_console.ui.screens.main import MainScreen
from hermes_console.ui.screens.transcript import TranscriptScreen
from hermes_console_dev.fake_runtime import FakeRuntime
from tests.ui.eventlog import T0
from tests.ui.helpers import make_app, messages, settle

TASKS = ("fizzbuzz", "calc", "grep")


def _evaluation(t: float, eval_id: str, rewards: list[float], samples: Path, step: int) -> tuple[list, dict]:
    """A kept group (the run reaches ``step``), then an evaluation of TASKS: one rollout each."""
    out: list = [
        rev.ItemCompleted(ts=t, group_id=f"train-{step}", step=step),
        rev.EvalStarted(ts=t + 1, eval_id=eval_id),
    ]
    rollouts = {}
    for i, (task, reward) in enumerate(zip(TASKS, rewards)):
        rid, gid = f"{eval_id}-uuid-{i}", f"eval-{eval_id}-{i}"
        rollouts[task] = rid
        out += [
            ev.RolloutStarted(ts=t + 2, rollout_id=rid, group_id=gid, item_summary=task, prompt=f"Solve {task}"),
            ev.TurnStarted(ts=t + 2, rollout_id=rid, turn=1),
            ev.TurnFinished(ts=t + 3, rollout_id=rid, turn=1, latency_s=1.0, content=f"answer for {task}"),
            ev.RolloutFinished(
                ts=t + 4, rollout_id=rid, group_id=gid, reward=reward, turns_used=1, finished_naturally=True
            ),
        ]
    samples.write_text(
        "".join(
            json.dumps({"task_id": task, "reward": r, "passed": r >= 1.0, "turns_used": 1}) + "\n"
            for task, r in zip(TASKS, rewards)
        )
    )
    passed = sum(1 for r in rewards if r >= 1.0)
    metrics = {
        "eval/pass_rate": passed / len(rewards),
        "eval/avg_reward": sum(rewards) / len(rewards),
        "eval/total_tasks": float(len(rewards)),
    }
    out.append(rev.EvalFinished(ts=t + 5, eval_id=eval_id, samples_path=str(samples), duration_s=4.0, metrics=metrics))
    return out, rollouts


async def test_eval_tasks_open_transcripts_and_the_history_shows_every_evaluation(tmp_path: Path) -> None:
    first, first_rollouts = _evaluation(T0, "ev-1", [0.0, 1.0, 0.0], tmp_path / "s1.jsonl", step=3)
    second, second_rollouts = _evaluation(T0 + 60, "ev-2", [1.0, 1.0, 0.5], tmp_path / "s2.jsonl", step=9)
    runtime = FakeRuntime([rev.RuntimeStatus(ts=T0, status="running")])
    app = make_app(runtime)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        await pilot.press("V")  # nothing evaluated yet: says so, stays on main
        await settle(pilot)
        assert isinstance(app.screen, MainScreen) and any("No evaluation" in m for m in messages(app))
        runtime.feed(first + second)
        await settle(pilot)
        await pilot.press("V")  # the latest evaluation, with the session's history
        await settle(pilot)
        assert isinstance(app.screen, EvaluationScreen) and app.screen.eval_id == "ev-2"
        history = app.screen.query_one("#eval-history", DataTable)
        rows = [[str(getattr(c, "plain", c)) for c in history.get_row_at(i)] for i in range(history.row_count)]
        assert rows == [
            ["1", clock(T0 + 1), "3", "done", "4s", "0.3333", "0.3333", "3"],
            ["2", clock(T0 + 61), "9", "done", "4s", "0.6667", "0.8333", "3"],
        ]
        # enter on a task row: that task's eval rollout, as the model saw it
        tasks = app.screen.query_one("#eval-tasks", DataTable)
        assert [tasks.get_row_at(i)[0] for i in range(tasks.row_count)] == list(TASKS)
        tasks.focus()
        tasks.move_cursor(row=1)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, TranscriptScreen)
        assert app.screen.rollout_id == second_rollouts["calc"]
        await pilot.press("escape")
        await settle(pilot)
        # enter on the first evaluation in the history: its tasks, its transcripts
        history = app.screen.query_one("#eval-history", DataTable)
        history.focus()
        history.move_cursor(row=0)
        await pilot.press("enter")
        await settle(pilot)
        assert app.screen.eval_id == "ev-1"
        tasks = app.screen.query_one("#eval-tasks", DataTable)
        assert [tasks.get_row_at(i)[1] for i in range(tasks.row_count)] == ["0", "1", "0"]
        tasks.focus()
        tasks.move_cursor(row=2)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, TranscriptScreen) and app.screen.rollout_id == first_rollouts["grep"]
