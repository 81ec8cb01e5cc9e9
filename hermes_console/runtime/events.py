"""Runtime-level events: what the host itself reports (item accounting, status,
phase switches, evaluations, server health). They share the base class and the
serialisation of :mod:`environments.events`, so one event log holds both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, TypedDict

from environments.events import Event


class ConfigRow(TypedDict):
    """One value of the resolved config, as the config view lists it (a plain dict in the log)."""

    section: str  # env | openai | phase2 | run
    key: str  # e.g. env.group_size, openai[0].base_url
    value: str  # shown text; secrets only say whether they are set
    source: str  # flags, config file, mode default, config_init()...


@dataclass(frozen=True, kw_only=True, slots=True)
class RunConfigured(Event):
    """Emitted once when a run starts: the effective settings operators need to see."""

    kind: ClassVar[str] = "run_configured"
    env_name: str
    mode: str  # process | serve | evaluate | replay
    phase: int
    group_size: int
    max_in_flight: int
    worker_timeout_s: float
    terminal_backend: str = "local"
    terminal_timeout_s: float = 0.0
    terminal_lifetime_s: float = 0.0
    total_steps: int = 0
    jsonl_path: str | None = None
    servers: list[str] = field(default_factory=list)
    shard: str = ""  # "i/n (source)" when this host takes a share of the items
    # The resolved config, one {section, key, value, source} per value (secrets hidden).
    config: list[ConfigRow] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True, slots=True)
class RuntimeStatus(Event):
    kind: ClassVar[str] = "runtime_status"
    status: str  # loading | running | paused | draining | stopping | stopped | error | finished
    detail: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class ItemReceived(Event):
    """``get_next_item`` returned an item; a group of rollouts starts for it."""

    kind: ClassVar[str] = "item_received"
    group_id: str
    item_summary: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class ItemCompleted(Event):
    """The group was kept: written to the jsonl (and sent, in serve mode)."""

    kind: ClassVar[str] = "item_completed"
    group_id: str
    scores: list[float] = field(default_factory=list)
    step: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class ItemCancelled(Event):
    kind: ClassVar[str] = "item_cancelled"
    group_id: str
    reason: str = "cancelled"
    requeued: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class PhaseSwitch(Event):
    kind: ClassVar[str] = "phase_switch"
    stage: str  # requested | draining | rebuilding | done | failed
    from_phase: int
    to_phase: int
    in_flight: int = 0
    detail: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class EvalStarted(Event):
    kind: ClassVar[str] = "eval_started"
    eval_id: str
    intake_paused: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class EvalProgress(Event):
    kind: ClassVar[str] = "eval_progress"
    eval_id: str
    done: int
    total: int


@dataclass(frozen=True, kw_only=True, slots=True)
class EvalFinished(Event):
    kind: ClassVar[str] = "eval_finished"
    eval_id: str
    metrics: dict[str, Any] = field(default_factory=dict)
    samples_path: str | None = None
    error: str | None = None
    duration_s: float = 0.0


@dataclass(frozen=True, kw_only=True, slots=True)
class ServerStats(Event):
    """Periodic snapshot of the inference servers: one dict per server with
    url, healthy, in_flight, requests, errors, latency_ms_p50."""

    kind: ClassVar[str] = "server_stats"
    phase: int
    servers: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True, slots=True)
class LoopLag(Event):
    """How late the env loop's heartbeat woke up: blocking reward code shows here."""

    kind: ClassVar[str] = "loop_lag"
    lag_ms: float


@dataclass(frozen=True, kw_only=True, slots=True)
class LogRecord(Event):
    kind: ClassVar[str] = "log_record"
    level: str
    logger: str
    message: str


@dataclass(frozen=True, kw_only=True, slots=True)
class TrainerStatus(Event):
    """Serve mode: what the atropos trainer API reports (``/status-env``)."""

    kind: ClassVar[str] = "trainer_status"
    state: str  # waiting | registered | running | backpressure | finished | unreachable | error
    current_step: int = 0
    total_steps: int = 0
    queue_size: int = 0  # this env's view of the queue, in its own groups (others' surplus included)
    self_queue_size: int = 0  # groups this env has queued
    total_queue_size: int = 0  # every env's groups in the trainer's queue (GET /status)
    batch_size: int = 0
    group_size: int = 0
    max_group_size: int = 0
    env_id: int | None = None
    env_weight: float = 0.0
    unallocated_fraction: float = 0.0
    groups_sent: int = 0
    groups_sent_this_step: int = 0
    groups_per_step: float = 0.0  # groups this host sent per trainer step since it registered
    send_errors: int = 0  # groups not confirmed: failed + unknown
    send_unknown: int = 0  # of those, groups run-api may have stored (not re-posted; in unsent.jsonl)
    send_retries: int = 0  # re-posts of groups that provably never reached the API
    reregistrations: int = 0  # run-api restarts recovered by registering again
    last_send_error: str | None = None
    backpressure: bool = False  # queue holds max_batches_offpolicy batches: no new work
    wait_trainer_s: float = 0.0  # intake held by the trainer (registration, back-pressure, target queued)
    wait_inference_s: float = 0.0  # the trainer wanted more but every slot waited on rollouts
    warning: str | None = None
    detail: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class WandbStatus(Event):
    """Where the run logs to wandb, and whether that works (``env.use_wandb``)."""

    kind: ClassVar[str] = "wandb_status"
    state: str  # off | starting | logging | failed | finished
    mode: str = ""  # offline | online | disabled
    project: str = ""
    name: str = ""
    path: str = ""  # offline run dir, or entity/project/run_id online
    url: str = ""
    log_errors: int = 0
    detail: str = ""
