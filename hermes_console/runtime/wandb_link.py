"""Weights & Biases for a console-hosted run.

atroposlib calls ``wandb.init`` from ``process_manager``/``env_manager``, which the
runtime host replaces, so without this module ``use_wandb=true`` silently logged
nothing. :class:`WandbLink` owns the run's whole wandb life:

- ``start()`` runs ``wandb.init`` with atroposlib's semantics (serve: project and
  group from run-api's ``/wandb_info``, the name the trainer assigned; process and
  evaluate: project from ``WANDB_PROJECT`` or ``hermes-console``, name
  ``{wandb_name}-{date}-{rand}``), offline unless the user chose a mode, never
  touching the terminal (console capture off, silent);
- ``step_metrics()`` adds our figures (throughput, latency split, errors by kind,
  data health, sandboxes) to the dict ``env.wandb_log`` sends, so they land in the
  same step as atroposlib's ``train/...`` metrics and the rollouts table;
- ``log_eval()`` logs evaluation metrics under ``eval/...``;
- ``finish()`` closes the run on every exit path so offline runs are sync-ready.

A failure to start is a clear error at start; a failure while logging is a
visible warning (and counted), never silent and never fatal to training.
"""

from __future__ import annotations

import math
import os
import random
import string
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from environments import events
from environments.events import Event
from hermes_console.runtime import atropos_bridge
from hermes_console.runtime import events as rev
from hermes_console.runtime.errors import ConfigError, first_line

DEFAULT_PROJECT = "hermes-console"
_LATENCY_KEEP = 4096  # per-step samples kept for percentiles (bounded memory)


class WandbStartError(ConfigError):
    """wandb.init failed for a run that asked for wandb (reported like a config error: one clear line)."""


_SECRET_FIELDS = ("api_key", "apikey", "password", "secret", "auth")


def run_config(env: Any, resolved: Any, mode: str, phase: int) -> dict[str, Any]:
    """The resolved config as the wandb run config: env fields, servers (no keys), mode and phase."""
    env_cfg = env.config.model_dump(mode="json")
    for key in list(env_cfg):
        if any(word in key.lower() for word in _SECRET_FIELDS):
            env_cfg[key] = "<redacted>" if env_cfg[key] else env_cfg[key]
    servers = []
    for cfg in resolved.servers_for(phase):
        servers.append(
            {
                "base_url": str(getattr(cfg, "base_url", "")),
                "model_name": getattr(cfg, "model_name", ""),
                "server_type": getattr(cfg, "server_type", ""),
            }
        )
    return {
        "env": env_cfg,
        "servers": servers,
        "mode": mode,
        "phase": phase,
        "env_class": f"{type(env).__module__}.{type(env).__name__}",
    }


def wandb_mode(environ: dict[str, str] | None = None) -> str:
    """The mode wandb will use: the user's ``WANDB_MODE``, else offline unless online was asked for."""
    env = os.environ if environ is None else environ
    mode = (env.get("WANDB_MODE") or "").strip().lower()
    if mode in ("online", "offline", "disabled", "shared"):
        return mode
    if env.get("HERMES_WANDB_ONLINE", "").lower() in ("1", "true", "yes") or env.get("WANDB_API_KEY"):
        return "online"
    return "offline"


def run_name(base: str, now: datetime | None = None, rng: random.Random | None = None) -> str:
    """atroposlib's run name: ``{base}-{YYYY-MM-DD}-{6 lowercase letters}``."""
    pick = (rng or random).choices
    return f"{base}-{(now or datetime.now()).strftime('%Y-%m-%d')}-{''.join(pick(string.ascii_lowercase, k=6))}"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[index]


