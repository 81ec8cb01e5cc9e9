"""ConsoleState: everything the console shows, folded from events.

``apply(event)`` is the only way state changes. It reads nothing but the
event (never the clock, never the env), so the same event sequence always
gives the same state: a recorded log replays to exactly what was on screen.
Every collection is bounded; the full record lives on disk (jsonl groups and
the optional event log), never only here.
"""

from __future__ import annotations

import math
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import asdict
from typing import Any

from environments import events as ev
from hermes_console.runtime import events as rev
from hermes_console.runtime.history import History
from hermes_console.runtime.views import (
    Accounting,
    DataHealth,
    EvalView,
    GroupView,
    PhaseSwitchView,
    RolloutView,
    RunInfo,
    SandboxView,
    StepRewards,
    StreamEntry,
    ToolCallView,
    TrainerPoint,
    TurnView,
)

# Bounds. Finished things are evicted oldest-first beyond these.
MAX_FINISHED_GROUPS = 500
MAX_FINISHED_ROLLOUTS = 2_000
MAX_TOOL_CALLS_PER_ROLLOUT = 500
MAX_CLOSED_SANDBOXES = 200
LAST_COMMANDS_PER_SANDBOX = 5  # kept in memory: a closed sandbox's last commands stay readable
MAX_STREAM = 5_000
MAX_TOOL_ROWS = 2_000
MAX_RECENT_REWARDS = 4_096
MAX_REWARD_STEPS = 1_000
MAX_LOGS = 1_000
MAX_EVALS = 50
THROUGHPUT_WINDOW_S = 10.0
MAX_TRAINER_STEPS = 1_000


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile of an already sorted list (q in [0, 100])."""
    if not sorted_values:
        return math.nan
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


class ConsoleState:
    """The console's model. Mutated only through :meth:`apply`."""

    def __init__(self) -> None:
        self.version = 0
        # Per-panel change counters (bumped by event kind, see _SECTIONS): the UI redraws
        # a panel only when its counter moved. stream_seq / tool_seq count appends.
        self.groups_version = 0
        self.tools_version = 0
        self.sandboxes_version = 0
        self.rewards_version = 0
        self.servers_version = 0
        self.events_applied = 0
        self.first_ts: float | None = None
        self.last_ts: float | None = None
        self.run = RunInfo()
        self.status = "loading"
        self.status_detail = ""
        self.step = 0
        self.accounting = Accounting()
        self.groups: OrderedDict[str, GroupView] = OrderedDict()
        self.rollouts: OrderedDict[str, RolloutView] = OrderedDict()
        self.sandboxes: OrderedDict[str, SandboxView] = OrderedDict()
        self.stream: deque[StreamEntry] = deque(maxlen=MAX_STREAM)
        self.stream_seq = 0
        self.tool_rows: deque[ToolCallView] = deque(maxlen=MAX_TOOL_ROWS)
        self.tool_seq = 0
        self._open_tools: dict[str, ToolCallView] = {}
        self.tool_calls_total = 0
        self.tool_errors_total = 0
        self.errors_by_kind: Counter[str] = Counter()
        self.recent_rewards: deque[float] = deque(maxlen=MAX_RECENT_REWARDS)
        self.reward_steps: deque[StepRewards] = deque(maxlen=MAX_REWARD_STEPS)
        self.groups_scored = 0
        self.identical_score_groups = 0
        self.rollouts_finished = 0
        self.data_health = DataHealth()
        self._rollout_finish_ts: deque[float] = deque(maxlen=10_000)
        self.evals: OrderedDict[str, EvalView] = OrderedDict()
        self.phase_switch: PhaseSwitchView | None = None
        self.servers: list[dict[str, Any]] = []
        self.loop_lag_ms: float = 0.0
        self.loop_lag_max_ms: float = 0.0
        self.logs: deque[rev.LogRecord] = deque(maxlen=MAX_LOGS)
        self.trainer: rev.TrainerStatus | None = None
        self.wandb: rev.WandbStatus | None = None
        self.trainer_history: deque[TrainerPoint] = deque(maxlen=MAX_TRAINER_STEPS)
        self.sandboxes_closed_by: Counter[str] = Counter()
        # Finished keys in finishing order, so eviction is O(1) per event.
        self._finished_groups: deque[str] = deque()
        self._finished_rollouts: deque[str] = deque()
        self._closed_sandboxes: deque[str] = deque()
        # Rollout history, readable ids, time split and errors by kind (runtime/history.py).
        self.history = History()

    # ------------------------------------------------------------------ queries

    def rollouts_per_s(self, now: float | None = None) -> float:
        """Finished rollouts per second over the last window ending at ``now``
        (defaults to the last event's time, which keeps replay deterministic)."""
        end = now if now is not None else (self.last_ts or 0.0)
        start = end - THROUGHPUT_WINDOW_S
        n = sum(1 for t in self._rollout_finish_ts if start < t <= end)
        span = THROUGHPUT_WINDOW_S
        if self.first_ts is not None:
            span = max(1e-6, min(THROUGHPUT_WINDOW_S, end - self.first_ts))
        return n / span if span > 0 else 0.0

    def active_groups(self) -> list[GroupView]:
        return [g for g in self.groups.values() if g.status == "running"]

    def live_sandboxes(self) -> list[SandboxView]:
        return [s for s in self.sandboxes.values() if s.state != "closed"]

    def closed_sandboxes(self) -> list[SandboxView]:
        """Recently closed sandboxes (bounded by MAX_CLOSED_SANDBOXES), newest first."""
        return [self.sandboxes[t] for t in reversed(self._closed_sandboxes) if t in self.sandboxes]

    def reward_histogram(self, bins: int = 10, lo: float = 0.0, hi: float = 1.0) -> list[int]:
        counts = [0] * bins
        width = (hi - lo) / bins if hi > lo else 1.0
        for r in self.recent_rewards:
            idx = int((r - lo) / width) if width else 0
            counts[min(max(idx, 0), bins - 1)] += 1
        return counts

    def reward_summary(self) -> dict[str, float]:
        values = sorted(self.recent_rewards)
        if not values:
            return {"n": 0, "mean": math.nan, "p50": math.nan, "p90": math.nan}
        return {
            "n": len(values),
            "mean": sum(values) / len(values),
            "p50": percentile(values, 50),
            "p90": percentile(values, 90),
        }

    def unhealthy_servers(self) -> list[dict[str, Any]]:
        return [row for row in self.servers if not row.get("healthy", True)]

    def groups_per_trainer_step(self) -> list[int]:
        """Groups this host sent during each trainer step seen (oldest first)."""
        pts = list(self.trainer_history)
        return [b.groups_sent - a.groups_sent for a, b in zip(pts, pts[1:])]

    def identical_share(self) -> float:
        return self.identical_score_groups / self.groups_scored if self.groups_scored else 0.0

    def snapshot(self) -> dict[str, Any]:
        """A plain-data view of the whole state (used to compare live vs replay)."""
        return {
            "version": self.version,
            "run": asdict(self.run),
            "status": self.status,
            "step": self.step,
            "accounting": asdict(self.accounting),
            "groups": {k: asdict(v) for k, v in self.groups.items()},
            "rollouts": {k: _rollout_dict(v) for k, v in self.rollouts.items()},
            "sandboxes": {k: asdict(v) for k, v in self.sandboxes.items()},
            "stream": [asdict(s) for s in self.stream],
            "tool_rows": [asdict(t) for t in self.tool_rows],
            "errors_by_kind": dict(self.errors_by_kind),
            "recent_rewards": list(self.recent_rewards),
            "reward_steps": [asdict(s) for s in self.reward_steps],
            "evals": {k: asdict(v) for k, v in self.evals.items()},
            "phase_switch": asdict(self.phase_switch) if self.phase_switch else None,
            "servers": self.servers,
            "loop_lag_ms": self.loop_lag_ms,
            "trainer": self.trainer.to_dict() if self.trainer else None,
            "trainer_history": [asdict(p) for p in self.trainer_history],
        }

    # ------------------------------------------------------------------ apply

    def apply_all(self, items: Iterable[ev.Event]) -> None:
        for item in items:
            self.apply(item)

    def apply(self, event: ev.Event) -> None:
        kind = type(event).kind
        if kind == "coalesced":  # a run of events folded by the queue (runtime/coalesce.py)
            event.apply_to(self)  # type: ignore[attr-defined]
            return
        handler = _HANDLERS.get(kind)
        self.events_applied += 1
        if self.first_ts is None:
            self.first_ts = event.ts
        self.last_ts = event.ts if self.last_ts is None else max(self.last_ts, event.ts)
        if handler is not None:
            handler(self, event)
        self.history.apply(self, event)
        for section in _SECTIONS.get(kind, ()):
            setattr(self, section, getattr(self, section) + 1)
        self.version += 1

    # ------------------------------------------------------------------ helpers

    def _push_stream(self, ts: float, rollout_id: str, group_id: str, kind: str, text: str) -> None:
        self.stream_seq += 1
        self.stream.append(StreamEntry(self.stream_seq, ts, rollout_id, group_id, kind, text))

    def _group_of(self, rollout_id: str) -> str:
        r = self.rollouts.get(rollout_id)
        return r.group_id if r else ""

    def _ensure_group(self, group_id: str, ts: float, summary: str = "") -> GroupView:
        g = self.groups.get(group_id)
        if g is None:
            g = GroupView(group_id=group_id, item_summary=summary, started_at=ts, phase=self.run.phase)
            self.groups[group_id] = g
        return g

    def _finish_group(self, group_id: str, ts: float, status: str, reason: str | None) -> bool:
        """Mark a group terminal once. Returns False if it was already terminal
        (accounting must count every item exactly once)."""
        g = self._ensure_group(group_id, ts)
        if g.status != "running":
            return False
        g.status = status
        g.reason = reason
        g.stage = "done"
        g.finished_at = ts
        self._end_live_rollouts(g, ts)
        _evict_finished(self._finished_groups, self.groups, group_id, MAX_FINISHED_GROUPS)
        return True

    def _end_live_rollouts(self, g: GroupView, ts: float) -> None:
        """A cancelled or failed group's rollouts that never reported a finish are over too
        (their tasks were cancelled): never leave them, or their tool calls, "running"."""
        for rollout_id in g.rollout_ids:
            r = self.rollouts.get(rollout_id)
            if r is None or r.status != "running":
                continue
            r.status = "cancelled"
            r.finished_at = ts
            r.current_tool = None
            for call in r.tool_calls:
                if call.status == "running":
                    call.status = "cancelled"
                    self._open_tools.pop(f"{rollout_id}/{call.call_id}", None)
            _evict_finished(self._finished_rollouts, self.rollouts, rollout_id, MAX_FINISHED_ROLLOUTS)


