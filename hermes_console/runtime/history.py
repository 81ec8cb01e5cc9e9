"""Rollout history, where the time goes, and errors by kind: folded from events.

A part of :class:`~hermes_console.runtime.state.ConsoleState` kept in its own
module so the main reducer stays small. Like the reducer it reads nothing but the
events (and the state they were folded into), so replay gives the same history.

- ``records``: one light :class:`RolloutRecord` per finished (or cancelled) rollout,
  bounded; the full data is on disk (groups.jsonl / dropped.jsonl / the event log).
- readable ids: every group gets ``g0033`` (by arrival order) and every rollout
  ``g0033-r2`` (by start order in its group), so ids link across views.
- timing: generation / tool / reward / queue wait per rollout and per run, LLM
  latency percentiles, generated tokens per second.
- errors: each error event becomes an :class:`ErrorRecord` of one kind
  (server, tool, timeout, reward, sandbox, send, item), with a rate over time.
"""

from __future__ import annotations

import math
import re
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from environments import events as ev
from hermes_console.runtime import events as rev
from hermes_console.runtime.reservoir import Reservoir

if TYPE_CHECKING:
    from hermes_console.runtime.state import ConsoleState

MAX_RECORDS = 10_000
MAX_LABELS = 20_000
MAX_ERRORS = 500
KEEP_RESULT_TEXTS = 200  # finished rollouts whose full tool results stay in memory
MAX_LATENCIES = 4_096
BUCKET_S = 10.0  # width of one point of the time series (graphs, rates)
MAX_BUCKETS = 360  # one hour of 10 s buckets
ERROR_KINDS = ("server", "tool", "timeout", "reward", "sandbox", "send", "item")
_READABLE_GROUP = re.compile(r"^g\d{4,}$")


@dataclass
class RolloutRecord:
    """One finished rollout, as the history table shows it."""

    rollout_id: str
    label: str  # g0033-r2
    group_id: str
    group_label: str  # g0033
    item: str
    phase: int
    started_at: float
    finished_at: float
    status: str  # done | error | cancelled
    score: float | None = None
    turns: int = 0
    tool_errors: int = 0
    duration_s: float = 0.0
    outcome: str = "pending"  # pending | kept | dropped | failed | cancelled | evaluated (the group's fate)
    drop_reason: str = ""
    error: str = ""  # rollout error, reward error or the first tool error
    generation_s: float = 0.0
    tool_s: float = 0.0
    reward_s: float = 0.0
    queue_s: float = 0.0
    tokens: int = 0
    generated_tokens: int = 0
    llm_calls: int = 0
    reward_details: dict[str, Any] = field(default_factory=dict)

    @property
    def other_s(self) -> float:
        """Time in the rollout not spent generating, in tools or scoring (sandbox setup, parsing...)."""
        return max(0.0, self.duration_s - self.generation_s - self.tool_s - self.reward_s)

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / self.generation_s if self.generation_s > 0 else math.nan

    def search_text(self) -> str:
        return " ".join(
            (
                self.label,
                self.rollout_id,
                self.group_id,
                self.group_label,
                self.item,
                self.error,
                self.drop_reason,
                self.outcome,
                self.status,
            )
        ).lower()


@dataclass
class ErrorRecord:
    ts: float
    kind: str  # one of ERROR_KINDS
    detail: str  # the finer kind (tool:timeout, api_error, dropped:too_long...)
    cause: str
    where: str = ""  # rollout / group label, server url


@dataclass
class Bucket:
    """One ``BUCKET_S`` slice of the run, for the graphs. Rewards and LLM latencies are
    bounded samples (exact count and mean): a slice's memory does not grow with the rate."""

    start: float
    rollouts: int = 0
    errors: int = 0
    rewards: Reservoir = field(init=False)
    latencies: Reservoir = field(init=False)

    def __post_init__(self) -> None:
        seed = int(self.start)  # replaying the same events draws the same sample
        self.rewards = Reservoir(seed)
        self.latencies = Reservoir(seed + 1)


@dataclass
class _Live:
    """Per running rollout: time summed from its turn and tool events."""

    generation_s: float = 0.0
    tool_s: float = 0.0
    llm_calls: int = 0
    first_tool_error: str = ""