class StepFigures:
    """Folds runtime events into per-step figures. Thread-safe: tool events arrive from tool threads."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._since = clock()
        self._gen_s: dict[str, float] = {}  # per live rollout: generation seconds
        self._tool_s: dict[str, float] = {}  # per live rollout: tool seconds
        self._reset_step()
        self.sandboxes_live = 0
        self.sandboxes_created = 0

    def _reset_step(self) -> None:
        self.rollouts = 0
        self.groups_kept = 0
        self.durations: list[float] = []
        self.gen: list[float] = []
        self.tool: list[float] = []
        self.other: list[float] = []
        self.errors: dict[str, int] = {}
        self.tokens = 0
        self.trainable_tokens = 0
        self.assistant_turns = 0
        self.trainable_turns = 0
        self.drift = 0
        self.placeholder = 0
        self.multi_node = 0

    def _count_error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1

    def observe(self, event: Event) -> None:
        with self._lock:
            self._observe(event)

    def _observe(self, event: Event) -> None:
        if isinstance(event, events.TurnFinished):
            self._gen_s[event.rollout_id] = self._gen_s.get(event.rollout_id, 0.0) + event.latency_s
        elif isinstance(event, events.ToolCallFinished):
            self._tool_s[event.rollout_id] = self._tool_s.get(event.rollout_id, 0.0) + event.duration_s
            if event.error:
                self._count_error(f"tool_{event.error_kind or 'error'}")
        elif isinstance(event, events.RolloutFinished):
            self._finish_rollout(event)
        elif isinstance(event, rev.ItemCompleted):
            self.groups_kept += 1
        elif isinstance(event, events.ItemDropped):
            self._count_error(f"dropped_{event.reason}")
        elif isinstance(event, events.ItemFailed):
            self._count_error(f"failed_{event.error_kind}")
        elif isinstance(event, events.SandboxCreated):
            self.sandboxes_live += 1
            self.sandboxes_created += 1
        elif isinstance(event, events.SandboxClosed):
            self.sandboxes_live = max(0, self.sandboxes_live - 1)

    def _finish_rollout(self, event: events.RolloutFinished) -> None:
        gen = self._gen_s.pop(event.rollout_id, 0.0)
        tool = self._tool_s.pop(event.rollout_id, 0.0)
        self.rollouts += 1
        if len(self.durations) < _LATENCY_KEEP:
            self.durations.append(event.duration_s)
            self.gen.append(gen)
            self.tool.append(tool)
            self.other.append(max(0.0, event.duration_s - gen - tool))
        if event.error:
            self._count_error("rollout_error")
        if event.reward_error:
            self._count_error("reward_error")
        self.tokens += event.token_count
        # Data-health fields are read defensively: older event logs do not carry them.
        self.trainable_tokens += int(getattr(event, "trainable_tokens", 0) or 0)
        self.assistant_turns += int(getattr(event, "assistant_turns", 0) or 0)
        self.trainable_turns += int(getattr(event, "trainable_turns", 0) or 0)
        self.drift += int(getattr(event, "drift_count", 0) or 0)
        self.placeholder += 1 if event.placeholder_tokens else 0
        self.multi_node += 1 if event.node_count > 1 else 0

    def take(self) -> dict[str, float]:
        """This step's figures (``hermes/...``), then start the next step."""
        with self._lock:
            now = self._clock()
            elapsed = max(1e-9, now - self._since)
            out: dict[str, float] = {
                "hermes/rollouts": float(self.rollouts),
                "hermes/rollouts_per_s": self.rollouts / elapsed,
                "hermes/groups_kept": float(self.groups_kept),
                "hermes/sandboxes_live": float(self.sandboxes_live),
                "hermes/sandboxes_created_total": float(self.sandboxes_created),
                "hermes/data/tokens": float(self.tokens),
                "hermes/data/placeholder_rollouts": float(self.placeholder),
                "hermes/data/multi_node_rollouts": float(self.multi_node),
                "hermes/data/drift": float(self.drift),
            }
            if self.trainable_tokens or self.assistant_turns:
                out["hermes/data/trainable_tokens"] = float(self.trainable_tokens)
                out["hermes/data/trainable_turn_share"] = (
                    self.trainable_turns / self.assistant_turns if self.assistant_turns else 0.0
                )
            for name, values in (
                ("rollout", self.durations),
                ("generation", self.gen),
                ("tools", self.tool),
                ("reward_and_overhead", self.other),
            ):
                if values:
                    out[f"hermes/latency/{name}_mean_s"] = sum(values) / len(values)
                    out[f"hermes/latency/{name}_p95_s"] = _percentile(values, 0.95)
            for kind, count in sorted(self.errors.items()):
                out[f"hermes/errors/{kind}"] = float(count)
            self._since = now
            self._reset_step()
            return out


@dataclass
class WandbInfo:
    """What the console shows about the run's wandb logging."""

    state: str  # off | starting | logging | failed | finished
    mode: str = ""
    project: str = ""
    name: str = ""
    path: str = ""  # offline: the run directory; online: entity/project/run_id
    url: str = ""
    log_errors: int = 0


