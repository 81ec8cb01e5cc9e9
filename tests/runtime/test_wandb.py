"""wandb for real: a console-hosted run asked to log to wandb does (offline), with
atroposlib's metrics, ours, the rollouts table, evaluation metrics and the config.

The oracle is the offline run itself, read back from wandb's transaction log with
wandb's own protobuf records (tests/helpers/wandb_records.py), not our idea of what we logged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from environments import events
from hermes_console.runtime import events as rev
from hermes_console.runtime.wandb_link import StepFigures, run_name, wandb_mode
from tests.helpers.wandb_records import offline_runs, read_offline_run
from tests.runtime.runtime_helpers import make_spec

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def wandb_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "wandb-root"
    monkeypatch.setenv("WANDB_DIR", str(root))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_PROJECT", "hc-test")
    return root


def _finish(p: Any) -> None:
    p.until(lambda s: s.status == "finished", 120, "run finished")
    p.stop(2.0)


def test_process_run_with_use_wandb_writes_an_offline_run(sim, tmp_path, live, wandb_dir):
    p = live(
        make_spec(
            sim, tmp_path, "--env.use_wandb", "true", "--env.total_steps", "3", "--env.group_size", "2", max_in_flight=2
        ),
        exit_when_finished=True,
    )
    _finish(p)
    status = p.state.wandb
    assert status is not None and status.state == "finished" and status.mode == "offline"

    (run_dir,) = offline_runs(wandb_dir)
    assert Path(status.path) == run_dir  # the console shows where the run is
    run = read_offline_run(run_dir)
    assert run.exit_code == 0  # finished cleanly: sync-ready
    assert run.project == "hc-test" and run.run_name.startswith("terminal-tasks-")
    # one step per kept group, as atroposlib's process loop logs them
    kept = p.state.accounting.completed
    assert kept >= 1
    steps = sorted({row["_step"] for row in run.history if "_step" in row})
    assert steps == list(range(kept))
    keys = run.keys()
    # atroposlib's own (BaseEnv.wandb_log), the env's addition, the rollouts table ...
    assert {"train/completion_lengths", "train/tool_errors_count", "train/rollouts/_type"} <= keys
    table_rows = [row for row in run.history if row.get("train/rollouts/_type") == "table-file"]
    assert table_rows and all((run_dir / "files" / row["train/rollouts/path"]).is_file() for row in table_rows)
    # ... and ours
    assert {
        "hermes/rollouts_per_s",
        "hermes/latency/rollout_mean_s",
        "hermes/latency/generation_mean_s",
        "hermes/latency/tools_mean_s",
        "hermes/sandboxes_live",
        "hermes/data/tokens",
    } <= keys
    assert sum(row.get("hermes/rollouts", 0) for row in run.history) == p.state.rollouts_finished
    # the resolved config is the run config
    assert run.config["env"]["group_size"] == 2 and run.config["env"]["use_wandb"] is True
    assert run.config["mode"] == "process" and run.config["servers"][0]["base_url"].startswith(sim.base_url)


def test_use_wandb_false_writes_no_run(sim, tmp_path, live, wandb_dir):
    p = live(make_spec(sim, tmp_path, "--env.total_steps", "1", "--env.group_size", "2"), exit_when_finished=True)
    _finish(p)
    assert p.state.wandb is None or p.state.wandb.state == "off"
    assert offline_runs(wandb_dir) == [] and not (tmp_path / "run" / "wandb").exists()


def test_on_demand_evaluation_is_logged_under_eval(sim, tmp_path, live, wandb_dir):
    p = live(
        make_spec(sim, tmp_path, "--env.use_wandb", "true", "--env.total_steps", "1", "--env.group_size", "2"),
        exit_when_finished=False,
    )
    p.until(lambda s: s.status == "finished", 120, "run finished")
    metrics = p.host.evaluate().result(timeout=120)
    assert metrics
    p.stop(2.0)
    (run_dir,) = offline_runs(wandb_dir)
    run = read_offline_run(run_dir)
    eval_rows = [row for row in run.history if any(k.startswith("eval/") for k in row)]
    assert len(eval_rows) == 1
    for key, value in metrics.items():
        if isinstance(value, (int, float)):
            assert eval_rows[0][f"eval/{key}"] == pytest.approx(value)
    assert eval_rows[0]["eval/failed"] == 0


def test_wandb_that_cannot_start_is_a_clear_error_at_start(sim, tmp_path, live, monkeypatch):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where WANDB_DIR should be")
    monkeypatch.setenv("WANDB_DIR", str(blocker / "sub"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    p = live(make_spec(sim, tmp_path, "--env.use_wandb", "true", "--env.total_steps", "1"), exit_when_finished=True)
    p.until(lambda s: s.status == "error", 60, "error status")
    detail = p.state.status_detail
    assert "use_wandb" in detail and "wandb.init failed" in detail and "Traceback" not in detail
    assert p.state.accounting.received == 0  # nothing ran without the wandb run it asked for


# --------------------------------------------------------------------------- units


def test_mode_is_offline_unless_the_user_chose():
    assert wandb_mode({}) == "offline"
    assert wandb_mode({"WANDB_MODE": "online"}) == "online"
    assert wandb_mode({"WANDB_MODE": "disabled"}) == "disabled"
    assert wandb_mode({"HERMES_WANDB_ONLINE": "1"}) == "online"


def test_run_name_follows_atroposlib():
    import random
    from datetime import datetime

    name = run_name("env", datetime(2026, 1, 2), random.Random(0))
    head, date, tail = name[:3], name[4:14], name[15:]
    assert (head, date, len(tail), tail.isalpha() and tail.islower()) == ("env", "2026-01-02", 6, True)


def test_step_figures_split_latency_and_count_errors_by_kind():
    now = [100.0]
    f = StepFigures(lambda: now[0])
    f.observe(events.SandboxCreated(task_id="r1", backend="local"))
    f.observe(events.TurnFinished(rollout_id="r1", turn=1, latency_s=2.0))
    f.observe(
        events.ToolCallFinished(
            rollout_id="r1",
            turn=1,
            call_id="c",
            tool_name="terminal",
            duration_s=1.5,
            error="boom",
            error_kind="timeout",
        )
    )
    f.observe(events.TurnFinished(rollout_id="r1", turn=2, latency_s=1.0))
    f.observe(
        events.RolloutFinished(
            rollout_id="r1",
            group_id="g",
            reward=1.0,
            turns_used=2,
            finished_naturally=True,
            duration_s=5.0,
            token_count=40,
        )
    )
    f.observe(events.ItemDropped(group_id="g2", reason="identical_scores"))
    f.observe(rev.ItemCompleted(group_id="g"))
    now[0] = 102.0
    out = f.take()
    assert out["hermes/latency/generation_mean_s"] == 3.0
    assert out["hermes/latency/tools_mean_s"] == 1.5
    assert out["hermes/latency/reward_and_overhead_mean_s"] == 0.5
    assert out["hermes/rollouts_per_s"] == 0.5 and out["hermes/groups_kept"] == 1
    assert out["hermes/errors/tool_timeout"] == 1 and out["hermes/errors/dropped_identical_scores"] == 1
    assert out["hermes/sandboxes_live"] == 1 and out["hermes/data/tokens"] == 40
    again = f.take()  # a step's figures are not counted twice
    assert again["hermes/rollouts"] == 0 and "hermes/errors/tool_timeout" not in again


def test_summary_and_status_bar_say_where_the_run_logs():
    from rich.console import Console

    from hermes_console.runtime.headless import summary_table
    from hermes_console.runtime.state import ConsoleState
    from hermes_console.ui.widgets.status_bar import StatusBar

    state = ConsoleState()
    state.apply(
        rev.WandbStatus(
            state="logging", mode="offline", project="p", name="n", path="/runs/x/wandb/offline-run-20261125_1-abc"
        )
    )
    console = Console(width=200, record=True)
    console.print(summary_table(state))
    assert "wandb sync /runs/x/wandb/offline-run-20261125_1-abc" in console.export_text()
    bar = StatusBar()._items_line(state).plain
    assert "wandb offline offline-run-20261125_1-abc" in bar
    state.apply(rev.WandbStatus(state="logging", mode="offline", path="/x/offline-run-1", log_errors=2))
    assert "(2 log errors)" in StatusBar()._items_line(state).plain


def test_a_run_that_fails_after_wandb_started_still_finishes_the_wandb_run(sim, tmp_path, live, wandb_dir):
    repo = Path(__file__).resolve().parents[2]
    p = live(
        make_spec(
            sim,
            tmp_path,
            "--env.use_wandb",
            "true",
            "--env.total_steps",
            "1",
            env=f"{repo}/tests/faults/fault_envs.py:SetupRaisesEnv",
        ),
        exit_when_finished=True,
    )
    p.until(lambda s: s.status == "error", 60, "setup() error")
    assert p.host.join(60)
    (run_dir,) = offline_runs(wandb_dir)
    assert read_offline_run(run_dir).exit_code == 1  # closed, and marked failed
