"""Events: the observer seam between the Hermes layer and whoever watches it.

Every step of a rollout (group, rollout, turn, tool call, sandbox, drop) emits a
small frozen dataclass. With no observer installed, ``emit`` is a single
attribute check, so environments pay nothing when nobody is watching.

Observers are plain callables ``(Event) -> None``. They are called on the thread
that produced the event (the env loop, or a tool-pool thread), so they must be
cheap and thread-safe: the console's runtime just appends to a queue.

Events serialise to flat JSON dicts (``to_dict``/``from_dict``) keyed by
``kind``, which is what the event log records and replay reads.
"""

from __future__ import annotations

import contextvars
import dataclasses
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

Observer = Callable[["Event"], None]

_EVENT_TYPES: dict[str, type[Event]] = {}


def _now() -> float:
    return time.time()


@dataclass(frozen=True, kw_only=True, slots=True)
class Event:
    """Base of every event. ``ts`` is wall-clock seconds (time.time())."""

    kind: ClassVar[str] = "event"
    ts: float = field(default_factory=_now)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # (no super() call: slots=True rebuilds the class, which breaks zero-arg super)
        kind = cls.__dict__.get("kind")
        if kind:
            _EVENT_TYPES[kind] = cls

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["kind"] = self.kind
        return data


def event_from_dict(data: dict[str, Any]) -> Event:
    """Rebuild an event from ``to_dict`` output. Unknown keys are ignored so
    logs written by a newer version still replay."""
    kind = data.get("kind")
    cls = _EVENT_TYPES.get(kind or "")
    if cls is None:
        raise ValueError(f"unknown event kind {kind!r}; expected one of {sorted(_EVENT_TYPES)}")
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


# --------------------------------------------------------------------------- groups


@dataclass(frozen=True, kw_only=True, slots=True)
class GroupStarted(Event):
    kind: ClassVar[str] = "group_started"
    group_id: str
    item_summary: str
    group_size: int
    phase: int  # 1 = OpenAI-compatible chat, 2 = ManagedServer (/generate)
    toolsets: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True, slots=True)
class GroupFinished(Event):
    kind: ClassVar[str] = "group_finished"
    group_id: str
    scores: list[float] = field(default_factory=list)
    duration_s: float = 0.0
    error: str | None = None  # set when the whole group failed


# --------------------------------------------------------------------------- rollouts


@dataclass(frozen=True, kw_only=True, slots=True)
class RolloutStarted(Event):
    kind: ClassVar[str] = "rollout_started"
    rollout_id: str  # == the rollout's task_id (also its sandbox key)
    group_id: str
    item_summary: str = ""
    phase: int = 1
    system_prompt: str = ""  # the prompt the rollout really started from (redacted, bounded)
    prompt: str = ""  # the user message (redacted, bounded)


@dataclass(frozen=True, kw_only=True, slots=True)
class RolloutFinished(Event):
    kind: ClassVar[str] = "rollout_finished"
    rollout_id: str
    group_id: str
    reward: float
    turns_used: int
    finished_naturally: bool
    tool_error_count: int = 0
    duration_s: float = 0.0
    token_count: int = 0
    phase: int = 1
    node_count: int = 0
    placeholder_tokens: bool = False
    # data health: what the trainer gets from this rollout
    trainable_tokens: int = 0  # positions with mask != -100
    trainable_turns: int = 0  # trained runs (one per assistant turn when healthy)
    assistant_turns: int = 0
    drift_count: int = 0  # prefix breaks / re-render mismatches / turns that could not be trained
    trained_run_tokens: list[int] = field(default_factory=list)  # tokens of each trained run, in order
    trained_run_logprob: list[float] = field(default_factory=list)  # Phase 2: mean logprob of each run
    prompt_tokens: int = 0  # masked positions before the first trained one (system + user prompt)
    data_problems: list[str] = field(default_factory=list)  # "kind: detail" (environments.data_health)
    reward_error: str | None = None  # compute_reward raised (reward forced to 0.0)
    error: str | None = None  # the loop ended on an API error / empty reply
    reward_s: float = 0.0  # time spent in compute_reward
    reward_details: dict[str, Any] = field(default_factory=dict)  # the env's explanation (ctx.reward_details)