def _evict_finished(order: deque[str], table: dict[str, Any], key: str, limit: int) -> None:
    """Remember ``key`` as finished; drop the oldest finished entries past ``limit``."""
    order.append(key)
    while len(order) > limit:
        table.pop(order.popleft(), None)


def _rollout_dict(r: RolloutView) -> dict[str, Any]:
    d = asdict(r)
    d["turns"] = [asdict(t) for t in r.turns]
    return d


# ---------------------------------------------------------------------- handlers


def _on_run_configured(s: ConsoleState, e: rev.RunConfigured) -> None:
    s.run = RunInfo(
        env_name=e.env_name,
        mode=e.mode,
        phase=e.phase,
        group_size=e.group_size,
        max_in_flight=e.max_in_flight,
        worker_timeout_s=e.worker_timeout_s,
        terminal_backend=e.terminal_backend,
        terminal_timeout_s=e.terminal_timeout_s,
        terminal_lifetime_s=e.terminal_lifetime_s,
        total_steps=e.total_steps,
        jsonl_path=e.jsonl_path,
        servers=list(e.servers),
        shard=e.shard,
        config=list(e.config),
    )


def _on_runtime_status(s: ConsoleState, e: rev.RuntimeStatus) -> None:
    s.status = e.status
    s.status_detail = e.detail


