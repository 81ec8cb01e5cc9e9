"""Deterministic synthetic event logs for the UI tests and screenshots.

Built from the real event classes with fixed timestamps and a seeded RNG, so the
same scenario always gives the same ConsoleState (and the same snapshot).

    python -m tests.ui.eventlog            # rewrites tests/ui/fixtures/*.jsonl
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable
from pathlib import Path

from environments import events as ev
from environments.events import Event, event_from_dict
from hermes_console.runtime import events as rev
from hermes_console.runtime.trainer import GROUP_SIZE_ONE_WARNING

T0 = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC
FIXTURES = Path(__file__).parent / "fixtures"

TASKS = [
    "fix the failing test in calc.py",
    "write fizzbuzz.sh printing 1..100",
    "count ERROR lines in logs/app.log",
    "sum column 3 of data.csv",
    "rename *.jpeg to *.jpg recursively",
    "find the largest file under src/",
    "make hello.c compile with -Wall",
    "extract emails from contacts.txt",
]
COMMANDS = [
    "ls -la",
    "cat calc.py",
    "python -m pytest -q",
    "grep -c ERROR logs/app.log",
    "awk -F, '{s+=$3} END {print s}' data.csv",
    "gcc -Wall hello.c -o hello",
    "find src -type f -printf '%s %p\\n' | sort -n | tail -1",
]
REPLIES = [
    "Let me look at the files first.",
    "The test fails because add() subtracts; fixing it.",
    "Running the tests again to confirm.",
    "All tests pass now.",
    "The answer is 4182.",
]
REASONING = [
    "The user wants the failing test fixed. I should inspect calc.py, then run pytest to see the failure.",
    "Output shows 3 matches; the task asks for a count so I can answer directly.",
    "awk is the quickest way to sum a column; the header row must be skipped.",
]


class LogBuilder:
    """Collects events at explicit times; ``events()`` returns them in time order."""

    def __init__(self, seed: int = 7, t0: float = T0) -> None:
        self.rng = random.Random(seed)
        self.t0 = t0
        self._events: list[Event] = []
        self.steps = 0  # trainer steps: one per completed group

    def add(self, at: float, cls: Callable[..., Event], **fields: object) -> None:
        self._events.append(cls(ts=self.t0 + at, **fields))

    def events(self) -> list[Event]:
        # Stable sort keeps same-time events in emission order.
        return sorted(self._events, key=lambda e: e.ts)

    # ------------------------------------------------------------------ building blocks

    def run_header(self, at: float = 0.0, phase: int = 1, mode: str = "process") -> None:
        self.add(at, rev.RuntimeStatus, status="loading", detail="loading terminal_tasks")
        self.add(
            at + 0.5,
            rev.RunConfigured,
            env_name="terminal_tasks",
            mode=mode,
            phase=phase,
            group_size=4,
            max_in_flight=8,
            worker_timeout_s=600.0,
            terminal_backend="local",
            terminal_timeout_s=180.0,
            terminal_lifetime_s=900.0,
            total_steps=100,
            jsonl_path="runs/terminal_tasks/rollouts.jsonl",
            servers=["http://127.0.0.1:8100/v1", "http://127.0.0.1:8101/v1"],
        )
        self.add(at + 1.0, rev.RuntimeStatus, status="running")

    def health(
        self, at: float, phase: int = 1, unhealthy: int = 0, lag_ms: float = 4.0, down_since: float | None = None
    ) -> None:
        """Two servers; the first ``unhealthy`` are down. With ``down_since`` (relative time)
        the down rows carry the connection-failure fields the health watcher adds."""
        servers: list[dict[str, object]] = []
        for i, port in enumerate((8100, 8101)):
            row: dict[str, object] = {
                "url": f"http://127.0.0.1:{port}/v1",
                "healthy": i >= unhealthy,
                "in_flight": 3 + i,
                "requests": 400 + 37 * i,
                "errors": 2 + 9 * (i < unhealthy),
                "latency_ms_p50": 120.0 + 15 * i,
            }
            if down_since is not None:
                down = i < unhealthy
                row.update(
                    connection_failures=7 if down else 0,
                    rerouted=5 if down else 0,
                    down_since=self.t0 + down_since if down else None,
                    last_connection_failure="APIConnectionError: Connection refused (127.0.0.1:8100)" if down else None,
                )
            servers.append(row)
        self.add(at, rev.ServerStats, phase=phase, servers=servers)
        self.add(at, rev.LoopLag, lag_ms=lag_ms)

    def rollout(
        self,
        at: float,
        group_id: str,
        rollout_id: str,
        summary: str,
        *,
        turns: int,
        reward: float | None,
        phase: int = 1,
        tool_error_every: int = 0,
        running_command: bool = False,
        api_error: bool = False,
        reward_error: bool = False,
    ) -> float:
        """Emit one rollout starting at ``at``; ``reward=None`` leaves it running.
        Returns the time of its last event."""
        rng = self.rng
        t = at
        self.add(t, ev.RolloutStarted, rollout_id=rollout_id, group_id=group_id, item_summary=summary, phase=phase)
        self.add(
            t + 0.05,
            ev.SandboxCreated,
            task_id=rollout_id,
            backend="local",
            workdir=f"/tmp/hermes/{rollout_id}",
            lifetime_s=900.0,
        )
        errors = 0
        for turn in range(1, turns + 1):
            t += 0.2
            self.add(t, ev.TurnStarted, rollout_id=rollout_id, turn=turn)
            t += round(rng.uniform(0.4, 2.5), 2)
            last_turn = turn == turns
            if api_error and last_turn:
                self.add(
                    t,
                    ev.TurnFinished,
                    rollout_id=rollout_id,
                    turn=turn,
                    latency_s=30.0,
                    error="APITimeoutError: server did not answer within 30s",
                )
                break
            calls = 0 if (last_turn and reward is not None) else 1
            reasoning = REASONING[(turn + len(rollout_id)) % len(REASONING)] if turn % 2 else None
            content = REPLIES[(turn - 1) % len(REPLIES)] if (calls == 0 or turn % 3 == 1) else ""
            self.add(
                t,
                ev.TurnFinished,
                rollout_id=rollout_id,
                turn=turn,
                latency_s=round(rng.uniform(0.3, 2.4), 2),
                content=content,
                reasoning=reasoning,
                tool_calls=calls,
            )
            if not calls:
                continue
            command = COMMANDS[(turn + len(group_id)) % len(COMMANDS)]
            call_id = f"call_{rollout_id}_{turn}"
            args = json.dumps({"command": command})
            self.add(
                t + 0.01,
                ev.ToolCallStarted,
                rollout_id=rollout_id,
                turn=turn,
                call_id=call_id,
                tool_name="terminal",
                args_head=args,
            )
            self.add(t + 0.02, ev.SandboxCommandStarted, task_id=rollout_id, command=command, timeout_s=180.0)
            if running_command and turn == turns:
                return t  # the command is still running
            failing = bool(tool_error_every) and turn % tool_error_every == 0
            d = round(rng.uniform(0.05, 3.0), 2)
            if failing:
                timed_out = turn % (2 * tool_error_every) == 0
                exit_code = 124 if timed_out else 1
                error = "Command timed out after 180 seconds" if timed_out else "grep: logs/app.log: No such file"
                self.add(
                    t + d,
                    ev.SandboxCommandFinished,
                    task_id=rollout_id,
                    command=command,
                    exit_code=exit_code,
                    duration_s=d,
                    output_head=error,
                    timed_out=timed_out,
                )
                self.add(
                    t + d + 0.01,
                    ev.ToolCallFinished,
                    rollout_id=rollout_id,
                    turn=turn,
                    call_id=call_id,
                    tool_name="terminal",
                    duration_s=d,
                    result_head=json.dumps({"error": error}),
                    error=error,
                    error_kind="timeout" if timed_out else "tool_error",
                    exit_code=exit_code,
                )
                errors += 1
            else:
                out = f"{rng.randint(1, 9999)}"
                self.add(
                    t + d,
                    ev.SandboxCommandFinished,
                    task_id=rollout_id,
                    command=command,
                    exit_code=0,
                    duration_s=d,
                    output_head=out,
                )
                self.add(
                    t + d + 0.01,
                    ev.ToolCallFinished,
                    rollout_id=rollout_id,
                    turn=turn,
                    call_id=call_id,
                    tool_name="terminal",
                    duration_s=d,
                    result_head=json.dumps({"output": out, "exit_code": 0, "error": None}),
                    exit_code=0,
                )
            t += d + 0.02
        if reward is None:
            return t
        t += 0.3
        self.add(
            t,
            ev.RolloutFinished,
            rollout_id=rollout_id,
            group_id=group_id,
            reward=reward,
            turns_used=turns,
            finished_naturally=not api_error,
            tool_error_count=errors,
            duration_s=round(t - at, 2),
            token_count=(tokens := 380 * turns + rng.randint(0, 300)),
            # healthy trainer data: the model's own turns trained, prompt and tool output masked
            trainable_tokens=(trained := 110 * turns),
            trainable_turns=turns,
            assistant_turns=turns,
            prompt_tokens=min(240, tokens - trained),
            phase=phase,
            node_count=1 if phase == 2 else 0,
            reward_error="ZeroDivisionError: division by zero" if reward_error else None,
            error="APITimeoutError: server did not answer within 30s" if api_error else None,
        )
        self.add(t + 0.1, ev.SandboxClosed, task_id=rollout_id, reason="cleanup")
        return t + 0.1

    def finished_group(self, at: float, index: int, *, phase: int = 1, error_rate: float = 0.0) -> float:
        group_id = f"g{index:04d}"
        summary = TASKS[index % len(TASKS)]
        self.add(at, rev.ItemReceived, group_id=group_id, item_summary=summary)
        self.add(
            at + 0.01,
            ev.GroupStarted,
            group_id=group_id,
            item_summary=summary,
            group_size=4,
            phase=phase,
            toolsets=["terminal", "file"],
        )
        identical = index % 5 == 3
        scores: list[float] = []
        end = at
        for r in range(4):
            reward = 1.0 if identical else round(min(1.0, max(0.0, self.rng.gauss(0.55 + index * 0.01, 0.3))), 2)
            failing = error_rate > 0 and self.rng.random() < error_rate
            end = max(
                end,
                self.rollout(
                    at + 0.02 + r * 0.1,
                    group_id,
                    f"{group_id}-r{r}",
                    summary,
                    turns=2 + (index + r) % 4,
                    reward=reward,
                    phase=phase,
                    tool_error_every=2 if failing else 0,
                    api_error=failing and r == 3,
                    reward_error=failing and r == 2,
                ),
            )
            scores.append(reward)
        self.add(end + 0.2, ev.GroupFinished, group_id=group_id, scores=scores, duration_s=round(end - at, 2))
        if identical:
            self.add(end + 0.3, ev.ItemDropped, group_id=group_id, reason="identical_scores")
        else:
            self.steps += 1
            self.add(end + 0.3, rev.ItemCompleted, group_id=group_id, scores=scores, step=self.steps)
        return end + 0.3

    def active_group(
        self, at: float, index: int, *, turns_done: int, rollouts_finished: int = 0, phase: int = 1
    ) -> None:
        group_id = f"g{index:04d}"
        summary = TASKS[index % len(TASKS)]
        self.add(at, rev.ItemReceived, group_id=group_id, item_summary=summary)
        self.add(
            at + 0.01,
            ev.GroupStarted,
            group_id=group_id,
            item_summary=summary,
            group_size=4,
            phase=phase,
            toolsets=["terminal", "file"],
        )
        for r in range(4):
            done = r < rollouts_finished
            self.rollout(
                at + 0.02 + r * 0.1,
                group_id,
                f"{group_id}-r{r}",
                summary,
                turns=turns_done + r % 2,
                reward=0.75 if done else None,
                phase=phase,
                running_command=not done and r % 2 == 0,
            )


# ---------------------------------------------------------------------- scenarios

# Every scenario ends with a heartbeat at END so "now" = last event ts is stable.
END = 900.0


def _active_set(b: LogBuilder, first_index: int, phase: int = 1) -> None:
    # Ages at END: 40 s, 150 s, 330 s, 470 s (78% of worker_timeout), 560 s (93%).
    for i, age in enumerate((40.0, 150.0, 330.0, 470.0, 560.0)):
        b.active_group(END - age, first_index + i, turns_done=1 + i % 3, rollouts_finished=i % 3, phase=phase)


def main_run(finished: int = 30) -> list[Event]:
    """A healthy run under load: 30 finished groups, 5 in flight, rewards trending up."""
    b = LogBuilder(seed=7)
    b.run_header()
    t = 2.0
    for i in range(finished):
        t = b.finished_group(t, i) + 1.0
        if i % 5 == 0:
            b.health(t)
    b.finished_group(END - 20.0, 95)  # recent finishes keep rollouts/s above zero
    _active_set(b, 30)
    b.health(END, lag_ms=6.0)
    return b.events()


def error_run() -> list[Event]:
    """An error-heavy run: tool timeouts, API errors, reward errors, failed and dropped items."""
    b = LogBuilder(seed=11)
    b.run_header()
    t = 2.0
    for i in range(20):
        t = b.finished_group(t, i, error_rate=0.6) + 1.0
    b.add(t, ev.ItemFailed, group_id="g0100", error="RuntimeError: dataset row 17 has no 'task' field")
    b.add(t - 1, rev.ItemReceived, group_id="g0100", item_summary="(unparseable row 17)")
    b.add(t + 1, rev.ItemReceived, group_id="g0101", item_summary=TASKS[1])
    b.add(
        t + 2, ev.ItemFailed, group_id="g0101", error="worker_timeout: group ran longer than 600s", error_kind="timeout"
    )
    b.add(t + 3, ev.ItemDropped, group_id="g0005x", reason="too_long")
    b.add(t + 2.5, rev.ItemReceived, group_id="g0005x", item_summary=TASKS[5])
    b.add(t + 4, rev.LogRecord, level="ERROR", logger="atroposlib.envs.base", message="collect_trajectories raised")
    _active_set(b, 40)
    b.health(END, unhealthy=1, lag_ms=480.0)
    return b.events()


def phase_switch_run() -> list[Event]:
    """Intake drained for a Phase 1 → 2 switch; three groups still in flight."""
    b = LogBuilder(seed=13)
    b.run_header()
    t = 2.0
    for i in range(12):
        t = b.finished_group(t, i) + 1.0
    for i, age in enumerate((60.0, 200.0, 420.0)):
        b.active_group(END - age, 50 + i, turns_done=2, rollouts_finished=i)
    b.add(END - 30, rev.PhaseSwitch, stage="requested", from_phase=1, to_phase=2, in_flight=5)
    b.add(END - 29, rev.RuntimeStatus, status="draining", detail="phase switch 1 → 2")
    b.add(END - 29, rev.PhaseSwitch, stage="draining", from_phase=1, to_phase=2, in_flight=5)
    b.add(END - 10, rev.PhaseSwitch, stage="draining", from_phase=1, to_phase=2, in_flight=3)
    b.health(END)
    return b.events()


def evaluation_run() -> list[Event]:
    """A run with one finished evaluation (for the results screen)."""
    b = LogBuilder(seed=17)
    b.run_header()
    t = 2.0
    for i in range(10):
        t = b.finished_group(t, i) + 1.0
    b.add(t, rev.EvalStarted, eval_id="eval-0001", intake_paused=False)
    for done in range(0, 41, 8):
        b.add(t + done * 0.5, rev.EvalProgress, eval_id="eval-0001", done=done, total=40)
    b.add(
        t + 21,
        rev.EvalFinished,
        eval_id="eval-0001",
        duration_s=21.0,
        samples_path="runs/terminal_tasks/eval/eval-0001/samples.jsonl",
        metrics={
            "eval/percent_correct": 0.625,
            "eval/mean_reward": 0.611,
            "eval/avg_turns": 3.4,
            "eval/tool_error_rate": 0.05,
            "eval/n_samples": 40,
        },
    )
    _active_set(b, 30)
    b.health(END)
    return b.events()


def flood(n: int, t0: float = T0 + 1_000.0) -> list[Event]:
    """``n`` cheap events (turns and tool calls over many rollouts) for the responsiveness test."""
    out: list[Event] = [rev.RuntimeStatus(ts=t0, status="running")]
    per = 8
    for i in range(n // per):
        t = t0 + i * 0.001
        rid = f"f{i % 64:02d}"
        gid = f"fg{i % 16:02d}"
        out += [
            ev.TurnStarted(ts=t, rollout_id=rid, turn=i),
            ev.TurnFinished(ts=t, rollout_id=rid, turn=i, latency_s=0.1, content=f"step {i}", tool_calls=1),
            ev.ToolCallStarted(ts=t, rollout_id=rid, turn=i, call_id=f"c{i}", tool_name="terminal", args_head="ls"),
            ev.ToolCallFinished(
                ts=t, rollout_id=rid, turn=i, call_id=f"c{i}", tool_name="terminal", duration_s=0.01, result_head="ok"
            ),
            ev.SandboxCommandStarted(ts=t, task_id=rid, command="ls", timeout_s=10.0),
            ev.SandboxCommandFinished(ts=t, task_id=rid, command="ls", exit_code=0, duration_s=0.01),
            rev.ItemReceived(ts=t, group_id=f"{gid}-{i}"),
            rev.ItemCompleted(ts=t, group_id=f"{gid}-{i}", step=i),
        ]
    return out


def serve_run(group_size: int = 4) -> list[Event]:
    """Serve mode against a trainer: trainer status over the steps, one of two servers down
    since step 2. ``group_size=1`` adds the runtime's under-counted-queue warning."""
    b = LogBuilder(seed=5)
    b.run_header(mode="serve")
    b.add(1.5, rev.TrainerStatus, state="waiting", detail="waiting for the trainer to start (POST /register)")
    warning = GROUP_SIZE_ONE_WARNING if group_size == 1 else None
    t = 6.0
    went_down: float | None = None
    for i in range(18):
        t = b.finished_group(t, i) + 1.0
        step = i // 3
        b.add(
            t,
            rev.TrainerStatus,
            state="backpressure" if i == 12 else "running",
            current_step=step,
            total_steps=20,
            queue_size=2 + i % 4,
            self_queue_size=1 + i % 3,
            total_queue_size=4 + i % 5,
            batch_size=16,
            group_size=group_size,
            max_group_size=group_size,
            env_id=0,
            env_weight=0.5,
            unallocated_fraction=0.25,
            groups_sent=i + 1,
            groups_sent_this_step=1 + i % 3,
            groups_per_step=3.0,
            backpressure=i == 12,
            wait_trainer_s=round(0.8 * i, 1),
            wait_inference_s=round(2.5 * i, 1),
            warning=warning,
        )
        if i % 4 == 0:
            if i >= 8 and went_down is None:
                went_down = t
            b.health(t, unhealthy=1 if went_down is not None else 0, down_since=went_down)
    _active_set(b, 20)
    b.health(END, unhealthy=1, lag_ms=5.0, down_since=went_down)
    return b.events()


def small_run() -> list[Event]:
    """The main run with fewer finished groups: same active set, cheaper for behaviour tests."""
    return main_run(finished=6)


SCENARIOS: dict[str, Callable[[], list[Event]]] = {
    "main": main_run,
    "small": small_run,
    "errors": error_run,
    "phase_switch": phase_switch_run,
    "evaluation": evaluation_run,
    "serve": serve_run,
}


def write_log(events: list[Event], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for event in events:
            fh.write(json.dumps(event.to_dict(), sort_keys=True) + "\n")


def read_log(path: Path) -> list[Event]:
    with path.open(encoding="utf-8") as fh:
        return [event_from_dict(json.loads(line)) for line in fh if line.strip()]


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else FIXTURES
    for name, build in SCENARIOS.items():
        if name == "small":
            continue  # built on the fly by the tests
        write_log(build(), out / f"{name}.jsonl")
        print(f"wrote {out / f'{name}.jsonl'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