class History:
    def __init__(self) -> None:
        self.version = 0  # any change (timing, errors, records)
        self.records_version = 0  # a record was added or its group's fate reached it
        self.records: OrderedDict[str, RolloutRecord] = OrderedDict()
        self.group_labels: OrderedDict[str, str] = OrderedDict()
        self.rollout_labels: OrderedDict[str, str] = OrderedDict()
        self._by_label: dict[str, str] = {}
        self._groups_seen = 0
        self._group_rollouts: dict[str, list[str]] = {}
        self._members = 0  # rollout ids in _group_rollouts: at most MAX_LABELS, like the rollout labels
        self._received_at: dict[str, float] = {}
        self._live: dict[str, _Live] = {}
        self.latencies: deque[float] = deque(maxlen=MAX_LATENCIES)
        self.errors: deque[ErrorRecord] = deque(maxlen=MAX_ERRORS)
        self.error_counts: Counter[str] = Counter()
        self.buckets: deque[Bucket] = deque(maxlen=MAX_BUCKETS)
        # Run totals over every finished rollout (not only the ones still in memory).
        self.totals = {
            "rollouts": 0,
            "duration_s": 0.0,
            "generation_s": 0.0,
            "tool_s": 0.0,
            "reward_s": 0.0,
            "queue_s": 0.0,
            "generated_tokens": 0.0,
        }
        self._send_errors = 0
        self._transport: dict[str, int] = {}
        self._with_texts: deque[str] = deque()  # cumulative transport errors per server url

    # ------------------------------------------------------------------ queries

    def label_of(self, rollout_id: str) -> str:
        return self.rollout_labels.get(rollout_id, rollout_id)

    def group_label_of(self, group_id: str) -> str:
        return self.group_labels.get(group_id, group_id)

    def resolve(self, text: str) -> str | None:
        """A rollout id from its id or readable label."""
        if text in self.rollout_labels:
            return text
        return self._by_label.get(text)

    def resolve_any(self, text: str) -> str:
        """The raw id a readable label stands for (rollout g0033-r2 or group g0033); else ``text``."""
        rollout = self._by_label.get(text)
        if rollout is not None:
            return rollout
        for group_id, label in reversed(self.group_labels.items()):
            if label == text:
                return group_id
        return text

    def siblings(self, rollout_id: str) -> list[str]:
        """Rollout ids of the same group, in start order (including ``rollout_id``)."""
        record = self.records.get(rollout_id)
        group_id = (
            record.group_id if record else next((g for g, ids in self._group_rollouts.items() if rollout_id in ids), "")
        )
        return list(self._group_rollouts.get(group_id, [rollout_id]))

    def latency_percentiles(self) -> tuple[float, float]:
        values = sorted(self.latencies)
        return _pct(values, 50), _pct(values, 95)

    def error_rate(self, kind: str | None, now: float, window_s: float = 60.0) -> float:
        """Errors of ``kind`` (all kinds when None) per minute over the last ``window_s``."""
        n = sum(1 for e in self.errors if e.ts > now - window_s and (kind is None or e.kind == kind))
        return n * 60.0 / window_s

    def time_split(self) -> dict[str, float]:
        """Run totals: seconds in generation / tools / reward / queue and the rest."""
        t = self.totals
        other = max(0.0, t["duration_s"] - t["generation_s"] - t["tool_s"] - t["reward_s"])
        return {
            "generation": t["generation_s"],
            "tool": t["tool_s"],
            "reward": t["reward_s"],
            "other": other,
            "queue": t["queue_s"],
        }

    def tokens_per_s(self) -> float:
        """Generated (trained) tokens per second of generation; NaN until tokens are reported."""
        gen, tokens = self.totals["generation_s"], self.totals["generated_tokens"]
        return tokens / gen if gen > 0 and tokens > 0 else math.nan

    def bottleneck(self) -> str:
        """One line naming where most rollout time goes (like serve mode's)."""
        split = self.time_split()
        busy = {k: v for k, v in split.items() if k != "queue"}
        total = sum(busy.values())
        if total <= 0:
            return "no finished rollouts yet"
        top = max(busy, key=lambda k: busy[k])
        share = busy[top] / total
        hint = {
            "generation": "inference is the bottleneck (more servers / smaller max_tokens)",
            "tool": "tools are the bottleneck (slow commands, timeouts)",
            "reward": "compute_reward is the bottleneck",
            "other": "setup outside generation/tools/reward dominates (sandboxes, tokenizing)",
        }[top]
        return f"{share:.0%} of rollout time in {top}: {hint}"

    # ------------------------------------------------------------------ apply

    def apply(self, state: ConsoleState, e: ev.Event) -> None:
        handler = _HANDLERS.get(type(e).kind)
        if handler is not None and handler(self, state, e) is not False:
            self.version += 1

    def _group_label(self, group_id: str) -> str:
        label = self.group_labels.get(group_id)
        if label is None:
            self._groups_seen += 1
            label = (
                group_id
                if _READABLE_GROUP.match(group_id) or group_id.startswith("eval-")
                else f"g{self._groups_seen:04d}"
            )
            self.group_labels[group_id] = label
            while len(self.group_labels) > MAX_LABELS:
                old, _ = self.group_labels.popitem(last=False)
                self._forget_members(old)
        return label

    def _forget_members(self, group_id: str) -> None:
        self._members -= len(self._group_rollouts.pop(group_id, ()))
        self._received_at.pop(group_id, None)

    def _rollout_label(self, rollout_id: str, group_id: str) -> str:
        label = self.rollout_labels.get(rollout_id)
        if label is not None:
            return label
        group_label = self._group_label(group_id)
        members = self._group_rollouts.setdefault(group_id, [])
        if rollout_id not in members:
            members.append(rollout_id)
            self._members += 1
            # Oldest groups' member lists go first: MAX_LABELS groups of any size kept up to
            # MAX_LABELS x group_size ids (160k at 8), growing a long run's memory for ids
            # whose labels were already dropped.
            while self._members > MAX_LABELS and len(self._group_rollouts) > 1:
                oldest = next(iter(self._group_rollouts))
                if oldest == group_id:
                    break
                self._forget_members(oldest)
        label = (
            rollout_id if rollout_id.startswith(group_label + "-r") else f"{group_label}-r{members.index(rollout_id)}"
        )
        self.rollout_labels[rollout_id] = label
        self._by_label[label] = rollout_id
        while len(self.rollout_labels) > MAX_LABELS:
            old, old_label = self.rollout_labels.popitem(last=False)
            self._by_label.pop(old_label, None)
        return label

    def _bucket(self, ts: float) -> Bucket:
        start = math.floor(ts / BUCKET_S) * BUCKET_S
        if not self.buckets or self.buckets[-1].start < start:
            # Empty slices are kept as zero points so the graphs' time axis is honest.
            if self.buckets:
                gap = int((start - self.buckets[-1].start) / BUCKET_S) - 1
                for _ in range(min(gap, MAX_BUCKETS)):
                    self.buckets.append(Bucket(self.buckets[-1].start + BUCKET_S))
            self.buckets.append(Bucket(start))
            return self.buckets[-1]
        for bucket in reversed(self.buckets):  # a late event lands in its own slice
            if bucket.start <= ts:
                return bucket
        return self.buckets[0]

    def _error(self, ts: float, kind: str, detail: str, cause: str, where: str = "") -> None:
        self.errors.append(ErrorRecord(ts, kind, detail, (cause or detail)[:500], where))
        self.error_counts[kind] += 1
        self._bucket(ts).errors += 1

    def _record(self, state: ConsoleState, rollout_id: str, group_id: str, ts: float) -> RolloutRecord:
        r = state.rollouts.get(rollout_id)
        live = self._live.pop(rollout_id, _Live())
        started = r.started_at if r is not None else ts
        received = self._received_at.get(group_id)
        record = RolloutRecord(
            rollout_id=rollout_id,
            label=self._rollout_label(rollout_id, group_id),
            group_id=group_id,
            group_label=self._group_label(group_id),
            item=r.item_summary if r is not None else "",
            phase=r.phase if r is not None else 1,
            started_at=started,
            finished_at=ts,
            status=r.status if r is not None else "done",
            generation_s=live.generation_s,
            tool_s=live.tool_s,
            llm_calls=live.llm_calls,
            queue_s=max(0.0, started - received) if received is not None else 0.0,
            error=live.first_tool_error,
        )
        group = state.groups.get(group_id)
        if group is not None and group.status != "running":
            record.outcome, record.drop_reason = _outcome(group.status), group.reason or ""
        self.records[rollout_id] = record
        self.records_version += 1
        while len(self.records) > MAX_RECORDS:
            self.records.popitem(last=False)
        return record