def _on_item_received(s: ConsoleState, e: rev.ItemReceived) -> None:
    s.accounting.received += 1
    g = s._ensure_group(e.group_id, e.ts, e.item_summary)
    g.item_summary = g.item_summary or e.item_summary


def _on_item_completed(s: ConsoleState, e: rev.ItemCompleted) -> None:
    if s._finish_group(e.group_id, e.ts, "completed", None):
        s.accounting.completed += 1
    s.step = max(s.step, e.step)


def _on_item_dropped(s: ConsoleState, e: ev.ItemDropped) -> None:
    if s._finish_group(e.group_id, e.ts, "dropped", e.reason):
        s.accounting.dropped[e.reason] = s.accounting.dropped.get(e.reason, 0) + 1
        s.errors_by_kind[f"dropped:{e.reason}"] += 1


def _on_item_failed(s: ConsoleState, e: ev.ItemFailed) -> None:
    if s._finish_group(e.group_id, e.ts, "failed", e.error):
        s.accounting.failed += 1
        s.errors_by_kind[f"item_{e.error_kind}"] += 1
        s._push_stream(e.ts, "", e.group_id, "error", f"group failed ({e.error_kind}): {e.error}")


def _on_item_cancelled(s: ConsoleState, e: rev.ItemCancelled) -> None:
    if s._finish_group(e.group_id, e.ts, "cancelled", e.reason):
        s.accounting.cancelled += 1