# --------------------------------------------------------------------------- turns


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnStarted(Event):
    kind: ClassVar[str] = "turn_started"
    rollout_id: str
    turn: int  # 1-based


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnFinished(Event):
    kind: ClassVar[str] = "turn_finished"
    rollout_id: str
    turn: int
    latency_s: float
    content: str = ""  # redacted, truncated
    reasoning: str | None = None  # redacted, truncated
    tool_calls: int = 0
    parsed_from_text: bool = False  # tool calls came from the client-side parser
    error: str | None = None  # API error / empty reply that ended the loop


# --------------------------------------------------------------------------- tools


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallStarted(Event):
    kind: ClassVar[str] = "tool_call_started"
    rollout_id: str
    turn: int
    call_id: str
    tool_name: str
    args_head: str = ""  # redacted, truncated


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallFinished(Event):
    kind: ClassVar[str] = "tool_call_finished"
    rollout_id: str
    turn: int
    call_id: str
    tool_name: str
    duration_s: float
    result_head: str = ""  # redacted, truncated
    error: str | None = None
    error_kind: str | None = None  # unknown_tool | bad_json | dispatch | timeout | tool_error
    exit_code: int | None = None
    result_text: str = ""  # the result the model saw (redacted, bounded; the transcript expands it)


# --------------------------------------------------------------------------- sandboxes


@dataclass(frozen=True, kw_only=True, slots=True)
class SandboxCreated(Event):
    kind: ClassVar[str] = "sandbox_created"
    task_id: str
    backend: str
    workdir: str = ""
    lifetime_s: float = 0.0


@dataclass(frozen=True, kw_only=True, slots=True)
class SandboxCommandStarted(Event):
    kind: ClassVar[str] = "sandbox_command_started"
    task_id: str
    command: str  # redacted, truncated
    timeout_s: float


@dataclass(frozen=True, kw_only=True, slots=True)
class SandboxCommandFinished(Event):
    kind: ClassVar[str] = "sandbox_command_finished"
    task_id: str
    command: str
    exit_code: int
    duration_s: float
    output_head: str = ""
    timed_out: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class SandboxLifetimeChanged(Event):
    kind: ClassVar[str] = "sandbox_lifetime_changed"
    task_id: str
    lifetime_s: float


@dataclass(frozen=True, kw_only=True, slots=True)
class SandboxShellRestarted(Event):
    kind: ClassVar[str] = "sandbox_shell_restarted"
    task_id: str
    what: str  # "shell" (INIT started a fresh one) | "machine" (a fresh bwrap/INIT)
    reason: str  # e.g. "exit 137"


@dataclass(frozen=True, kw_only=True, slots=True)
class SandboxClosed(Event):
    kind: ClassVar[str] = "sandbox_closed"
    task_id: str
    reason: str  # cleanup | idle_reaped | killed | exit
    error: str | None = None


# --------------------------------------------------------------------------- item accounting


@dataclass(frozen=True, kw_only=True, slots=True)
class ItemDropped(Event):
    """A finished group was not kept (identical scores, too long, wrong size...)."""

    kind: ClassVar[str] = "item_dropped"
    group_id: str
    reason: str  # stable code: empty_group | invalid_group | wrong_group_size | identical_scores | too_long | ...
    detail: str = ""  # the specifics (sizes, score value), kept out of the code so counts group well


@dataclass(frozen=True, kw_only=True, slots=True)
class ItemFailed(Event):
    """A group raised or timed out; its item produced nothing."""

    kind: ClassVar[str] = "item_failed"
    group_id: str
    error: str
    error_kind: str = "exception"  # exception | timeout


# --------------------------------------------------------------------------- attribution

# A host that drives the env sets these before calling collect_trajectories so
# the env's events carry the host's ids; without a host the env makes its own.
current_group_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("hermes_current_group_id", default=None)
current_phase: contextvars.ContextVar[int | None] = contextvars.ContextVar("hermes_current_phase", default=None)


# --------------------------------------------------------------------------- emission

_observers: list[Observer] = []
_observers_lock = threading.Lock()
# Fast-path flag read without the lock: emitting sites check it before
# building an event at all.
active: bool = False


def add_observer(observer: Observer) -> None:
    global active
    with _observers_lock:
        _observers.append(observer)
        active = True


def remove_observer(observer: Observer) -> None:
    global active
    with _observers_lock:
        try:
            _observers.remove(observer)
        except ValueError:
            pass
        active = bool(_observers)


def emit(event: Event) -> None:
    """Deliver ``event`` to every observer. An observer that raises is
    ignored: watching must never break a rollout."""
    for observer in tuple(_observers):
        try:
            observer(event)
        except Exception:  # noqa: BLE001 - observers are best effort by design
            pass
