"""Evaluation results: status, metrics table, a per-task table read from the samples file
(enter on a task opens its rollout's transcript), and the history of every evaluation of
this session (step, time, scores: eval scores over training; enter shows that one)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.widgets import DataTable, Static

from hermes_console.runtime.state import ConsoleState
from hermes_console.runtime.views import EvalView
from hermes_console.ui.format import bar, clock, duration
from hermes_console.ui.screens.drilldown import DrillDownScreen
from hermes_console.ui.widgets.footer import Footer

HISTORY_FIXED = (
    ("n", "#", 4),
    ("started", "started", 9),
    ("step", "step", 6),
    ("status", "status", 8),
    ("took", "took", 8),
)
MAX_HISTORY_METRICS = 5  # metric columns of the history (the first the evaluations reported)


class EvaluationScreen(DrillDownScreen):
    def __init__(self, eval_id: str, fallback_metrics: dict[str, Any] | None = None) -> None:
        super().__init__(classes="drilldown")
        self.eval_id = eval_id
        self._fallback = dict(fallback_metrics or {})
        self._signature: tuple[object, ...] | None = None
        self._task_rollouts: dict[str, str] = {}  # task row key -> the eval rollout's id

    def compose(self) -> ComposeResult:
        yield Static("", id="eval-header", classes="drill-header")
        yield DataTable(id="eval-metrics", cursor_type="row", zebra_stripes=True)
        yield DataTable(id="eval-tasks", cursor_type="row", zebra_stripes=True)
        yield DataTable(id="eval-history", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#eval-metrics", DataTable)
        table.add_column("metric", key="metric", width=32)
        table.add_column("value", key="value", width=16)
        table.border_title = "Metrics"
        tasks = self.query_one("#eval-tasks", DataTable)
        for key, label, width in (
            ("task", "task", 40),
            ("reward", "reward", 10),
            ("passed", "passed", 7),
            ("turns", "turns", 6),
            ("rollout", "transcript", 12),
        ):
            tasks.add_column(label, key=key, width=width)
        tasks.border_title = "Tasks"
        self.ready = True
        self.refresh_view(self.console.state, self.console.now())

    def refresh_view(self, state: ConsoleState, now: float) -> None:
        view = state.evals.get(self.eval_id)
        signature = (
            self.eval_id,
            None if view is None else (view.status, view.done, view.total, len(view.metrics), len(view.rollouts)),
            tuple((k, v.status) for k, v in state.evals.items()),
        )
        if signature == self._signature:
            return
        self._signature = signature
        self._fill_history(state)
        self.query_one("#eval-header", Static).update(self._header(view))
        metrics = view.metrics if view is not None and view.metrics else self._fallback
        table = self.query_one("#eval-metrics", DataTable)
        table.clear()
        for name, value in sorted(metrics.items()):
            table.add_row(name, _value(value), key=name)
        self._fill_tasks(view, state)

    def _fill_tasks(self, view: EvalView | None, state: ConsoleState) -> None:
        """One row per evaluated task, from the samples file (written once the evaluation ends)."""
        tasks = self.query_one("#eval-tasks", DataTable)
        tasks.clear()
        self._task_rollouts = {}
        samples = _read_samples(view.samples_path) if view is not None and view.samples_path else []
        for i, sample in enumerate(samples):
            task = sample.get("task_id", sample.get("id", i))
            reward = sample.get("reward", sample.get("score"))
            passed = sample.get("passed")
            rollout_id = view.rollouts.get(str(task)) if view is not None else None
            if rollout_id is not None:
                self._task_rollouts[str(i)] = rollout_id
            tasks.add_row(
                str(task),
                "–" if reward is None else _value(reward),
                "–" if passed is None else ("yes" if passed else "no"),
                _value(sample.get("turns_used", "–")),
                "–" if rollout_id is None else state.history.label_of(rollout_id),
                key=str(i),
            )
        title = f"Tasks ({len(samples)})" if samples else "Tasks (no samples file)"
        tasks.border_title = title + ("  enter: transcript" if self._task_rollouts else "")

    def _fill_history(self, state: ConsoleState) -> None:
        """Every evaluation of this session, oldest first: how the eval scores moved over training."""
        history = self.query_one("#eval-history", DataTable)
        history.clear(columns=True)
        metrics = _history_metrics(state)
        for key, label, width in HISTORY_FIXED:
            history.add_column(label, key=key, width=width)
        for name in metrics:
            label = name.removeprefix("eval/")
            history.add_column(label, key=f"m:{name}", width=max(8, min(len(label), 16)))
        for n, (eval_id, view) in enumerate(state.evals.items(), 1):
            cells = [
                Text(str(n), style="bold" if eval_id == self.eval_id else ""),
                clock(view.started_at),
                str(view.step),
                view.status,
                "–" if view.status == "running" else duration(view.duration_s),
            ]
            for name in metrics:
                value = view.metrics.get(name)
                cells.append("–" if value is None else _value(value))
            history.add_row(*cells, key=eval_id)
        history.border_title = f"Evaluations this session ({len(state.evals)})  enter: show"
        if self.eval_id in state.evals:
            history.move_cursor(row=list(state.evals).index(self.eval_id))

    @on(DataTable.RowSelected, "#eval-tasks")
    def _open_transcript(self, event: DataTable.RowSelected) -> None:
        from hermes_console.ui.screens.transcript import TranscriptScreen

        rollout_id = self._task_rollouts.get(str(event.row_key.value))
        if rollout_id is None:
            self.app.notify("No rollout recorded for this task (evaluated before the console attached?).")
            return
        self.app.push_screen(TranscriptScreen(rollout_id))

    @on(DataTable.RowSelected, "#eval-history")
    def _show_eval(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value and event.row_key.value != self.eval_id:
            self.eval_id = str(event.row_key.value)
            self._fallback = {}
            self.refresh_view(self.console.state, self.console.now())

    def _header(self, view: EvalView | None) -> Text:
        text = Text(f"Evaluation {self.eval_id}", style="bold")
        if view is None:
            text.append("\nno evaluation events received for this id yet", style="dim")
            return text
        style = {"running": "bold cyan", "done": "bold green", "error": "bold red"}.get(view.status, "")
        text.append("   ")
        text.append(f" {view.status.upper()} ", style=style + " reverse")
        if view.status == "running":
            fraction = view.done / view.total if view.total else 0.0
            text.append(f"\n{bar(fraction, 30)} {view.done}/{view.total or '?'}", style="cyan")
        else:
            text.append(f"   took {duration(view.duration_s)}   {view.done or view.total} samples")
        text.append("\nsamples ", style="dim")
        text.append(view.samples_path or "(not written)", style="underline" if view.samples_path else "dim")
        if view.error:
            text.append(f"\nerror: {view.error}", style="bold red")
        return text


def _history_metrics(state: ConsoleState) -> list[str]:
    """The metric columns: names as the evaluations reported them, first seen first, without
    timings (they say nothing about the policy)."""
    names: dict[str, None] = {}
    for view in state.evals.values():
        for name in view.metrics:
            if "time" not in name and len(names) < MAX_HISTORY_METRICS:
                names.setdefault(name, None)
    return list(names)


MAX_SAMPLES = 2_000  # rows of the per-task table (an eval set larger than this is cut)


def _read_samples(path: str) -> list[dict[str, Any]]:
    """The samples atroposlib's evaluate_log wrote (one JSON object a line); [] when unreadable."""
    out: list[dict[str, Any]] = []
    try:
        with Path(path).open(encoding="utf-8") as fp:
            for line in fp:
                if len(out) >= MAX_SAMPLES:
                    break
                try:
                    sample = json.loads(line)
                except ValueError:
                    continue
                if isinstance(sample, dict):
                    out.append(sample)
    except OSError:
        return []
    return out


def _value(value: Any) -> str:
    # Counts often arrive as floats (40.0): shown as the integers they are.
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)