def _on_group_started(s: ConsoleState, e: ev.GroupStarted) -> None:
    g = s._ensure_group(e.group_id, e.ts, e.item_summary)
    g.item_summary = e.item_summary or g.item_summary
    g.group_size = e.group_size
    g.phase = e.phase
    g.toolsets = list(e.toolsets)
    g.stage = "rolling out"


def _on_group_finished(s: ConsoleState, e: ev.GroupFinished) -> None:
    g = s.groups.get(e.group_id)
    if g is not None:
        g.scores = list(e.scores)
        if g.status == "running":
            g.stage = "sending"
    if e.scores:
        s.groups_scored += 1
        identical = len(set(e.scores)) == 1 and len(e.scores) > 1
        if identical:
            s.identical_score_groups += 1
        values = sorted(e.scores)
        s.reward_steps.append(
            StepRewards(
                step=s.groups_scored,
                n=len(values),
                mean=sum(values) / len(values),
                p50=percentile(values, 50),
                p90=percentile(values, 90),
                identical=identical,
            )
        )


def _on_rollout_started(s: ConsoleState, e: ev.RolloutStarted) -> None:
    s.rollouts[e.rollout_id] = RolloutView(
        rollout_id=e.rollout_id,
        group_id=e.group_id,
        phase=e.phase,
        started_at=e.ts,
        item_summary=e.item_summary,
        system_prompt=e.system_prompt,
        prompt=e.prompt,
    )
    g = s._ensure_group(e.group_id, e.ts, e.item_summary)
    g.rollout_ids.append(e.rollout_id)
    if e.group_id.startswith("eval-"):  # the running evaluation's: its task rows open transcripts
        running = [v for v in s.evals.values() if v.status == "running"]
        if running:
            running[-1].rollouts[e.item_summary] = e.rollout_id
    if g.stage == "queued":  # eval rollouts come without a GroupStarted
        g.stage = "rolling out"


