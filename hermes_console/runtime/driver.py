"""The driver: runs the env itself (never ``process_manager``) so the console can
pause, drain, cancel, switch phase and evaluate while it runs.

Every item it takes is accounted exactly once: ItemReceived, then one of
ItemCompleted (kept), ItemDropped (not kept; also written to ``dropped.jsonl``),
ItemFailed (raised or timed out) or ItemCancelled. The driver emits these events
and is their only source; it decides from what the env *returns* (the group, and
the rollout failures written into the group's ``environments.verdicts.GroupReport``),
never from events it hears on the bus.

Whether the next item may start is the :class:`~hermes_console.runtime.intake.IntakeGate`'s
call (the driver owns it; the trainer link and evaluation hold it). Evaluation lives in
``evaluation.py``. Everything here runs on the host's loop thread; public coroutines are
called through the host's commands.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import io
import logging
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from environments import events, verdicts
from environments.atropos_compat import drop_reason
from environments.redact import safe_head
from hermes_console.runtime import atropos_bridge
from hermes_console.runtime import events as rev
from hermes_console.runtime.config import ResolvedRun
from hermes_console.runtime.errors import IntakeStopped, first_line
from hermes_console.runtime.evaluation import Evaluations, current_eval_id
from hermes_console.runtime.intake import OPERATOR, PHASE_SWITCH, IntakeGate
from hermes_console.runtime.servers import build_server_manager, close_server_manager
from hermes_console.runtime.sinks import DroppedWriter, GroupWriter, SinkError

logger = logging.getLogger(__name__)

DEFAULT_MAX_IN_FLIGHT = 8
FATAL_ERROR_STREAK = 8  # rollouts failing in a row, none succeeding, before intake stops (at least 2 groups' worth)


@dataclass
class GroupRecord:
    group_id: str
    item: Any
    started: float
    report: verdicts.GroupReport
    task: asyncio.Task[None] | None = None
    accounted: bool = False


def _emit(event: events.Event) -> None:
    events.emit(event)


def _unpack(result: Any) -> tuple[Any, list[Any]]:
    if isinstance(result, tuple) and len(result) == 2:
        return result[0], list(result[1] or [])
    return result, []


class Driver:
    def __init__(
        self,
        env: Any,
        resolved: ResolvedRun,
        *,
        phase: int = 1,
        max_in_flight: int | None = None,
        idle_poll_s: float = 0.1,
    ) -> None:
        self.env = env
        self.resolved = resolved
        self.mode = resolved.spec.mode
        self.phase = phase
        cfg = env.config
        self.total_steps = int(getattr(cfg, "total_steps", 0) or 0)
        timeout = float(getattr(cfg, "worker_timeout", -1) or -1)
        self.worker_timeout: float | None = timeout if timeout > 0 else None
        workers = getattr(env, "max_num_workers", -1)
        self.max_in_flight = max_in_flight or (
            workers if isinstance(workers, int) and workers > 0 else DEFAULT_MAX_IN_FLIGHT
        )
        self.idle_poll_s = idle_poll_s
        self.in_flight: dict[str, GroupRecord] = {}
        self.done = 0  # completed + dropped + failed (process mode's step count)
        self.completed = 0
        self.received = 0
        self.get_next_item_calls = 0
        self._sequence_pos = 0  # position in the env's item sequence (sharding)
        self.last_metrics: dict[str, Any] = {}
        self.gate = IntakeGate(lambda: len(self.in_flight), self.max_in_flight)
        # Set by shutdown() once the drain has ended (groups finished or cancelled): until then
        # the jsonl and the trainer link stay open for groups finishing in the drain.
        self._drained = asyncio.Event()
        self._cut = asyncio.Event()  # a forced stop: end the drain now (see cut_drain)
        # Rollouts that ended in an error (server call failed after retries, sandbox or setup
        # failure; the env reports each in the group's report): their group is no training data.
        # A long unbroken run of them means the backend is unusable (garbage server, broken
        # sandbox root): intake stops, fatally.
        self._error_streak = 0
        self._last_rollout_error = ""
        group_size = int(getattr(cfg, "group_size", 1) or 1)
        self.fatal_error_streak = max(FATAL_ERROR_STREAK, 2 * group_size)
        self._trainer: Any | None = None  # serve mode: TrainerLink
        self.wandb: Any | None = None  # WandbLink, set by the host when the run has one
        self.run_dir = Path(resolved.run_dir)
        self.writer: GroupWriter | None = None
        jsonl = getattr(cfg, "data_path_to_save_groups", None)
        self.jsonl_path: str | None = jsonl
        self.dropped = DroppedWriter(
            str(Path(jsonl).with_name("dropped.jsonl") if jsonl else self.run_dir / "dropped.jsonl")
        )
        self.evaluations = Evaluations(env, self.gate, self.run_dir)
        self._install_writer()

    # ------------------------------------------------------------------ plumbing

    def _install_writer(self) -> None:
        """Swap atroposlib's buffered jsonlines writer for ours (flushed, attributed)."""
        old = getattr(self.env, "jsonl_writer", None)
        if old is None or not self.jsonl_path:
            return
        try:
            old.close()
        except Exception:  # noqa: BLE001
            pass
        self.writer = GroupWriter(self.jsonl_path, item_of=self._item_summary)
        atropos_bridge.install_jsonl_writer(self.env, self.writer)

    def _item_summary(self, group_id: str) -> str | None:
        rec = self.in_flight.get(group_id)
        return safe_head(_summary_of(rec.item), 200) if rec is not None else None

    def _rollout_ended(self, failure: str | None) -> None:
        """A rollout of a running group ended (the env's report): the "every rollout fails" streak."""
        if failure:
            self._error_streak += 1
            self._last_rollout_error = failure
        else:
            self._error_streak = 0

    @property
    def status(self) -> str:
        return self.gate.status

    def mark_stopped(self) -> None:
        """The host stopped the run: "stopped" with the summary, unless it finished or failed first."""
        if not self.gate.finished and self.gate.status != "error":
            self.gate.set_status("stopped", self._summary())

    def mark_error(self, detail: str) -> None:
        self.gate.set_status("error", detail)

    # ------------------------------------------------------------------ main loop

    async def run(self) -> None:
        """setup(), then the intake loop (or one evaluation) until done or stopped."""
        await self.env.setup()
        if self.mode == "evaluate":
            self.gate.set_status("running", "evaluating")
            result = await self.evaluate(pause_intake=False)
            self.gate.set_status("finished", f"evaluation done: {len(result)} metric(s)")
            self.gate.finished = True
            return
        if self.mode == "serve":
            from hermes_console.runtime.trainer import TrainerLink

            self._trainer = TrainerLink(self.env, self.gate, self.run_dir, wandb=self.wandb)
            self._trainer.start()
        self.gate.set_status("paused" if self.gate.held_by(OPERATOR) else "running")
        try:
            await self._intake_loop()
            if self.gate.stopping:
                await self._drained.wait()
        finally:
            if self._trainer is not None:
                await self._trainer.stop()
        if self._trainer is not None and self._trainer.error is not None and not self.gate.stopping:
            raise self._trainer.error  # e.g. group_size > batch_size: the host reports it as the run's error
        await self.finish_outputs()
        if not self.gate.stopping:
            self.gate.finished = True
            self.gate.set_status("finished", self._summary())

    def _summary(self) -> str:
        return f"{self.done} group(s) done ({self.completed} kept); jsonl: {self.jsonl_path or '-'}"

    def _process_target_reached(self) -> bool:
        return self.mode == "process" and self.total_steps > 0 and self.done >= self.total_steps

    async def _intake_loop(self) -> None:
        exhausted = False
        gate = self.gate
        while not gate.stopping:
            if gate.closed_reason is not None:
                await self.drain()  # in-flight groups are not at fault: let them finish
                raise IntakeStopped(f"{gate.closed_reason}; intake stopped after {self.received} item(s)")
            if self._process_target_reached() and not self.in_flight:
                return
            if self._trainer is not None and self._trainer.finished and not self.in_flight:
                return
            if not gate.open or not gate.has_room:
                await gate.wait()
                continue
            if self.mode == "process" and self.total_steps > 0 and self.done + len(self.in_flight) >= self.total_steps:
                await gate.wait()
                continue
            if exhausted and self.in_flight and not self.env.backlog:
                await gate.wait()
                exhausted = False
                continue
            try:
                item = await self._next_item()
            except Exception as exc:  # noqa: BLE001 - the env cannot give items: stop taking them, keep what is running
                self._stop_intake(f"get_next_item() raised {first_line(exc)}")
                continue
            if item is None:
                if self.mode == "process":
                    if not self.in_flight and not self.env.backlog:
                        logger.info("get_next_item returned None: no more items")
                        return
                    exhausted = True
                    continue
                await asyncio.sleep(self.idle_poll_s)  # serve: "nothing right now"
                continue
            exhausted = False
            if not gate.open or not gate.has_room:
                # Intake closed while get_next_item ran (a pause, a trainer outage, stopping):
                # the item starts no group now; it waits first in line for intake to open.
                self.env.backlog.insert(0, item)
                continue
            self._start_group(item)

    async def _next_item(self) -> Any:
        backlog = getattr(self.env, "backlog", None)
        if backlog:
            return backlog.pop(0)
        shard = self.resolved.shard
        while True:
            self.get_next_item_calls += 1
            item = await self.env.get_next_item()
            if item is None or shard is None:
                return item
            k, self._sequence_pos = self._sequence_pos, self._sequence_pos + 1
            if shard.takes(k):  # another host of the run takes the others
                return item

    def _start_group(self, item: Any) -> None:
        group_id = uuid.uuid4().hex[:12]
        report = verdicts.GroupReport(group_id, on_rollout=self._rollout_ended)
        rec = GroupRecord(group_id=group_id, item=item, started=time.monotonic(), report=report)
        self.received += 1
        _emit(rev.ItemReceived(group_id=group_id, item_summary=safe_head(_summary_of(item), 120)))
        ctx = contextvars.copy_context()
        ctx.run(events.current_group_id.set, group_id)
        ctx.run(events.current_phase.set, self.phase)
        ctx.run(current_eval_id.set, None)
        ctx.run(verdicts.current_report.set, report)  # the env writes its rollouts' outcomes here
        self.in_flight[group_id] = rec
        rec.task = asyncio.get_running_loop().create_task(self._run_group(rec), name=f"group-{group_id}", context=ctx)

    # ------------------------------------------------------------------ one group

    async def _run_group(self, rec: GroupRecord) -> None:
        try:
            try:
                if self.worker_timeout is not None:
                    async with asyncio.timeout(self.worker_timeout) as cm:
                        result = await self.env.collect_trajectories(rec.item)
                else:
                    cm = None
                    result = await self.env.collect_trajectories(rec.item)
            except TimeoutError:
                if cm is not None and cm.expired():
                    self._fail(rec, f"no result within worker_timeout={self.worker_timeout:g}s", "timeout")
                    return
                raise
            scored, backlog = _unpack(result)
            if backlog:
                self.env.backlog.extend(backlog)
            self._check_error_streak()
            rollout_error = rec.report.first_failure
            if scored and rollout_error is not None:
                groups = scored if isinstance(scored, list) else [scored]
                self._drop_all(rec, groups, [("rollout_error", f"a rollout failed: {rollout_error}")] * len(groups))
                return
            if not scored:
                self._account(rec, events.ItemDropped(group_id=rec.group_id, reason="empty_group"))
                return
            processed = await self.env.postprocess_histories(scored)
            await self._send(rec, processed)
            await self._wandb_log()
        except asyncio.CancelledError:
            self._account(rec, rev.ItemCancelled(group_id=rec.group_id, reason="cancelled"))
            raise
        except SinkError as exc:  # nowhere to keep results: stop taking items (the rest still runs)
            self._fail(rec, str(exc), "sink")
            self._stop_intake(str(exc))
        except Exception as exc:  # noqa: BLE001 - one failing group never stops the run
            self._fail(rec, first_line(exc) or type(exc).__name__, "exception")
        finally:
            self.in_flight.pop(rec.group_id, None)
            self.gate.group_ended()

    def _check_error_streak(self) -> None:
        """Stop intake when the last rollouts all failed: the backend cannot produce data."""
        if self._error_streak >= self.fatal_error_streak:
            self._stop_intake(
                f"the last {self._error_streak} rollouts all failed (none succeeded in between), "
                f"the backend looks unusable; last error: {self._last_rollout_error}"
            )

    def _stop_intake(self, reason: str) -> None:
        """Close intake for good and say why; the intake loop ends the run once in-flight groups finish."""
        if not self.gate.close(reason):
            return
        _emit(
            rev.LogRecord(
                level="ERROR",
                logger="runtime",
                message=f"{reason}; intake stopped, finishing {len(self.in_flight)} in-flight group(s)",
            )
        )

    def _account(self, rec: GroupRecord, event: events.Event) -> bool:
        """Count ``rec`` as terminal exactly once, and say so (the only source of item-end events)."""
        if rec.accounted:
            return False
        rec.accounted = True
        if not isinstance(event, rev.ItemCancelled):
            self.done += 1
        _emit(event)
        return True

    def _fail(self, rec: GroupRecord, error: str, kind: str) -> None:
        self._account(rec, events.ItemFailed(group_id=rec.group_id, error=error, error_kind=kind))

    def _drop_reason(self, group: Any) -> tuple[str, str] | None:
        # The one judgement of the group's data (the env leaves it to us: a report is open).
        # Over-long sequences are never kept (nor sent): the same rule as atroposlib's own serve path.
        return drop_reason(group, self.env.config, getattr(self.env, "max_token_len", -1), True)

    async def _send(self, rec: GroupRecord, processed: Any) -> None:
        groups = processed if isinstance(processed, list) else [processed]
        reasons = [self._drop_reason(g) for g in groups]
        valid = [g for g, r in zip(groups, reasons) if r is None]
        if not valid:  # nothing a trainer could use: never handed to the env's writer/sender
            self._drop_all(rec, groups, reasons)
            return
        to_send: Any = valid if isinstance(processed, list) else valid[0]
        # The live count only: a settled count of an earlier send of this id is not "before".
        before = self.writer.written.get(rec.group_id, 0) if self.writer else 0
        try:
            await self.env.handle_send_to_api(
                to_send, rec.item, do_send_to_api=(self.mode == "serve"), abort_on_any_max_length_exceeded=True
            )
        finally:
            # Read this group's count once and drop its entry: the writer stays bounded.
            after = self.writer.settle(rec.group_id) if self.writer else 0
        # handle_send_to_api swallows send errors; our sender (serve mode) recorded them per group.
        send_error = self._trainer.pop_send_error(rec.group_id) if self._trainer is not None else None
        # With our writer, kept means written; without one, the groups passed the checks atroposlib applies.
        kept = after > before if self.writer is not None else True
        if not kept:
            self._drop_all(rec, groups, reasons)
            return
        for group, reason in zip(groups, reasons):
            if reason is not None:
                self.dropped.write(rec.group_id, reason[0], group, reason[1])  # partly kept: keep the rest on disk too
        if send_error is not None:
            # In the jsonl (and unsent.jsonl), but the trainer did not provably get it.
            self._fail(rec, send_error.message, send_error.kind)
            return
        scores: list[float] = []
        for group in valid:
            if isinstance(group, dict):
                scores.extend(float(s) for s in group.get("scores") or [])
        self.completed += 1
        self._account(rec, rev.ItemCompleted(group_id=rec.group_id, scores=scores, step=self.completed))

    def _drop_all(self, rec: GroupRecord, groups: list[Any], reasons: list[tuple[str, str] | None]) -> None:
        """Account ``rec`` as dropped (the first reason) and keep its groups in dropped.jsonl."""
        reason, detail = next((r for r in reasons if r), None) or ("not_kept", "handle_send_to_api did not write it")
        if rec.accounted:
            return
        for group in groups:  # on disk before the event says so (a reader may look at once)
            self.dropped.write(rec.group_id, reason, group, detail)
        self._account(rec, events.ItemDropped(group_id=rec.group_id, reason=reason, detail=detail))

    async def _wandb_log(self) -> None:
        metrics: dict[str, Any] = {}
        if self.wandb is not None:
            self.wandb.step_metrics(metrics)  # our figures ride in the same wandb step
        try:
            await self.env.wandb_log(metrics)
        except Exception as exc:  # noqa: BLE001 - metrics must never fail a group
            if self.wandb is not None and self.wandb.logging:
                self.wandb.log_failed(exc)
            else:
                _emit(rev.LogRecord(level="WARNING", logger="runtime", message=f"wandb_log raised {first_line(exc)}"))
        self.last_metrics = metrics

    # ------------------------------------------------------------------ operator commands

    def pause(self) -> None:
        self.gate.pause()

    def resume(self) -> None:
        self.gate.resume()

    async def drain(self, deadline_s: float | None = None) -> bool:
        """Wait for in-flight groups; True when none is left."""
        tasks = [r.task for r in self.in_flight.values() if r.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=deadline_s)
        return not self.in_flight

    async def cancel_in_flight(self, reason: str = "cancelled", requeue: bool = True) -> int:
        """Cancel every in-flight group; each is accounted as ItemCancelled (and re-queued)."""
        records = list(self.in_flight.values())
        for rec in records:
            requeued = False
            if requeue and not self.gate.stopping:
                self.env.backlog.append(rec.item)
                requeued = True
            self._account(rec, rev.ItemCancelled(group_id=rec.group_id, reason=reason, requeued=requeued))
            if rec.task is not None:
                rec.task.cancel()
        tasks = [r.task for r in records if r.task is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self.gate.poke()
        return len(records)

    # ------------------------------------------------------------------ phase switch

    async def switch_phase(self, to_phase: int, cancel_in_flight: bool = False) -> None:
        if to_phase not in (1, 2):
            raise ValueError(f"phase must be 1 or 2, got {to_phase!r}")
        if self.gate.held_by(PHASE_SWITCH):
            raise RuntimeError("a phase switch is already in progress")
        from_phase = self.phase
        _emit(
            rev.PhaseSwitch(stage="requested", from_phase=from_phase, to_phase=to_phase, in_flight=len(self.in_flight))
        )
        self.gate.hold(PHASE_SWITCH)
        try:
            _emit(
                rev.PhaseSwitch(
                    stage="draining",
                    from_phase=from_phase,
                    to_phase=to_phase,
                    in_flight=len(self.in_flight),
                    detail="cancelling in-flight groups" if cancel_in_flight else "waiting for in-flight groups",
                )
            )
            if cancel_in_flight:
                await self.cancel_in_flight(reason="phase switch")
            else:
                await self.drain()
            _emit(rev.PhaseSwitch(stage="rebuilding", from_phase=from_phase, to_phase=to_phase))
            try:
                new_manager = build_server_manager(self.env, self.resolved.servers_for(to_phase), to_phase)
            except Exception as exc:
                _emit(
                    rev.PhaseSwitch(
                        stage="failed",
                        from_phase=from_phase,
                        to_phase=to_phase,
                        detail=f"could not build phase {to_phase} servers: {first_line(exc)}",
                    )
                )
                raise
            old = self.env.server
            atropos_bridge.install_server_manager(self.env, new_manager)
            await close_server_manager(old)
            self.phase = to_phase
            _emit(rev.PhaseSwitch(stage="done", from_phase=from_phase, to_phase=to_phase))
        finally:
            self.gate.release(PHASE_SWITCH)

    # ------------------------------------------------------------------ evaluation

    async def evaluate(self, pause_intake: bool = False) -> dict[str, Any]:
        """An on-demand evaluation (evaluation.py); raises EvalBusy while one runs."""
        return await self.evaluations.run(pause_intake, wandb=self.wandb)

    # ------------------------------------------------------------------ stop / outputs

    async def shutdown(self, drain_deadline_s: float) -> None:
        """Graceful stop: close intake, let in-flight groups finish until the deadline,
        cancel the rest (ItemCancelled), stop any evaluation."""
        self.gate.stop()
        if not self.gate.finished:  # a finished run stays "finished"
            self.gate.set_status("stopping", f"draining {len(self.in_flight)} group(s) for up to {drain_deadline_s:g}s")
        if self.in_flight:
            await self._drain_for_stop(drain_deadline_s)
        try:
            if self.in_flight:
                await self.cancel_in_flight(reason="stopped", requeue=False)
            await self.evaluations.cancel()
        finally:
            self._drained.set()  # run() may now close the outputs and the trainer link

    def cut_drain(self) -> None:
        """A forced stop (second signal): the running drain ends now; the rest is cancelled."""
        self._cut.set()

    async def _drain_for_stop(self, deadline_s: float) -> None:
        """Wait for in-flight groups until they are done, the deadline passes or cut_drain()."""
        pending = {r.task for r in self.in_flight.values() if r.task is not None}
        loop = asyncio.get_running_loop()
        end = loop.time() + max(0.0, deadline_s)
        cut: asyncio.Task[Any] = loop.create_task(self._cut.wait(), name="hermes-drain-cut")
        try:
            while pending and not self._cut.is_set():
                remaining = end - loop.time()
                if remaining <= 0:
                    break
                _, pending = await asyncio.wait(pending | {cut}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
                pending.discard(cut)
        finally:
            cut.cancel()
            with contextlib.suppress(BaseException):
                await cut

    async def finish_outputs(self) -> None:
        """Close the jsonl (all kept groups are already flushed) and write the html like atropos. Idempotent."""
        self.dropped.close()
        if self.writer is None or self.writer.closed:
            return
        self.writer.close()
        if self.writer.total == 0:
            return
        try:
            from atroposlib.frontend.jsonl2html import generate_html

            sink = io.StringIO()
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                generate_html(self.writer.path)
        except SystemExit:
            _emit(
                rev.LogRecord(
                    level="WARNING", logger="runtime", message=f"could not write html beside {self.writer.path}"
                )
            )
        except Exception as exc:  # noqa: BLE001 - the html is a convenience
            _emit(
                rev.LogRecord(level="WARNING", logger="runtime", message=f"html generation failed: {first_line(exc)}")
            )


def _summary_of(item: Any) -> str:
    if isinstance(item, dict):
        for key in ("task_id", "id", "prompt", "question"):
            if key in item:
                return str(item[key])
    return str(item)