class WandbLink:
    """One wandb run for one console-hosted env run (see module doc)."""

    def __init__(
        self,
        env: Any,
        *,
        mode: str,
        run_dir: Path,
        config: dict[str, Any],
        emit: Callable[[Event], None] = events.emit,
        clock: Callable[[], float] | None = None,
    ) -> None:
        import time

        self.env = env
        self.run_mode = mode
        self.run_dir = Path(run_dir)
        self.config = config
        self._emit = emit
        self.enabled = bool(getattr(env.config, "use_wandb", False))
        self.figures = StepFigures(clock or time.monotonic)
        self.run: Any = None
        self.info = WandbInfo(state="off" if not self.enabled else "starting")
        self._observing = False
        self._warned = False
        self._step = 0  # process/evaluate: one step per kept group, like atroposlib's process loop

    # ------------------------------------------------------------------ start

    def start(self, project: str | None = None, group: str | None = None, name: str | None = None) -> None:
        """``wandb.init`` for this run (blocking: call from a worker thread). Raises WandbStartError."""
        if not self.enabled or self.run is not None:
            return
        import wandb

        mode = wandb_mode()
        base = getattr(self.env.config, "wandb_name", None) or getattr(type(self.env), "name", None) or "hermes"
        project = project or os.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT
        name = name or run_name(str(base))
        wandb_dir = Path(os.environ.get("WANDB_DIR") or self.run_dir)
        try:
            wandb_dir.mkdir(parents=True, exist_ok=True)
            settings = wandb.Settings(console="off", silent=True, mode=mode)
            self.run = wandb.init(
                project=project, group=group, name=name, dir=str(wandb_dir), config=self.config, settings=settings
            )
        except Exception as exc:  # reported as a start error naming the fix
            self.info = WandbInfo(state="failed", mode=mode, project=project, name=name)
            self._status(f"wandb.init failed: {first_line(exc)}")
            raise WandbStartError(
                f"env.use_wandb is true but wandb.init failed ({mode} mode): {first_line(exc)}; "
                "expected a working wandb: set WANDB_MODE=offline (no key needed), provide WANDB_API_KEY for "
                "online, or pass --env.use_wandb false"
            ) from exc
        self.info = WandbInfo(
            state="logging",
            mode=mode,
            project=project,
            name=name,
            path=self._run_path(mode),
            url=getattr(self.run, "url", None) or "",
        )
        self._status("")
        if not self._observing:
            events.add_observer(self.figures.observe)
            self._observing = True

    def _run_path(self, mode: str) -> str:
        run = self.run
        if mode == "online":
            return str(getattr(run, "path", "") or "")
        directory = getattr(getattr(run, "settings", None), "sync_dir", None)
        return str(directory or getattr(run, "dir", "") or "")

    def _status(self, detail: str) -> None:
        info = self.info
        self._emit(
            rev.WandbStatus(
                state=info.state,
                mode=info.mode,
                project=info.project,
                name=info.name,
                path=info.path,
                url=info.url,
                log_errors=info.log_errors,
                detail=detail,
            )
        )

    # ------------------------------------------------------------------ each step

    @property
    def logging(self) -> bool:
        return self.run is not None and self.info.state == "logging"

    def step_metrics(self, metrics: dict[str, Any]) -> None:
        """Before ``env.wandb_log(metrics)``: our figures into the same step; the step number for
        process/evaluate runs (serve mode takes the trainer's step)."""
        if not self.logging:
            return
        metrics.update(self.figures.take())
        if self.run_mode != "serve":
            atropos_bridge.set_step(self.env, self._step)
            self._step += 1

    def log_failed(self, exc: BaseException) -> None:
        """``env.wandb_log`` raised: visible at once, counted, training goes on."""
        self.info.log_errors += 1
        message = f"wandb logging failed ({self.info.log_errors}x): {first_line(exc)}"
        self._emit(rev.LogRecord(level="WARNING", logger="wandb", message=message))
        self._status(message)

    def log_eval(self, eval_id: str, metrics: dict[str, Any], duration_s: float, error: str | None) -> None:
        """Evaluation results under ``eval/...`` at the current step."""
        if not self.logging:
            return
        row: dict[str, Any] = {f"eval/{k}": v for k, v in metrics.items() if _loggable(v)}
        row["eval/duration_s"] = duration_s
        row["eval/failed"] = 1.0 if error else 0.0
        try:
            self.run.log(row, step=max(int(getattr(self.env, "curr_step", 0) or 0), self._last_step()))
        except Exception as exc:  # noqa: BLE001 - see log_failed
            self.log_failed(exc)

    def _last_step(self) -> int:
        return max(0, self._step - 1) if self.run_mode != "serve" else 0

    # ------------------------------------------------------------------ finish

    def finish(self, exit_code: int = 0) -> None:
        """Close the run (blocking). Idempotent; never raises."""
        if self._observing:
            events.remove_observer(self.figures.observe)
            self._observing = False
        run, self.run = self.run, None
        if run is None:
            return
        import wandb

        try:
            run.finish(exit_code=exit_code)
            wandb.teardown()  # stop wandb-core and its threads: a stopped console leaves no process behind
        except Exception as exc:  # noqa: BLE001 - the run is over either way
            self._emit(
                rev.LogRecord(level="WARNING", logger="wandb", message=f"wandb.finish failed: {first_line(exc)}")
            )
        self.info.state = "finished"
        self._status("")


def _loggable(value: Any) -> bool:
    if isinstance(value, bool):
        return True
    if isinstance(value, (int, float)):
        return math.isfinite(float(value))
    return isinstance(value, str)