def _on_rollout_finished(s: ConsoleState, e: ev.RolloutFinished) -> None:
    r = s.rollouts.get(e.rollout_id)
    if r is None:
        r = RolloutView(rollout_id=e.rollout_id, group_id=e.group_id, phase=e.phase, started_at=e.ts)
        s.rollouts[e.rollout_id] = r
    r.status = "error" if e.error else "done"
    r.finished_at = e.ts
    r.reward = e.reward
    r.turns_used = e.turns_used
    r.finished_naturally = e.finished_naturally
    r.duration_s = e.duration_s
    r.token_count = e.token_count
    r.node_count = e.node_count
    r.placeholder_tokens = e.placeholder_tokens
    r.trainable_tokens = e.trainable_tokens
    r.trainable_turns = e.trainable_turns
    r.assistant_turns = e.assistant_turns
    r.drift_count = e.drift_count
    r.trained_run_tokens = tuple(e.trained_run_tokens)
    r.trained_run_logprob = tuple(e.trained_run_logprob)
    r.prompt_tokens = e.prompt_tokens
    r.data_problems = tuple(e.data_problems)
    s.data_health.add(e)
    r.error = e.error
    r.reward_error = e.reward_error
    r.current_tool = None
    _evict_finished(s._finished_rollouts, s.rollouts, e.rollout_id, MAX_FINISHED_ROLLOUTS)
    s.rollouts_finished += 1
    s._rollout_finish_ts.append(e.ts)
    s.recent_rewards.append(e.reward)
    g = s.groups.get(e.group_id)
    if g is not None:
        g.rollouts_done += 1
        if g.group_size and g.rollouts_done >= g.group_size and g.status == "running":
            g.stage = "scoring"
        elif e.group_id.startswith("eval-") and g.rollouts_done >= len(g.rollout_ids):
            s._finish_group(e.group_id, e.ts, "evaluated", None)  # an eval item is done with its rollout
    if e.reward_error:
        s.errors_by_kind["reward_error"] += 1
        s._push_stream(e.ts, e.rollout_id, e.group_id, "error", f"compute_reward raised: {e.reward_error}")
    if e.error:
        s.errors_by_kind["rollout_error"] += 1
        s._push_stream(e.ts, e.rollout_id, e.group_id, "error", f"rollout ended early: {e.error}")
    s._push_stream(
        e.ts,
        e.rollout_id,
        e.group_id,
        "reward",
        f"reward {e.reward:.3f} after {e.turns_used} turn(s)" + ("" if e.finished_naturally else " (did not finish)"),
    )


def _on_turn_started(s: ConsoleState, e: ev.TurnStarted) -> None:
    r = s.rollouts.get(e.rollout_id)
    if r is not None:
        r.turn = e.turn
        r.turns.append(TurnView(turn=e.turn, started_at=e.ts))


def apply_turn_finished(r: RolloutView, e: ev.TurnFinished) -> None:
    """Record a finished turn on its rollout (its started turn, or a new one when the start was not seen).
    Shared with the coalesced path (coalesce.py), so both give the same turns."""
    t = r.turns[-1] if r.turns and r.turns[-1].turn == e.turn else None
    if t is None:
        t = TurnView(turn=e.turn, started_at=e.ts - e.latency_s)
        r.turns.append(t)
    t.latency_s = e.latency_s
    t.content = e.content
    t.reasoning = e.reasoning
    t.tool_calls = e.tool_calls
    t.parsed_from_text = e.parsed_from_text
    t.error = e.error


def turn_lines(e: ev.TurnFinished) -> list[tuple[str, str]]:
    """The stream lines ``(kind, text)`` of a finished turn (an error line alone when it failed).
    Shared with the coalesced path, so both show the same lines."""
    if e.error:
        return [("error", f"turn {e.turn}: {e.error}")]
    lines: list[tuple[str, str]] = []
    if e.reasoning:
        lines.append(("reasoning", e.reasoning))
    if e.content or not e.tool_calls:
        lines.append(("turn", e.content or "(empty reply)"))
    return lines


def _on_turn_finished(s: ConsoleState, e: ev.TurnFinished) -> None:
    r = s.rollouts.get(e.rollout_id)
    if r is not None:
        apply_turn_finished(r, e)
    if e.error:
        s.errors_by_kind["api_error"] += 1
    group_id = r.group_id if r else ""
    for kind, text in turn_lines(e):
        s._push_stream(e.ts, e.rollout_id, group_id, kind, text)


def _new_tool_row(s: ConsoleState, e: Any, args_head: str = "") -> ToolCallView:
    """A row in the tool table, also listed on its rollout (bounded)."""
    s.tool_seq += 1
    s.tool_calls_total += 1
    row = ToolCallView(
        seq=s.tool_seq,
        ts=e.ts,
        rollout_id=e.rollout_id,
        group_id=s._group_of(e.rollout_id),
        turn=e.turn,
        call_id=e.call_id,
        tool_name=e.tool_name,
        args_head=args_head,
    )
    s.tool_rows.append(row)
    r = s.rollouts.get(e.rollout_id)
    if r is not None and len(r.tool_calls) < MAX_TOOL_CALLS_PER_ROLLOUT:
        r.tool_calls.append(row)
    return row