def bin_index(value: float, bins: int, lo: float, hi: float) -> int:
    """The reward histogram bin of ``value`` (the same binning as ConsoleState.reward_histogram)."""
    width = (hi - lo) / bins if hi > lo else 1.0
    idx = int((value - lo) / width) if width else 0
    return min(max(idx, 0), bins - 1)


def _outcome(group_status: str) -> str:
    return {"completed": "kept"}.get(group_status, group_status)


def _pct(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    pos = (len(values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


# ---------------------------------------------------------------------- handlers


def _on_item_received(h: History, s: ConsoleState, e: rev.ItemReceived) -> None:
    h._group_label(e.group_id)
    h._received_at[e.group_id] = e.ts


def _on_group_started(h: History, s: ConsoleState, e: ev.GroupStarted) -> None:
    h._group_label(e.group_id)


def _on_rollout_started(h: History, s: ConsoleState, e: ev.RolloutStarted) -> None:
    h._rollout_label(e.rollout_id, e.group_id)
    h._live[e.rollout_id] = _Live()
    while len(h._live) > MAX_LABELS:  # a rollout that never reported an end (its state was evicted)
        h._live.pop(next(iter(h._live)))


def _on_turn_finished(h: History, s: ConsoleState, e: ev.TurnFinished) -> None:
    live = h._live.get(e.rollout_id)
    if live is not None:
        live.generation_s += max(0.0, e.latency_s)
        live.llm_calls += 1
    if e.error:
        h._error(
            e.ts,
            "timeout" if "timeout" in e.error.lower() else "server",
            "api_error",
            e.error,
            h.label_of(e.rollout_id),
        )
        return
    h.latencies.append(e.latency_s)
    h._bucket(e.ts).latencies.add(e.latency_s)


def _on_tool_finished(h: History, s: ConsoleState, e: ev.ToolCallFinished) -> None:
    live = h._live.get(e.rollout_id)
    if live is not None:
        live.tool_s += max(0.0, e.duration_s)
        if e.error and not live.first_tool_error:
            live.first_tool_error = f"{e.tool_name}: {e.error}"
    if e.error:
        kind = "timeout" if e.error_kind == "timeout" else "tool"
        h._error(e.ts, kind, f"tool:{e.error_kind or 'error'}", f"{e.tool_name}: {e.error}", h.label_of(e.rollout_id))


def _on_rollout_finished(h: History, s: ConsoleState, e: ev.RolloutFinished) -> None:
    record = h._record(s, e.rollout_id, e.group_id, e.ts)
    record.status = "error" if e.error else "done"
    record.score = e.reward
    record.turns = e.turns_used
    record.tool_errors = max(
        e.tool_error_count, s.rollouts[e.rollout_id].tool_errors if e.rollout_id in s.rollouts else 0
    )
    record.duration_s = e.duration_s
    record.phase = e.phase
    record.tokens = e.token_count
    record.generated_tokens = e.trainable_tokens
    record.reward_s = getattr(e, "reward_s", 0.0) or 0.0
    record.reward_details = dict(getattr(e, "reward_details", None) or {})
    record.error = e.error or (f"reward: {e.reward_error}" if e.reward_error else "") or record.error
    _keep_texts(h, s, e.rollout_id)
    t = h.totals
    t["rollouts"] += 1
    for key in ("duration_s", "generation_s", "tool_s", "reward_s", "queue_s"):
        t[key] += getattr(record, key)
    t["generated_tokens"] += record.generated_tokens
    bucket = h._bucket(e.ts)
    bucket.rollouts += 1
    bucket.rewards.add(e.reward)
    if e.reward_error:
        h._error(e.ts, "reward", "reward_error", e.reward_error, record.label)
    if e.error and not _has_api_error(s, e.rollout_id):
        h._error(e.ts, "server", "rollout_error", e.error, record.label)


def _keep_texts(h: History, s: ConsoleState, rollout_id: str) -> None:
    """Full tool results stay for the latest finished rollouts only: memory stays bounded."""
    h._with_texts.append(rollout_id)
    while len(h._with_texts) > KEEP_RESULT_TEXTS:
        old = s.rollouts.get(h._with_texts.popleft())
        for call in old.tool_calls if old is not None else ():
            call.result_text = ""


def _has_api_error(s: ConsoleState, rollout_id: str) -> bool:
    """The rollout's error was already counted from its failing turn."""
    r = s.rollouts.get(rollout_id)
    return bool(r and any(t.error for t in r.turns))


def _close_group(h: History, s: ConsoleState, group_id: str, ts: float) -> None:
    """The group's fate reaches its rollouts' records; cancelled rollouts get a record too."""
    group = s.groups.get(group_id)
    status = group.status if group is not None else "completed"
    reason = (group.reason if group is not None else "") or ""
    for rollout_id in h._group_rollouts.get(group_id, []):
        record = h.records.get(rollout_id)
        if record is None:
            r = s.rollouts.get(rollout_id)
            if r is None or r.status != "cancelled":
                continue
            record = h._record(s, rollout_id, group_id, ts)
            record.duration_s = max(0.0, ts - r.started_at)
            record.turns = r.turn
            record.tool_errors = r.tool_errors
        record.outcome = _outcome(status)
        record.drop_reason = reason
        h.records_version += 1


def _on_item_completed(h: History, s: ConsoleState, e: rev.ItemCompleted) -> None:
    _close_group(h, s, e.group_id, e.ts)


def _on_item_dropped(h: History, s: ConsoleState, e: ev.ItemDropped) -> None:
    _close_group(h, s, e.group_id, e.ts)
    h._error(e.ts, "item", f"dropped:{e.reason}", e.detail or e.reason, h.group_label_of(e.group_id))


def _on_item_failed(h: History, s: ConsoleState, e: ev.ItemFailed) -> None:
    _close_group(h, s, e.group_id, e.ts)
    h._error(
        e.ts,
        "timeout" if e.error_kind == "timeout" else "item",
        f"item_{e.error_kind}",
        e.error,
        h.group_label_of(e.group_id),
    )


def _on_item_cancelled(h: History, s: ConsoleState, e: rev.ItemCancelled) -> None:
    _close_group(h, s, e.group_id, e.ts)


def _on_eval_finished(h: History, s: ConsoleState, e: rev.EvalFinished) -> None:
    for group_id in [g for g in h._group_rollouts if g.startswith("eval-")]:
        _close_group(h, s, group_id, e.ts)


def _on_sandbox_cmd_finished(h: History, s: ConsoleState, e: ev.SandboxCommandFinished) -> bool | None:
    if not e.timed_out:
        return False
    rollout = s.rollouts.get(e.task_id)
    if rollout is not None and rollout.current_tool is not None:
        return False  # counted once, as the tool call's timeout
    h._error(e.ts, "timeout", "sandbox_timeout", f"{e.command}: timed out", h.label_of(e.task_id))
    return None


def _on_sandbox_closed(h: History, s: ConsoleState, e: ev.SandboxClosed) -> bool | None:
    if not e.error:
        return False
    h._error(e.ts, "sandbox", f"sandbox_{e.reason}", e.error, h.label_of(e.task_id))
    return None


def _on_server_stats(h: History, s: ConsoleState, e: rev.ServerStats) -> None:
    # The reducer has already counted the transport errors' increase; record one line per server that grew.
    for row in e.servers:
        failures = int(row.get("transport_errors") or 0)
        key = str(row.get("url"))
        prev = h._transport.get(key, 0)
        h._transport[key] = failures
        if failures > prev:
            cause = str(row.get("last_error") or row.get("last_connection_failure") or "transport error")
            for _ in range(min(failures - prev, 20)):
                h._error(e.ts, "server", "server_http_error", cause, key)


def _on_trainer(h: History, s: ConsoleState, e: rev.TrainerStatus) -> bool | None:
    grew = e.send_errors - h._send_errors
    h._send_errors = e.send_errors
    for _ in range(max(0, min(grew, 20))):
        h._error(e.ts, "send", "send_error", e.last_send_error or "group not confirmed by the trainer API", "")
    return None if grew > 0 else False


def _on_log(h: History, s: ConsoleState, e: rev.LogRecord) -> bool | None:
    return False  # logged errors are shown in the log panel; they repeat the causes above


_HANDLERS: dict[str, Any] = {
    rev.ItemReceived.kind: _on_item_received,
    ev.GroupStarted.kind: _on_group_started,
    ev.RolloutStarted.kind: _on_rollout_started,
    ev.TurnFinished.kind: _on_turn_finished,
    ev.ToolCallFinished.kind: _on_tool_finished,
    ev.RolloutFinished.kind: _on_rollout_finished,
    rev.ItemCompleted.kind: _on_item_completed,
    ev.ItemDropped.kind: _on_item_dropped,
    ev.ItemFailed.kind: _on_item_failed,
    rev.ItemCancelled.kind: _on_item_cancelled,
    rev.EvalFinished.kind: _on_eval_finished,
    ev.SandboxCommandFinished.kind: _on_sandbox_cmd_finished,
    ev.SandboxClosed.kind: _on_sandbox_closed,
    rev.ServerStats.kind: _on_server_stats,
    rev.TrainerStatus.kind: _on_trainer,
}
