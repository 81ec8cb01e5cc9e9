"""The TerminalBench-2 evaluation runs of tests/compat (bwrap and docker): the run spec, the
streamed results file read back, and the check that nothing of the run is left behind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hermes_console.runtime.config import RunSpec
from hermes_console.sim.server import SimServer

TB2_ENV = "environments.benchmarks.terminalbench_2"


def tb2_evaluate_spec(sim: SimServer, runs_dir: Path, results: Path, backend: str, *flags: str) -> RunSpec:
    """An ``evaluate`` run of the TerminalBench-2 env against the simulator on ``backend``,
    streaming one results row per task to ``results``; ``flags`` add ``--env.*`` overrides."""
    return RunSpec(
        env=TB2_ENV,
        mode="evaluate",
        runs_dir=str(runs_dir),
        flags=[
            "--openai.base_url",
            f"{sim.base_url}/v1",
            "--env.terminal_backend",
            backend,
            *flags,
            "--env.results_path",
            str(results),
        ],
    )


def results_by_task(results: Path) -> dict[str, dict[str, Any]]:
    """The results file's rows by task name, in the order they were written."""
    rows: dict[str, dict[str, Any]] = {}
    for line in results.read_text().splitlines():
        row = json.loads(line)
        rows[row["task_name"]] = row
    return rows


def assert_no_tb2_leftovers() -> None:
    """The run's per-task env overrides and its sandboxes (task ids ``tb2-*``) are all gone."""
    from environments import sandboxes
    from environments.task_overrides import list_task_env_overrides

    assert list_task_env_overrides() == {}
    assert [s for s in sandboxes.list_sandboxes() if s.task_id.startswith("tb2-")] == []