def _on_tool_started(s: ConsoleState, e: ev.ToolCallStarted) -> None:
    row = _new_tool_row(s, e, e.args_head)
    s._open_tools[f"{e.rollout_id}/{e.call_id}"] = row
    r = s.rollouts.get(e.rollout_id)
    if r is not None:
        r.current_tool = e.tool_name
    s._push_stream(e.ts, e.rollout_id, row.group_id, "tool", f"{e.tool_name}({e.args_head})")


def _on_tool_finished(s: ConsoleState, e: ev.ToolCallFinished) -> None:
    row = s._open_tools.pop(f"{e.rollout_id}/{e.call_id}", None)
    if row is None:
        late = s.rollouts.get(e.rollout_id)
        if late is not None and late.status == "cancelled":
            return  # its group was cancelled; the call was closed then (no duplicate row)
        row = _new_tool_row(s, e)  # unknown tools / bad JSON are answered without a start event
    row.status = "error" if e.error else "ok"
    row.duration_s = e.duration_s
    row.result_head = e.result_head
    row.result_text = e.result_text
    row.error = e.error
    row.error_kind = e.error_kind
    row.exit_code = e.exit_code
    r = s.rollouts.get(e.rollout_id)
    if r is not None:
        r.current_tool = None
        if e.error:
            r.tool_errors += 1
    if e.error:
        s.tool_errors_total += 1
        s.errors_by_kind[f"tool:{e.error_kind or 'error'}"] += 1
        s._push_stream(e.ts, e.rollout_id, row.group_id, "error", f"{e.tool_name} failed: {e.error}")
    else:
        s._push_stream(e.ts, e.rollout_id, row.group_id, "result", e.result_head)


def _on_sandbox_created(s: ConsoleState, e: ev.SandboxCreated) -> None:
    s.sandboxes[e.task_id] = SandboxView(
        task_id=e.task_id,
        backend=e.backend,
        workdir=e.workdir,
        created_at=e.ts,
        lifetime_s=e.lifetime_s,
        last_activity=e.ts,
    )


def _sandbox(s: ConsoleState, task_id: str, ts: float) -> SandboxView:
    sb = s.sandboxes.get(task_id)
    if sb is None:
        sb = SandboxView(task_id=task_id, backend="?", workdir="", created_at=ts, lifetime_s=0.0, last_activity=ts)
        s.sandboxes[task_id] = sb
    return sb


def _on_sandbox_cmd_started(s: ConsoleState, e: ev.SandboxCommandStarted) -> None:
    sb = _sandbox(s, e.task_id, e.ts)
    sb.state = "running"
    sb.running_command = e.command
    sb.running_since = e.ts
    sb.running_timeout_s = e.timeout_s
    sb.last_activity = e.ts


def _on_sandbox_cmd_finished(s: ConsoleState, e: ev.SandboxCommandFinished) -> None:
    sb = _sandbox(s, e.task_id, e.ts)
    if sb.state != "closed":
        sb.state = "idle"
    sb.running_command = None
    sb.running_since = None
    sb.running_timeout_s = None
    sb.last_activity = e.ts
    sb.commands += 1
    sb.last_exit_code = e.exit_code
    sb.last_commands.append(
        {
            "command": e.command,
            "exit_code": e.exit_code,
            "duration_s": e.duration_s,
            "output_head": e.output_head[:200],
            "timed_out": e.timed_out,
        }
    )
    del sb.last_commands[:-LAST_COMMANDS_PER_SANDBOX]
    if e.timed_out:
        sb.timeouts += 1
        # A tool call's timeout is counted once, as tool:timeout, when the call reports;
        # only commands outside tool calls (rewards, diagnostics) count here.
        rollout = s.rollouts.get(e.task_id)  # a rollout's sandbox carries its id
        if rollout is None or rollout.current_tool is None:
            s.errors_by_kind["sandbox_timeout"] += 1


