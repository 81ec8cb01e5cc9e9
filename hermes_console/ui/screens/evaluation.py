"""Evaluation results: status, metrics table, a per-task table read from the samples file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import DataTable, Footer, Static

from hermes_console.runtime.state import ConsoleState
from hermes_console.runtime.views import EvalView
from hermes_console.ui.format import bar, duration
from hermes_console.ui.screens.drilldown import DrillDownScreen


class EvaluationScreen(DrillDownScreen):
    def __init__(self, eval_id: str, fallback_metrics: dict[str, Any] | None = None) -> None:
        super().__init__(classes="drilldown")
        self.eval_id = eval_id
        self._fallback = dict(fallback_metrics or {})
        self._signature: tuple[object, ...] | None = None

    def compose(self) -> ComposeResult:
        yield Static("", id="eval-header", classes="drill-header")
        yield DataTable(id="eval-metrics", cursor_type="row", zebra_stripes=True)
        yield DataTable(id="eval-tasks", cursor_type="row", zebra_stripes=True)
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
        ):
            tasks.add_column(label, key=key, width=width)
        tasks.border_title = "Tasks"
        self.ready = True
        self.refresh_view(self.console.state, self.console.now())

    def refresh_view(self, state: ConsoleState, now: float) -> None:
        view = state.evals.get(self.eval_id)
        signature = (None,) if view is None else (view.status, view.done, view.total, len(view.metrics))
        if signature == self._signature:
            return
        self._signature = signature
        self.query_one("#eval-header", Static).update(self._header(view))
        metrics = view.metrics if view is not None and view.metrics else self._fallback
        table = self.query_one("#eval-metrics", DataTable)
        table.clear()
        for name, value in sorted(metrics.items()):
            table.add_row(name, _value(value), key=name)
        self._fill_tasks(view)

    def _fill_tasks(self, view: EvalView | None) -> None:
        """One row per evaluated task, from the samples file (written once the evaluation ends)."""
        tasks = self.query_one("#eval-tasks", DataTable)
        tasks.clear()
        samples = _read_samples(view.samples_path) if view is not None and view.samples_path else []
        for i, sample in enumerate(samples):
            task = sample.get("task_id", sample.get("id", i))
            reward = sample.get("reward", sample.get("score"))
            passed = sample.get("passed")
            tasks.add_row(
                str(task),
                "–" if reward is None else _value(reward),
                "–" if passed is None else ("yes" if passed else "no"),
                _value(sample.get("turns_used", "–")),
                key=str(i),
            )
        tasks.border_title = f"Tasks ({len(samples)})" if samples else "Tasks (no samples file)"

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
