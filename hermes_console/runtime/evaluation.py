"""On-demand evaluation: ``env.evaluate()`` run beside training, its results kept.

atroposlib's ``evaluate_log`` is routed through ``atropos_bridge`` so the metrics and samples
land in ``<run>/evals/<eval_id>/`` (metrics.json, samples.jsonl) and reach the console as
``EvalStarted``/``EvalProgress``/``EvalFinished``. Evaluation may pause intake while it runs:
it holds the :class:`~hermes_console.runtime.intake.IntakeGate` like the operator would, and
never calls into the driver. Everything here runs on the host's loop thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
import uuid
from pathlib import Path
from typing import Any

from environments import events
from hermes_console.runtime import atropos_bridge
from hermes_console.runtime import events as rev
from hermes_console.runtime.errors import EvalBusy, first_line
from hermes_console.runtime.intake import OPERATOR, IntakeGate
from hermes_console.runtime.sinks import dumps_strict, jsonable

# Set inside an evaluation's task: its rollouts are counted for the progress display.
current_eval_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("hermes_current_eval_id", default=None)

PROGRESS_EVERY_S = 0.5


class Evaluations:
    """Runs one evaluation at a time for the driver's env."""

    def __init__(self, env: Any, gate: IntakeGate, run_dir: Path) -> None:
        self.env = env
        self.gate = gate
        self.run_dir = run_dir
        self._task: asyncio.Task[dict[str, Any]] | None = None
        self._seq = 0
        self._rollouts = 0  # rollouts finished in the running evaluation (display only)

    async def run(self, pause_intake: bool = False, wandb: Any | None = None) -> dict[str, Any]:
        """Evaluate now; the metrics, or RuntimeError naming the evaluation and its error."""
        if self._task is not None and not self._task.done():
            raise EvalBusy("an evaluation is already running; wait for it to finish before starting another")
        self._seq += 1
        eval_id = f"eval-{self._seq}-{uuid.uuid4().hex[:6]}"
        ctx = contextvars.copy_context()
        ctx.run(current_eval_id.set, eval_id)
        ctx.run(events.current_group_id.set, None)
        self._task = asyncio.get_running_loop().create_task(
            self._run(eval_id, pause_intake, wandb), name=f"hermes-{eval_id}", context=ctx
        )
        return await asyncio.shield(self._task)

    async def cancel(self) -> None:
        """Stop a running evaluation (a stopping run); it reports itself as cancelled."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task

    def _count(self, event: events.Event) -> None:
        """Observer: the evaluation's finished rollouts, for its progress line."""
        if event.kind == "rollout_finished" and current_eval_id.get() is not None:
            self._rollouts += 1

    def _total(self) -> int:
        for attr in ("eval_items", "test_items", "eval_dataset", "test"):
            value = getattr(self.env, attr, None)
            try:
                if value is not None and not isinstance(value, (str, bytes)):
                    return len(value)
            except TypeError:
                continue
        return 0

    async def _run(self, eval_id: str, pause_intake: bool, wandb: Any | None) -> dict[str, Any]:
        env = self.env
        eval_dir = self.run_dir / "evals" / eval_id
        eval_dir.mkdir(parents=True, exist_ok=True)
        paused_here = pause_intake and not self.gate.held_by(OPERATOR)
        if paused_here:
            self.gate.pause()
        events.emit(rev.EvalStarted(eval_id=eval_id, intake_paused=pause_intake))
        captured: dict[str, Any] = {"metrics": {}, "samples": None}

        async def capture(metrics: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            captured["metrics"].update(metrics or {})
            if kwargs.get("samples"):
                captured["samples"] = list(kwargs["samples"])
            kwargs["verbose"] = False  # it would print a table into the console's terminal
            with atropos_bridge.evals_saved_to(env, str(eval_dir)):
                return await original(metrics, *args, **kwargs)

        original, restore_evaluate_log = atropos_bridge.route_evaluate_log(env, capture)
        self._rollouts = 0
        events.add_observer(self._count)
        total = self._total()
        progress = asyncio.get_running_loop().create_task(self._progress(eval_id, total), name="hermes-eval-progress")
        t0 = time.monotonic()
        error: str | None = None
        try:
            returned = await env.evaluate()
            if not captured["metrics"] and isinstance(returned, dict):
                captured["metrics"].update(returned)
        except asyncio.CancelledError:
            error = "cancelled"
            raise
        except Exception as exc:  # noqa: BLE001 - the evaluation reports its error, the run goes on
            error = first_line(exc)
        finally:
            progress.cancel()
            with contextlib.suppress(BaseException):
                await progress
            events.remove_observer(self._count)
            restore_evaluate_log()
            metrics = jsonable(captured["metrics"])
            samples_path = write_eval_files(eval_dir, metrics, captured["samples"])
            if total or self._rollouts:
                events.emit(rev.EvalProgress(eval_id=eval_id, done=self._rollouts, total=max(total, self._rollouts)))
            duration = time.monotonic() - t0
            events.emit(
                rev.EvalFinished(
                    eval_id=eval_id, metrics=metrics, samples_path=samples_path, error=error, duration_s=duration
                )
            )
            if wandb is not None:
                wandb.log_eval(eval_id, metrics, duration, error)
            if paused_here and not self.gate.stopping:
                self.gate.resume()
        if error:
            raise RuntimeError(f"evaluation {eval_id} failed: {error}")
        return dict(metrics)

    async def _progress(self, eval_id: str, total: int) -> None:
        last = -1
        while True:
            await asyncio.sleep(PROGRESS_EVERY_S)
            if self._rollouts != last:
                last = self._rollouts
                events.emit(rev.EvalProgress(eval_id=eval_id, done=last, total=max(total, last)))


def write_eval_files(eval_dir: Path, metrics: dict[str, Any], samples: list[Any] | None) -> str | None:
    """metrics.json (lighteval's shape) unless ``evaluate_log`` wrote one, samples.jsonl; strict JSON."""
    metrics_path = eval_dir / "metrics.json"
    if not metrics_path.exists():
        metrics_path.write_text(dumps_strict({"results": {"all": metrics}}, indent=2))
    samples_path = eval_dir / "samples.jsonl"
    if samples and not samples_path.exists():
        with samples_path.open("w") as fp:
            for sample in samples:
                fp.write(dumps_strict(sample) + "\n")
    return str(samples_path) if samples_path.exists() else None