def _on_sandbox_lifetime(s: ConsoleState, e: ev.SandboxLifetimeChanged) -> None:
    _sandbox(s, e.task_id, e.ts).lifetime_s = e.lifetime_s


def _on_sandbox_closed(s: ConsoleState, e: ev.SandboxClosed) -> None:
    sb = _sandbox(s, e.task_id, e.ts)
    if sb.state == "closed":
        return
    sb.state = "closed"
    sb.closed_reason = e.reason
    sb.closed_at = e.ts
    sb.running_command = None
    _evict_finished(s._closed_sandboxes, s.sandboxes, e.task_id, MAX_CLOSED_SANDBOXES)
    s.sandboxes_closed_by[e.reason] += 1
    if e.error:
        s.errors_by_kind["sandbox_cleanup_error"] += 1


def _on_phase_switch(s: ConsoleState, e: rev.PhaseSwitch) -> None:
    s.phase_switch = PhaseSwitchView(e.stage, e.from_phase, e.to_phase, e.in_flight, e.detail, e.ts)
    if e.stage == "done":
        s.run.phase = e.to_phase
    if e.stage == "failed":
        s.errors_by_kind["phase_switch_failed"] += 1


def _on_eval_started(s: ConsoleState, e: rev.EvalStarted) -> None:
    s.evals[e.eval_id] = EvalView(eval_id=e.eval_id, started_at=e.ts, step=s.step)
    while len(s.evals) > MAX_EVALS:
        s.evals.popitem(last=False)


def _on_eval_progress(s: ConsoleState, e: rev.EvalProgress) -> None:
    view = s.evals.get(e.eval_id)
    if view is not None:
        view.done = e.done
        view.total = e.total


def _on_eval_finished(s: ConsoleState, e: rev.EvalFinished) -> None:
    view = s.evals.get(e.eval_id)
    if view is None:
        view = EvalView(eval_id=e.eval_id, started_at=e.ts)
        s.evals[e.eval_id] = view
    view.status = "error" if e.error else "done"
    # Eval rollouts run outside item accounting under "eval-*" group ids: close their views.
    for gid in [k for k, g in s.groups.items() if g.status == "running" and k.startswith("eval-")]:
        s._finish_group(gid, e.ts, "evaluated", None)
    view.metrics = dict(e.metrics)
    view.samples_path = e.samples_path
    view.error = e.error
    view.duration_s = e.duration_s
    if e.error:
        s.errors_by_kind["eval_error"] += 1


def _on_server_stats(s: ConsoleState, e: rev.ServerStats) -> None:
    # Rows carry cumulative counts; failed attempts that were retried away count as errors
    # too (by their increase; a rebuilt manager after a phase switch starts again from 0).
    delta = server_error_increase(s.servers, e.servers)
    if delta > 0:
        s.errors_by_kind["server_http_error"] += delta
    s.servers = [dict(x) for x in e.servers]


def server_error_increase(before_rows: list[dict[str, Any]], after_rows: list[dict[str, Any]]) -> int:
    """Transport errors added between two server snapshots (a counter that went down restarted at 0)."""
    before = {str(x.get("url")): int(x.get("transport_errors") or 0) for x in before_rows}
    total = 0
    for row in after_rows:
        now = int(row.get("transport_errors") or 0)
        prev = before.get(str(row.get("url")), 0)
        delta = now - prev if now >= prev else now
        total += max(0, delta)
    return total


def _on_loop_lag(s: ConsoleState, e: rev.LoopLag) -> None:
    s.loop_lag_ms = e.lag_ms
    s.loop_lag_max_ms = max(s.loop_lag_max_ms, e.lag_ms)


def _on_log(s: ConsoleState, e: rev.LogRecord) -> None:
    s.logs.append(e)
    if e.level in ("ERROR", "CRITICAL"):
        s.errors_by_kind["log_error"] += 1


