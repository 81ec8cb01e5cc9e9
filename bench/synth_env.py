"""A synthetic, event-heavy env for the console benchmarks (P3, P4, scaling).

No HTTP, no sandboxes: each rollout emits exactly the events a real agent
rollout emits (RolloutStarted, per turn TurnStarted/TurnFinished +
ToolCallStarted/ToolCallFinished, RolloutFinished; per group
GroupStarted/GroupFinished) with a sleep of ``turn_sleep_s`` between turns.
So the console's cost per event (queue, reducer, widgets) is what is measured,
at event rates an agent env would need thousands of real rollouts to reach.
Benchmarks that use it say so in their output.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from typing import Any

from environments.atropos_compat import apply_offline_defaults

apply_offline_defaults()

from atroposlib.envs.base import BaseEnv, BaseEnvConfig, ScoredDataGroup  # noqa: E402
from atroposlib.envs.server_handling.server_baseline import APIServerConfig  # noqa: E402
from pydantic import Field  # noqa: E402

from environments import events  # noqa: E402
from environments.atropos_compat import default_server_configs  # noqa: E402
from environments.tokenizer import local_tokenizer_path  # noqa: E402


class SynthConfig(BaseEnvConfig):
    turns_per_rollout: int = Field(default=4, ge=1)
    turn_sleep_s: float = Field(default=0.0, ge=0.0)
    # Each turn sleeps turn_sleep_s * U(1 - j, 1 + j): rollouts drift apart
    # instead of finishing in lock-step bursts (which would quantise rates).
    turn_jitter: float = Field(default=0.5, ge=0.0, le=1.0)
    result_chars: int = Field(default=120, ge=0)


class SynthEnv(BaseEnv):
    name = "synthetic-events"
    env_config_cls = SynthConfig

    @classmethod
    def config_init(cls) -> tuple[SynthConfig, list[APIServerConfig]]:
        config = SynthConfig(
            group_size=4,
            use_wandb=False,
            tokenizer_name=local_tokenizer_path(),
            ensure_scores_are_not_same=False,
            total_steps=1000,
            max_token_length=256,
            include_messages=False,
        )
        # Never contacted: the env makes no requests (run with check_server=False).
        return config, default_server_configs("http://127.0.0.1:9/v1")

    async def setup(self) -> None:
        self._n = 0

    async def get_next_item(self) -> Any:
        self._n += 1
        return {"task_id": f"synth-{self._n}", "prompt": "synthetic"}

    async def evaluate(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def collect_trajectories(self, item: Any) -> tuple[ScoredDataGroup | None, list[Any]]:
        gid = events.current_group_id.get() or uuid.uuid4().hex[:12]
        size = self.config.group_size
        t0 = time.monotonic()
        if events.active:
            events.emit(
                events.GroupStarted(
                    group_id=gid, item_summary=str(item["task_id"]), group_size=size, phase=1, toolsets=["terminal"]
                )
            )
        rewards = await asyncio.gather(*(self._rollout(gid, i) for i in range(size)))
        if events.active:
            events.emit(events.GroupFinished(group_id=gid, scores=list(rewards), duration_s=time.monotonic() - t0))
        group = ScoredDataGroup(
            tokens=[[1, 2, 3, 4] for _ in rewards], masks=[[-100, 2, 3, 4] for _ in rewards], scores=list(rewards)
        )
        return group, []

    async def _rollout(self, gid: str, k: int) -> float:
        rid = uuid.uuid4().hex
        cfg = self.config
        rnd = random.Random(rid)
        lo, hi = cfg.turn_sleep_s * (1 - cfg.turn_jitter), cfg.turn_sleep_s * (1 + cfg.turn_jitter)
        emit = events.emit
        text = "x" * cfg.result_chars
        t0 = time.monotonic()
        emit(events.RolloutStarted(rollout_id=rid, group_id=gid, item_summary="synthetic", phase=1))
        for turn in range(1, cfg.turns_per_rollout + 1):
            emit(events.TurnStarted(rollout_id=rid, turn=turn))
            await asyncio.sleep(rnd.uniform(lo, hi) if hi > 0 else 0.0)
            emit(
                events.TurnFinished(
                    rollout_id=rid, turn=turn, latency_s=cfg.turn_sleep_s, content=text[:60], tool_calls=1
                )
            )
            call_id = f"call_{turn}"
            emit(
                events.ToolCallStarted(
                    rollout_id=rid, turn=turn, call_id=call_id, tool_name="terminal", args_head='{"command": "ls -la"}'
                )
            )
            emit(
                events.ToolCallFinished(
                    rollout_id=rid,
                    turn=turn,
                    call_id=call_id,
                    tool_name="terminal",
                    duration_s=0.001,
                    result_head=text,
                    exit_code=0,
                )
            )
        reward = float((k + turn) % 2)
        emit(
            events.RolloutFinished(
                rollout_id=rid,
                group_id=gid,
                reward=reward,
                turns_used=cfg.turns_per_rollout + 1,
                finished_naturally=True,
                duration_s=time.monotonic() - t0,
                token_count=4,
            )
        )
        return reward


def events_per_rollout(turns: int) -> int:
    return 2 + 4 * turns


def synthetic_events(n_rollouts: int, turns: int = 4, group_size: int = 4, concurrent: int = 1024) -> list[Any]:
    """The event stream ``n_rollouts`` synthetic rollouts produce, interleaved
    ``concurrent`` at a time (for reducer-only measurements, no runtime)."""
    from hermes_console.runtime import events as rev

    out: list[Any] = []
    text = "x" * 120
    done = 0
    step = 0
    while done < n_rollouts:
        batch = min(concurrent, n_rollouts - done)
        groups = [f"g{step}-{i}" for i in range((batch + group_size - 1) // group_size)]
        rids = [f"r{step}-{i}" for i in range(batch)]
        for g in groups:
            out.append(rev.ItemReceived(group_id=g, item_summary="synthetic"))
            out.append(events.GroupStarted(group_id=g, item_summary="synthetic", group_size=group_size, phase=1))
        for i, r in enumerate(rids):
            out.append(events.RolloutStarted(rollout_id=r, group_id=groups[i // group_size], phase=1))
        for turn in range(1, turns + 1):
            for r in rids:
                out.append(events.TurnStarted(rollout_id=r, turn=turn))
            for r in rids:
                out.append(events.TurnFinished(rollout_id=r, turn=turn, latency_s=0.1, content=text[:60], tool_calls=1))
                out.append(
                    events.ToolCallStarted(
                        rollout_id=r, turn=turn, call_id=f"c{turn}", tool_name="terminal", args_head='{"command": "ls"}'
                    )
                )
                out.append(
                    events.ToolCallFinished(
                        rollout_id=r,
                        turn=turn,
                        call_id=f"c{turn}",
                        tool_name="terminal",
                        duration_s=0.001,
                        result_head=text,
                        exit_code=0,
                    )
                )
        for i, r in enumerate(rids):
            out.append(
                events.RolloutFinished(
                    rollout_id=r,
                    group_id=groups[i // group_size],
                    reward=float(i % 2),
                    turns_used=turns + 1,
                    finished_naturally=True,
                    token_count=4,
                )
            )
        for k, g in enumerate(groups):
            out.append(events.GroupFinished(group_id=g, scores=[0.0, 1.0, 0.0, 1.0]))
            out.append(rev.ItemCompleted(group_id=g, scores=[0.0, 1.0, 0.0, 1.0], step=step * len(groups) + k + 1))
        done += batch
        step += 1
    return out
