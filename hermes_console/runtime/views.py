"""The views the console shows: one small dataclass per thing on screen.

``ConsoleState`` (state.py) holds them and is the only code that changes them
(its reducer); widgets and screens read them. They hold plain data only, so a
state folded from a replayed log draws the same screen as the live one.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from environments import events as ev
from hermes_console.runtime import events as rev

MAX_TURNS_PER_ROLLOUT = 200  # a rollout's turns kept in memory (the transcript's window)


@dataclass
class TurnView:
    turn: int
    started_at: float
    latency_s: float | None = None
    content: str = ""
    reasoning: str | None = None
    tool_calls: int = 0
    parsed_from_text: bool = False
    error: str | None = None


@dataclass
class ToolCallView:
    seq: int
    ts: float
    rollout_id: str
    group_id: str
    turn: int
    call_id: str
    tool_name: str
    args_head: str = ""
    status: str = "running"  # running | ok | error | cancelled
    duration_s: float | None = None
    result_head: str = ""
    error: str | None = None
    error_kind: str | None = None
    exit_code: int | None = None
    result_text: str = ""  # longer than result_head; kept for the latest rollouts only (history.py)


@dataclass
class RolloutView:
    rollout_id: str
    group_id: str
    phase: int
    started_at: float
    item_summary: str = ""
    status: str = "running"  # running | done | error | cancelled (its group was cancelled or failed)
    turn: int = 0
    turns: deque[TurnView] = field(default_factory=lambda: deque(maxlen=MAX_TURNS_PER_ROLLOUT))
    tool_calls: list[ToolCallView] = field(default_factory=list)
    tool_errors: int = 0
    current_tool: str | None = None
    finished_at: float | None = None
    reward: float | None = None
    turns_used: int = 0
    finished_naturally: bool = False
    duration_s: float | None = None
    token_count: int = 0
    node_count: int = 0
    placeholder_tokens: bool = False
    trainable_tokens: int = 0
    trainable_turns: int = 0
    assistant_turns: int = 0
    drift_count: int = 0
    # Set once, when the rollout finishes: tuples (the empty one is shared, and the garbage
    # collector stops tracking a tuple of numbers or strings), not a list per rollout.
    trained_run_tokens: tuple[int, ...] = ()
    trained_run_logprob: tuple[float, ...] = ()
    prompt_tokens: int = 0
    data_problems: tuple[str, ...] = ()
    error: str | None = None
    reward_error: str | None = None
    system_prompt: str = ""
    prompt: str = ""


@dataclass
class DataHealth:
    """What the trainer gets, summed over finished rollouts (README "The data contract")."""

    rollouts: int = 0
    tokens: int = 0
    trainable_tokens: int = 0
    assistant_turns: int = 0
    trainable_turns: int = 0
    drift: int = 0  # prefix breaks / re-render mismatches, summed
    multi_node: int = 0  # Phase 2 rollouts that needed more than one ManagedServer node
    placeholder: int = 0  # rollouts with placeholder (untrainable) tokens
    missing_turns: int = 0  # rollouts with an assistant turn that trains nothing

    def add(self, e: ev.RolloutFinished) -> None:
        self.rollouts += 1
        self.tokens += e.token_count
        self.trainable_tokens += e.trainable_tokens
        self.assistant_turns += e.assistant_turns
        self.trainable_turns += min(e.trainable_turns, e.assistant_turns)
        self.drift += e.drift_count
        self.multi_node += 1 if e.node_count > 1 else 0
        self.placeholder += 1 if e.placeholder_tokens else 0
        self.missing_turns += 1 if e.trainable_turns < e.assistant_turns else 0

    @property
    def trained_share(self) -> float:
        """Share of sequence positions that are trained on."""
        return self.trainable_tokens / self.tokens if self.tokens else 0.0

    def problems(self) -> list[str]:
        """Short reasons the data is unhealthy; empty when it is fine."""
        out = []
        if self.placeholder:
            out.append(f"{self.placeholder} rollout(s) with placeholder tokens")
        if self.missing_turns:
            out.append(f"{self.missing_turns} rollout(s) with untrained assistant turns")
        if self.drift:
            out.append(f"{self.drift} drift(s) (re-rendered text differs from the sampled text)")
        if self.multi_node:
            out.append(f"{self.multi_node} Phase 2 rollout(s) split over several nodes")
        return out

    @property
    def healthy(self) -> bool:
        return not self.problems()


@dataclass
class GroupView:
    group_id: str
    item_summary: str
    started_at: float
    group_size: int = 0
    phase: int = 1
    toolsets: list[str] = field(default_factory=list)
    status: str = "running"  # running | completed | dropped | failed | cancelled | evaluated
    stage: str = "queued"  # queued | rolling out | scoring | sending | done
    rollout_ids: list[str] = field(default_factory=list)
    rollouts_done: int = 0
    scores: list[float] = field(default_factory=list)
    finished_at: float | None = None
    reason: str | None = None


@dataclass
class SandboxView:
    task_id: str
    backend: str
    workdir: str
    created_at: float
    lifetime_s: float
    last_activity: float
    state: str = "idle"  # idle | running | closed
    running_command: str | None = None
    running_since: float | None = None
    running_timeout_s: float | None = None
    commands: int = 0
    timeouts: int = 0
    last_exit_code: int | None = None
    closed_reason: str | None = None
    closed_at: float | None = None
    last_commands: list[dict[str, Any]] = field(default_factory=list)  # newest last, bounded


@dataclass
class StreamEntry:
    """One line of the agent-turns stream."""

    seq: int
    ts: float
    rollout_id: str
    group_id: str
    kind: str  # turn | reasoning | tool | result | reward | error
    text: str


@dataclass
class Accounting:
    """Items received and how each one ended; ``in_flight`` is what has not ended yet."""

    received: int = 0
    completed: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    failed: int = 0
    cancelled: int = 0

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())

    @property
    def in_flight(self) -> int:
        # A remainder, so the sum above holds by definition: tests check it against an
        # item-by-item count of the events (tests/runtime/runtime_helpers.identity).
        return self.received - self.completed - self.dropped_total - self.failed - self.cancelled


@dataclass
class StepRewards:
    step: int
    n: int
    mean: float
    p50: float
    p90: float
    identical: bool


@dataclass
class EvalView:
    eval_id: str
    started_at: float
    status: str = "running"  # running | done | error
    done: int = 0
    total: int = 0
    metrics: dict[str, Any] = field(default_factory=dict)
    samples_path: str | None = None
    error: str | None = None
    duration_s: float = 0.0
    step: int = 0  # the run's step when it started: eval scores over training
    rollouts: dict[str, str] = field(default_factory=dict)  # task (item summary) -> its rollout id


@dataclass
class PhaseSwitchView:
    stage: str
    from_phase: int
    to_phase: int
    in_flight: int
    detail: str
    ts: float


@dataclass
class TrainerPoint:
    """Serve mode, one per trainer step: the queue and what this host had sent by then."""

    ts: float
    current_step: int
    queue_size: int
    self_queue_size: int
    groups_sent: int


@dataclass
class RunInfo:
    env_name: str = ""
    mode: str = ""
    phase: int = 1
    group_size: int = 0
    max_in_flight: int = 0
    worker_timeout_s: float = 0.0
    terminal_backend: str = ""
    terminal_timeout_s: float = 0.0
    terminal_lifetime_s: float = 0.0
    total_steps: int = 0
    jsonl_path: str | None = None
    servers: list[str] = field(default_factory=list)
    shard: str = ""
    config: list[rev.ConfigRow] = field(default_factory=list)  # the config view's rows