def _on_trainer(s: ConsoleState, e: rev.TrainerStatus) -> None:
    s.trainer = e
    if e.state in ("running", "backpressure", "finished"):
        point = TrainerPoint(e.ts, e.current_step, e.queue_size, e.self_queue_size, e.groups_sent)
        if s.trainer_history and s.trainer_history[-1].current_step == e.current_step:
            s.trainer_history[-1] = point  # one point per trainer step: the latest figures
        else:
            s.trainer_history.append(point)


def _on_wandb(s: ConsoleState, e: rev.WandbStatus) -> None:
    s.wandb = e


_HANDLERS: dict[str, Callable[[ConsoleState, Any], None]] = {
    rev.RunConfigured.kind: _on_run_configured,
    rev.RuntimeStatus.kind: _on_runtime_status,
    rev.ItemReceived.kind: _on_item_received,
    rev.ItemCompleted.kind: _on_item_completed,
    rev.ItemCancelled.kind: _on_item_cancelled,
    ev.ItemDropped.kind: _on_item_dropped,
    ev.ItemFailed.kind: _on_item_failed,
    ev.GroupStarted.kind: _on_group_started,
    ev.GroupFinished.kind: _on_group_finished,
    ev.RolloutStarted.kind: _on_rollout_started,
    ev.RolloutFinished.kind: _on_rollout_finished,
    ev.TurnStarted.kind: _on_turn_started,
    ev.TurnFinished.kind: _on_turn_finished,
    ev.ToolCallStarted.kind: _on_tool_started,
    ev.ToolCallFinished.kind: _on_tool_finished,
    ev.SandboxCreated.kind: _on_sandbox_created,
    ev.SandboxCommandStarted.kind: _on_sandbox_cmd_started,
    ev.SandboxCommandFinished.kind: _on_sandbox_cmd_finished,
    ev.SandboxLifetimeChanged.kind: _on_sandbox_lifetime,
    ev.SandboxClosed.kind: _on_sandbox_closed,
    rev.PhaseSwitch.kind: _on_phase_switch,
    rev.EvalStarted.kind: _on_eval_started,
    rev.EvalProgress.kind: _on_eval_progress,
    rev.EvalFinished.kind: _on_eval_finished,
    rev.ServerStats.kind: _on_server_stats,
    rev.LoopLag.kind: _on_loop_lag,
    rev.LogRecord.kind: _on_log,
    rev.TrainerStatus.kind: _on_trainer,
    rev.WandbStatus.kind: _on_wandb,
}

# Which per-panel counters an event kind moves (by kind, so replay counts the same).
_GROUPS, _TOOLS, _SANDBOXES, _REWARDS, _SERVERS = (
    "groups_version",
    "tools_version",
    "sandboxes_version",
    "rewards_version",
    "servers_version",
)
_SECTIONS = {
    rev.RunConfigured.kind: (_GROUPS, _SERVERS),  # worker timeout, server list
    rev.ItemReceived.kind: (_GROUPS,),
    rev.ItemCompleted.kind: (_GROUPS,),
    rev.ItemCancelled.kind: (_GROUPS,),
    ev.ItemDropped.kind: (_GROUPS,),
    ev.ItemFailed.kind: (_GROUPS,),
    ev.GroupStarted.kind: (_GROUPS,),
    ev.GroupFinished.kind: (_GROUPS, _REWARDS),
    ev.RolloutStarted.kind: (_GROUPS,),
    ev.RolloutFinished.kind: (_GROUPS, _REWARDS),
    ev.ToolCallStarted.kind: (_TOOLS,),
    ev.ToolCallFinished.kind: (_TOOLS,),
    ev.SandboxCreated.kind: (_SANDBOXES,),
    ev.SandboxCommandStarted.kind: (_SANDBOXES,),
    ev.SandboxCommandFinished.kind: (_SANDBOXES,),
    ev.SandboxLifetimeChanged.kind: (_SANDBOXES,),
    ev.SandboxClosed.kind: (_SANDBOXES,),
    rev.EvalFinished.kind: (_GROUPS,),  # closes the eval-* groups
    rev.ServerStats.kind: (_SERVERS,),
}
