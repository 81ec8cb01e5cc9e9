"""Serve mode: the link to the atropos trainer API (``run-api``).

Registers the env (TrainerStatus("waiting") until a trainer has started), reads
``/info``, then polls ``/status-env`` and paces the driver's intake gate the way atroposlib's
``env_manager`` does:

* back-pressure: no new work while ``queue_size*group_size >= max_batches_offpolicy*batch_size``
  (groups in flight count as queued, so the cap holds between polls too);
* total_steps: no new work once the queue (plus in-flight) covers the remaining
  steps; the run finishes when that is queued and nothing is in flight, or the
  trainer has taken ``total_steps`` batches.

Groups are posted by our checked sender, installed as ``env._send_scored_data_to_api``:
atroposlib's ``handle_send_to_api`` swallows send errors, so the sender records the
failure per group and the driver accounts that group as ItemFailed.

Delivery, in one sentence: a group is delivered once, or recorded as not delivered
("send") or delivery unknown ("send_unknown") with its cause and kept in the run's
``unsent.jsonl`` spool — never silently twice, never silently lost. run-api has no
idempotency key and its queue counters move while trainers pull batches, so nothing
on its side can prove whether an ambiguous post (timeout, reset, 5xx) was stored.
The only safe re-post is one that provably never reached it (connection refused);
those are retried while the API is down (intake paused meanwhile). The jsonl keeps
every group either way.
Not yet: periodic evals (steps_per_eval), checkpoints, min_batch_allocation top-ups.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from environments import events
from hermes_console.runtime import atropos_bridge
from hermes_console.runtime import events as rev
from hermes_console.runtime.errors import ConfigError, first_line
from hermes_console.runtime.intake import TRAINER, IntakeGate
from hermes_console.runtime.trainer_api import (
    NOT_SENT,
    REJECTED,
    UNKNOWN,
    EnvStatus,
    RegisterEnvRequest,
    TrainerAPIError,
    TrainerClient,
)

POLL_S = 0.25
REGISTER_RETRY_S = 1.0
SEND_RETRY_WINDOW_S = 120.0  # a provably-unsent group is re-posted this long while the API is down
SEND_BACKOFF_MAX_S = 5.0
REJECT_LIMIT = 3  # this many 4xx in a row: the API will not take our groups; stop instead of burning rollouts
DISCONNECT_BUDGET_S = 4.0  # leaving run-api, retries included: inside the 5 s the host gives a stopped driver
DISCONNECT_RETRY_S = 0.5
STATUS_ENV_LOST_AFTER = 3  # /status-env failing this often while /status answers: run-api restarted
GROUP_SIZE_ONE_WARNING = (
    "group_size is 1: run-api only counts other envs' queued groups when some group is larger than 1, "
    "so queue_size (and back-pressure) under-counts the trainer's queue"
)


# --------------------------------------------------------------------------- pacing (pure)


@dataclass(frozen=True)
class Pacing:
    """The config values the pacing rules read."""

    group_size: int
    batch_size: int
    max_batches_offpolicy: int
    total_steps: int
    min_batch_allocation: float | None = None

    @classmethod
    def of(cls, cfg: Any) -> Pacing:
        return cls(
            group_size=int(cfg.group_size),
            batch_size=int(cfg.batch_size),
            max_batches_offpolicy=int(cfg.max_batches_offpolicy),
            total_steps=int(cfg.total_steps),
            min_batch_allocation=getattr(cfg, "min_batch_allocation", None),
        )

    def backpressure(self, st: EnvStatus) -> bool:
        """atroposlib's env_manager condition for "too many queued: stop adding work"."""
        if self.batch_size <= 0:
            return True  # no batch size known: atropos holds too (derived_batch_size == -1)
        if self.max_batches_offpolicy <= 0:
            return False
        if st.queue_size * self.group_size < self.max_batches_offpolicy * self.batch_size:
            return False
        if self.min_batch_allocation is None:
            return True
        # An env with a minimum allocation keeps working until its own share is queued.
        max_group = max(1, st.max_group_size)
        own_share = math.ceil(self.min_batch_allocation * self.batch_size * self.max_batches_offpolicy / max_group)
        return own_share * (max_group // self.group_size) - st.self_queue_size <= 0

    def _sequences_needed(self, st: EnvStatus) -> int:
        return max(0, (self.total_steps - st.current_step) * self.batch_size)

    def admits(self, st: EnvStatus, in_flight: int) -> bool:
        """May one more group start? In-flight groups count as queued."""
        if self.backpressure(st):
            return False
        pending = (st.queue_size + in_flight) * self.group_size
        if self.max_batches_offpolicy > 0 and pending >= self.max_batches_offpolicy * self.batch_size:
            return False
        if self.total_steps > 0 and pending >= self._sequences_needed(st):
            return False  # what is queued and running already covers the remaining steps
        return True

    def target_reached(self, st: EnvStatus) -> bool:
        """The trainer has what total_steps needs (taken, or queued)."""
        if self.total_steps <= 0 or self.batch_size <= 0:
            return False
        if st.current_step >= self.total_steps:
            return True
        return st.queue_size * self.group_size >= self._sequences_needed(st)


# --------------------------------------------------------------------------- the link


@dataclass(frozen=True)
class SendFailure:
    """Why a group did not provably reach the trainer. ``kind`` is the ItemFailed error kind."""

    kind: str  # "send" (not delivered) | "send_unknown" (may have been stored)
    message: str


@dataclass
class _Counters:
    groups_sent: int = 0  # confirmed: run-api answered "received"
    sent_this_step: int = 0
    steps_seen: int = 0
    send_errors: int = 0  # failed + unknown
    send_unknown: int = 0
    send_retries: int = 0  # re-posts of provably unsent groups
    consecutive_rejects: int = 0
    reregistrations: int = 0
    last_send_error: str | None = None
    wait_trainer_s: float = 0.0
    wait_inference_s: float = 0.0
    errors_by_group: dict[str, SendFailure] = field(default_factory=dict)


class TrainerLink:
    def __init__(
        self, env: Any, gate: IntakeGate, run_dir: Path, *, wandb: Any | None = None, poll_s: float = POLL_S
    ) -> None:
        """``gate`` is the driver's intake gate: the link holds it until registered and paces it
        (``admits``); it never reads or writes the driver itself."""
        self.env = env
        self.gate = gate
        self.wandb = wandb  # WandbLink: started with the trainer's run name once registered
        self.poll_s = poll_s
        self.finished = False
        self.error: BaseException | None = None
        self.registered = False
        self.status: EnvStatus | None = None
        self.client = TrainerClient(str(self.env.config.rollout_server_url))
        self.c = _Counters()
        self._start_step: int | None = None
        self._total_queue = 0
        self._sent_at_status = 0
        self._last_emit: dict[str, Any] | None = None
        self._state = "waiting"
        self._detail = ""
        self._tick_at = time.monotonic()
        self._original_send = getattr(self.env, "_send_scored_data_to_api", None)
        self._outage: str | None = None  # the API is unreachable: no new work until it answers
        self._outages = 0  # outages begun so far: a request notes it, to tell a stale answer from a fresh one
        self._up = asyncio.Event()  # set while the API answers (re-posts wait on it)
        self._up.set()
        self._polling = False
        self._leaving = False  # run() is past its poll loop: leaving run-api, not to be cancelled
        self._task: asyncio.Task[None] | None = None
        self._status_env_failures = 0
        self.spool_path = run_dir / "unsent.jsonl"
        # No item before the trainer has registered us; then it paces every admission.
        gate.hold(TRAINER)
        gate.pace_with(self.admits)

    # ------------------------------------------------------------------ driver and gate hooks

    def admits(self, in_flight: int) -> bool:
        if not self.registered or self.finished or self.status is None or self._outage is not None:
            return False
        # Groups sent after the last status request began may not be in its queue_size yet.
        unseen = self.c.groups_sent - self._sent_at_status
        return Pacing.of(self.env.config).admits(self.status, in_flight + unseen)

    def pop_send_error(self, group_id: str) -> SendFailure | None:
        return self.c.errors_by_group.pop(group_id, None)

    async def send(self, scored: dict[str, Any] | list[dict[str, Any]]) -> None:
        """Replacement for ``env._send_scored_data_to_api``: delivered once or recorded (module doc)."""
        groups = scored if isinstance(scored, list) else [scored]
        group_id = events.current_group_id.get() or ""
        deadline = time.monotonic() + SEND_RETRY_WINDOW_S
        delay = 0.25
        while True:
            for group in groups:  # (again on a re-post: a restarted run-api gave us a new id)
                group["env_id"] = getattr(self.env, "env_id", None)
            ticket = self._outages
            try:
                await self.client.send(scored)
            except TrainerAPIError as exc:
                left = deadline - time.monotonic()
                if exc.outcome == NOT_SENT and left > 0 and self.error is None:
                    self._api_down(str(exc))
                    self.c.send_retries += 1
                    if self._polling:
                        # Re-post only once the poll loop has seen the API back (and registered
                        # again if it restarted): never post an old env id to a fresh run-api.
                        await self._wait_up(left)
                    else:
                        await asyncio.sleep(min(delay, left))
                        delay = min(delay * 2, SEND_BACKOFF_MAX_S)
                    continue
                self._record_failure(group_id, groups, exc)
                raise  # handle_send_to_api logs it; the driver reads errors_by_group
            break
        self._api_answered(ticket)
        self.c.consecutive_rejects = 0
        self.c.groups_sent += len(groups)
        self.c.sent_this_step += len(groups)
        self._emit()  # live counts, and right after "finished" while the last groups land

    def _record_failure(self, group_id: str, groups: list[dict[str, Any]], exc: TrainerAPIError) -> None:
        unknown = exc.outcome == UNKNOWN
        if unknown:
            message = f"delivery unknown (not re-posted: a second post could store it twice): {exc}"
        elif exc.outcome == NOT_SENT:
            message = f"not delivered: trainer API unreachable for {SEND_RETRY_WINDOW_S:g}s: {exc}"
        else:
            message = f"not delivered: {exc}"
        self.c.send_errors += 1
        self.c.send_unknown += 1 if unknown else 0
        self.c.last_send_error = message
        if group_id:
            self.c.errors_by_group[group_id] = SendFailure("send_unknown" if unknown else "send", message)
        self._spool(group_id, groups, exc.outcome, message)
        if exc.outcome == REJECTED:
            self.c.consecutive_rejects += 1
            if self.c.consecutive_rejects >= REJECT_LIMIT and self.error is None:
                self.error = TrainerAPIError(
                    f"the trainer API rejected {self.c.consecutive_rejects} groups in a row (last: {exc}); "
                    "stopping intake instead of generating groups it will not take",
                    retryable=False,
                )
                self.finished = True
                self._set("error", str(self.error))
                self.gate.poke()
                return
        self._emit(force=True)

    def _spool(self, group_id: str, groups: list[dict[str, Any]], outcome: str, message: str) -> None:
        """Keep what the trainer may not have: one line per group, for inspection or a manual re-send."""
        import json

        try:
            lines = "".join(
                json.dumps(
                    {"group_id": group_id, "outcome": outcome, "error": message, "group": group},
                    allow_nan=False,
                    default=str,
                )
                + "\n"
                for group in groups
            ).encode("utf-8")
            self.spool_path.parent.mkdir(parents=True, exist_ok=True)
            # One write of whole lines: a buffered file wrote a line longer than its buffer in
            # pieces, and whoever read the spool meanwhile saw half a line.
            fd = os.open(self.spool_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                view = memoryview(lines)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
        except (OSError, ValueError) as exc:  # the jsonl still has the group; say that the spool failed
            events.emit(
                rev.LogRecord(
                    level="ERROR",
                    logger="trainer",
                    message=f"could not spool unsent group {group_id} to {self.spool_path}: {exc}",
                )
            )

    def _api_down(self, reason: str) -> None:
        self._up.clear()
        if self._outage is None:
            self._outages += 1
            self._outage = reason
            self._set("unreachable", f"{reason}; intake paused until it answers")

    def _api_answered(self, ticket: int) -> None:
        """A request begun when ``self._outages`` was ``ticket`` succeeded. It shows the API is back
        only if it began after the current outage was seen: a post connected before the outage can
        answer well into it, and must not reopen intake."""
        if ticket == self._outages:
            self._api_up()

    def _api_up(self) -> None:
        self._up.set()
        if self._outage is not None:
            self._outage = None
            self._set("running", "trainer API answers again")
            self.gate.poke()

    async def _wait_up(self, timeout_s: float) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._up.wait(), timeout=max(0.0, timeout_s))

    # ------------------------------------------------------------------ status

    def _fields(self) -> dict[str, Any]:
        cfg = self.env.config
        st = self.status or EnvStatus()
        steps = st.current_step - (self._start_step if self._start_step is not None else st.current_step)
        return dict(
            state=self._state,
            current_step=st.current_step,
            total_steps=int(cfg.total_steps),
            queue_size=st.queue_size,
            self_queue_size=st.self_queue_size,
            total_queue_size=self._total_queue,
            batch_size=max(0, int(cfg.batch_size)),
            group_size=int(cfg.group_size),
            max_group_size=st.max_group_size,
            env_id=getattr(self.env, "env_id", None),
            env_weight=round(st.env_weight, 4),
            unallocated_fraction=round(st.unallocated_fraction, 4),
            groups_sent=self.c.groups_sent,
            groups_sent_this_step=self.c.sent_this_step,
            groups_per_step=round(self.c.groups_sent / steps, 2) if steps > 0 else 0.0,
            send_errors=self.c.send_errors,
            send_unknown=self.c.send_unknown,
            send_retries=self.c.send_retries,
            reregistrations=self.c.reregistrations,
            last_send_error=self.c.last_send_error,
            backpressure=bool(self.status is not None and Pacing.of(cfg).backpressure(st)),
            wait_trainer_s=round(self.c.wait_trainer_s, 1),
            wait_inference_s=round(self.c.wait_inference_s, 1),
            warning=GROUP_SIZE_ONE_WARNING if int(cfg.group_size) == 1 else None,
            detail=self._detail,
        )

    def _emit(self, force: bool = False) -> None:
        data = self._fields()
        if force or data != self._last_emit:
            self._last_emit = data
            events.emit(rev.TrainerStatus(**data))

    def _set(self, state: str, detail: str = "") -> None:
        self._state, self._detail = state, detail
        self._emit()

    def _tick(self) -> None:
        """Attribute the time since the last tick to whatever held intake back."""
        now = time.monotonic()
        dt, self._tick_at = now - self._tick_at, now
        if self.gate.held_elsewhere() or self.finished:
            return  # the operator (or shutdown, a phase switch) holds intake, not the trainer
        n = self.gate.in_flight()
        if not self.admits(n):
            self.c.wait_trainer_s += dt
        elif n >= self.gate.max_in_flight:
            self.c.wait_inference_s += dt

    # ------------------------------------------------------------------ run

    def start(self) -> asyncio.Task[None]:
        """Run the link on the running loop; ``stop()`` ends it."""
        self._task = asyncio.get_running_loop().create_task(self.run(), name="hermes-trainer")
        return self._task

    async def stop(self) -> None:
        """Stop polling and wait until the link has left run-api (a bounded wait). A link
        already leaving on its own (its target reached, an error) is not cancelled: that
        would cut its ``/disconnect-env`` short, and run-api would go on counting this env."""
        task = self._task
        if task is None:
            return
        if not self._leaving:
            task.cancel()
        await asyncio.wait({task})  # the caller's own cancellation still reaches the caller

    async def run(self) -> None:
        if self._original_send is not None:
            atropos_bridge.route_sends(self.env, self.send)
        try:
            await self._register()
            await self._server_info()
            self.gate.release(TRAINER)
            await self._poll_loop()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported and raised by the driver; never a silent hang
            self.error = exc
            self.finished = True
            self._set("error", first_line(exc))
            self.gate.poke()
        finally:
            self._leaving = True
            await self._disconnect()
            await self.client.close()

    async def _disconnect(self) -> None:
        """Leaving (finished, stopped, signalled): tell run-api, so the other envs' weights are right."""
        env_id = getattr(self.env, "env_id", None)
        if not self.registered or env_id is None:
            return
        deadline = time.monotonic() + DISCONNECT_BUDGET_S
        error = "no attempt"
        try:
            while (left := deadline - time.monotonic()) > 0:
                try:
                    await asyncio.wait_for(self.client.disconnect_env(int(env_id)), timeout=left)
                except TrainerAPIError as exc:
                    error = str(exc)
                    if not exc.retryable:
                        break
                except TimeoutError:
                    error = f"no answer in {DISCONNECT_BUDGET_S:g} s"
                    break
                else:
                    self.registered = False
                    return
                await asyncio.sleep(min(DISCONNECT_RETRY_S, max(0.0, deadline - time.monotonic())))
        except asyncio.CancelledError:  # a hard stop: say so instead of leaving silently
            error = "cancelled while leaving"
        # Best effort on the way out, but never silent: until run-api drops this env, it keeps
        # its share of the weight and the other envs' weights stay low.
        events.emit(
            rev.LogRecord(
                level="WARNING",
                logger="trainer",
                message=(
                    f"could not tell {self.client.base_url} that env {env_id} left ({error}); "
                    "run-api may still count it, and then the other envs keep a smaller weight"
                ),
            )
        )

    async def _register(self) -> None:
        env, cfg = self.env, self.env.config
        req = RegisterEnvRequest(
            max_token_length=int(cfg.max_token_length),
            desired_name=cfg.wandb_name or getattr(type(env), "name", None) or type(env).__name__,
            weight=float(cfg.inference_weight),
            group_size=int(cfg.group_size),
            min_batch_allocation=cfg.min_batch_allocation,
        )
        while True:
            self._tick()
            try:
                reply = await self.client.register_env(req)
            except TrainerAPIError as exc:
                if not exc.retryable:
                    raise
                self._set("unreachable", str(exc))
                await asyncio.sleep(REGISTER_RETRY_S)
                continue
            if reply.status != "success" or reply.env_id is None:
                self._set("waiting", f"{self.client.base_url}: {reply.status} (no trainer has called /batch yet)")
                await asyncio.sleep(REGISTER_RETRY_S)
                continue
            break
        atropos_bridge.apply_registration(
            env,
            env_id=reply.env_id,
            wandb_name=reply.wandb_name,
            starting_step=reply.starting_step,
            checkpoint_dir=reply.checkpoint_dir,
            checkpoint_interval=reply.checkpoint_interval,
        )
        if cfg.total_steps == -1:
            atropos_bridge.set_config_value(env, "total_steps", reply.num_steps)
            if cfg.total_steps == -1:
                raise ConfigError(
                    "env.total_steps is -1 and the trainer registered num_steps=-1; expected a step count "
                    "from one of them (--env.total_steps N)"
                )
        if env.curr_step > 0:
            env.load_checkpoint()  # resuming a trainer run, as atroposlib does
        self._start_step = reply.starting_step
        await self._start_wandb(reply.wandb_name)
        self.registered = True
        self._set("registered", f"env_id {reply.env_id} as {reply.wandb_name!r}")

    async def _start_wandb(self, trainer_name: str | None) -> None:
        """atroposlib's serve semantics: project/group from ``/wandb_info``, the name the trainer assigned."""
        link = self.wandb
        if link is None or not link.enabled or link.run is not None:
            return
        info = await self.client.wandb_info()
        await asyncio.to_thread(link.start, info.get("project"), info.get("group"), trainer_name)

    async def _run_api_restarted(self, exc: TrainerAPIError) -> bool:
        """``/status-env`` answers 5xx for an env id run-api does not know (it lost its state),
        while ``/status`` still answers: a restarted run-api. One failure can be a blip."""
        if exc.outcome != UNKNOWN or " HTTP 5" not in str(exc):
            self._status_env_failures = 0
            return False
        self._status_env_failures += 1
        if self._status_env_failures < STATUS_ENV_LOST_AFTER:
            return False
        try:
            await self.client.status()
        except TrainerAPIError:
            return False
        return True

    async def _reregister(self) -> None:
        """run-api restarted: register again (new env id), as a fresh host would, and go on."""
        self.c.reregistrations += 1
        self.registered = False
        self.status = None
        self._status_env_failures = 0
        self._set(
            "waiting",
            f"run-api restarted (it no longer knows env {getattr(self.env, 'env_id', '?')}); registering again",
        )
        await self._register()
        await self._server_info()
        self._api_up()

    async def _server_info(self) -> None:
        env, cfg = self.env, self.env.config
        info = await self._retrying(self.client.info)
        if info.batch_size != -1:
            atropos_bridge.set_config_value(env, "batch_size", info.batch_size)
        if info.max_token_len != -1:
            atropos_bridge.set_max_token_len(env, info.max_token_len)
        if cfg.batch_size is None or cfg.batch_size <= 0:
            raise ConfigError(
                f"batch_size is {cfg.batch_size}: neither the trainer (/info) nor --env.batch_size set it; "
                "expected the trainer to register a batch size"
            )
        if cfg.group_size > cfg.batch_size:
            raise ConfigError(
                f"env.group_size ({cfg.group_size}) is larger than the trainer's batch_size "
                f"({cfg.batch_size}); expected group_size <= batch_size"
            )

    async def _retrying(self, call: Any) -> Any:
        while True:
            try:
                return await call()
            except TrainerAPIError as exc:
                if not exc.retryable:
                    raise
                self._set("unreachable", str(exc))
                await asyncio.sleep(REGISTER_RETRY_S)

    async def _poll_loop(self) -> None:
        self._polling = True
        try:
            await self._poll()
        finally:
            self._polling = False
            self._up.set()  # nobody will clear an outage now: pending re-posts try on their own

    async def _poll(self) -> None:
        env = self.env
        while self.error is None:
            self._tick()
            sent_before = self.c.groups_sent
            ticket = self._outages
            try:
                st = await self.client.status_env(int(env.env_id))
                self._total_queue = (await self.client.status()).queue_size
            except TrainerAPIError as exc:
                if not exc.retryable:
                    raise
                if await self._run_api_restarted(exc):
                    await self._reregister()
                    continue
                self._api_down(str(exc))
                await asyncio.sleep(REGISTER_RETRY_S)
                continue
            self._status_env_failures = 0
            self._api_answered(ticket)
            if self.status is not None and st.current_step != self.status.current_step:
                self.c.sent_this_step = 0
            self.status = st
            self._sent_at_status = sent_before
            atropos_bridge.apply_trainer_status(env, st.model_dump(), st.current_step)
            try:
                await env.server.update_weight(st.env_weight)
            except Exception:  # noqa: BLE001 - a manager mid-swap; next poll sets it
                pass
            pacing = Pacing.of(env.config)
            if pacing.target_reached(st):
                self.finished = True
                self._set(
                    "finished",
                    f"trainer at step {st.current_step}/{pacing.total_steps}; {st.queue_size} group(s) still queued",
                )
                self.gate.poke()
                return
            self._set("backpressure" if pacing.backpressure(st) else "running")
            self.gate.poke()
            await asyncio.sleep(self.poll_s)
