"""TerminalTasksEnv ("terminal-tasks"): shell tasks, each verified in its rollout's sandbox.

Run it with atroposlib's own CLI, e.g. against the embedded simulator::

    python -m environments.terminal_tasks.env process --env.total_steps 2 \\
        --env.data_path_to_save_groups out/groups.jsonl --openai.base_url http://127.0.0.1:9001/v1
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from typing import Any

from environments.atropos_compat import DEFAULT_BASE_URL, DEFAULT_MODEL_NAME, DEFAULT_TIMEOUT_S
from environments.hermes_base_env import (
    APIServerConfig,
    HermesAgentBaseEnv,
    HermesAgentEnvConfig,
    _group_id,
    _group_tools,
)
from environments.terminal_tasks.reward import run_in_sandbox, score_check
from environments.terminal_tasks.tasks import DEFAULT_TASKS_PATH, TerminalTask, load_tasks
from environments.tokenizer import local_tokenizer_path

SYSTEM_PROMPT = (
    "You are an agent working in a Linux shell. Use the tools to inspect and change files in the current "
    "directory, verify your work, then reply with a short summary once the task is done."
)
SETUP_TIMEOUT_S = 30
EVAL_CONCURRENCY = 4


class TerminalTasksEnv(HermesAgentBaseEnv):
    name = "terminal-tasks"
    env_config_cls = HermesAgentEnvConfig

    def __init__(
        self, config: HermesAgentEnvConfig, server_configs: Any, slurm: bool = False, testing: bool = False
    ) -> None:
        super().__init__(config, server_configs, slurm=slurm, testing=testing)
        self.train_items: list[dict[str, Any]] = []
        self.eval_items: list[dict[str, Any]] = []
        self._order: list[int] = []
        self._cursor = 0
        self.reward_buffer: list[float] = []
        self.last_eval_metrics: dict[str, float] = {}

    @classmethod
    def config_init(cls) -> tuple[HermesAgentEnvConfig, list[APIServerConfig]]:
        config = HermesAgentEnvConfig(
            enabled_toolsets=["terminal", "file"],
            terminal_backend="local",
            max_agent_turns=8,
            group_size=4,
            use_wandb=False,
            tokenizer_name=local_tokenizer_path(),
            ensure_scores_are_not_same=False,
            max_token_length=4096,
            data_path_to_save_groups=None,
            total_steps=20,
            steps_per_eval=100,
            system_prompt=SYSTEM_PROMPT,
            wandb_name=cls.name,
        )
        servers = [
            APIServerConfig(
                base_url=DEFAULT_BASE_URL,
                model_name=DEFAULT_MODEL_NAME,
                api_key="x",
                server_type="openai",
                health_check=False,
                timeout=DEFAULT_TIMEOUT_S,
            )
        ]
        return config, servers

    # ------------------------------------------------------------------ data

    def _tasks_path(self) -> str:
        return self.config.dataset_name or str(DEFAULT_TASKS_PATH)

    @staticmethod
    def _item(task: TerminalTask) -> dict[str, Any]:
        # The solution stays out of the item: only the simulator reads it, from the file.
        return task.model_dump(exclude={"solution"})

    async def setup(self) -> None:
        path = self._tasks_path()
        tasks = await asyncio.to_thread(load_tasks, path)
        split = self.config.dataset_split
        self.train_items = [self._item(t) for t in tasks if t.split == split]
        self.eval_items = [self._item(t) for t in tasks if t.split == "eval"]
        if not self.train_items:
            raise ValueError(f"{path}: no tasks in split {split!r} (dataset_split); expected 'train' or 'eval' rows")
        self._order = list(range(len(self.train_items)))
        random.Random(0).shuffle(self._order)
        self._cursor = 0

    async def get_next_item(self) -> dict[str, Any]:
        if not self.train_items:
            raise RuntimeError("get_next_item() called before setup(); no tasks loaded")
        if self._cursor and self._cursor % len(self._order) == 0:
            random.Random(self._cursor).shuffle(self._order)  # a fresh, reproducible order each epoch
        item = self.train_items[self._order[self._cursor % len(self._order)]]
        self._cursor += 1
        return item

    def format_prompt(self, item: dict[str, Any]) -> str:
        return str(item["prompt"])

    # ------------------------------------------------------------------ rollout

    async def prepare_rollout(self, item: dict[str, Any], ctx: Any) -> None:
        for command in item.get("setup") or []:
            result = await run_in_sandbox(ctx, command, timeout=SETUP_TIMEOUT_S)
            if result.get("exit_code") != 0:
                raise RuntimeError(
                    f"setup of task {item.get('task_id')!r} failed (exit {result.get('exit_code')}) running "
                    f"{command!r}: {str(result.get('output') or result.get('error'))[:300]}"
                )

    async def compute_reward(self, item: dict[str, Any], result: Any, ctx: Any) -> float:
        task = TerminalTask(**{**item, "solution": []})
        reward = await score_check(task.check, ctx)
        self.reward_buffer.append(reward)
        return reward

    async def wandb_log(self, wandb_metrics: dict[str, Any] | None = None) -> None:
        wandb_metrics = {} if wandb_metrics is None else wandb_metrics
        if self.reward_buffer:
            n = len(self.reward_buffer)
            wandb_metrics["train/avg_reward"] = sum(self.reward_buffer) / n
            wandb_metrics["train/accuracy"] = sum(1 for r in self.reward_buffer if r >= 1.0) / n
            wandb_metrics["train/partial_match_rate"] = sum(1 for r in self.reward_buffer if 0 < r < 1) / n
            wandb_metrics["train/total_rollouts"] = n
        self.reward_buffer = []
        wandb_metrics.update({f"eval/{k}": v for k, v in self.last_eval_metrics.items()})
        await super().wandb_log(wandb_metrics)

    # ------------------------------------------------------------------ evaluation

    async def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        if not self.eval_items:
            await self.setup()
        start = time.time()
        tools = self._resolve_tools_for_group()
        # Eval must not pollute training buffers: snapshot and restore them.
        saved_rewards, saved_errors = list(self.reward_buffer), list(self._tool_error_buffer)
        semaphore = asyncio.Semaphore(EVAL_CONCURRENCY)

        async def one(item: dict[str, Any]) -> dict[str, Any]:
            async with semaphore:
                _group_tools.set(tools)
                _group_id.set(f"eval-{uuid.uuid4()}")
                scored, _ = await self.collect_trajectory(item)
            if scored is None:
                raise RuntimeError(f"collect_trajectory returned no result for task {item['task_id']!r}")
            messages = scored.get("messages") or []
            return {
                "task_id": item["task_id"],
                "prompt": item["prompt"],
                "reward": scored["scores"],
                "passed": scored["scores"] >= 1.0,
                "turns_used": sum(1 for m in messages if m.get("role") == "assistant"),
                "messages": messages,
            }

        try:
            samples = await asyncio.gather(*(one(item) for item in self.eval_items))
        finally:
            self.reward_buffer, self._tool_error_buffer = saved_rewards, saved_errors
        end = time.time()
        n = len(samples)
        passed = sum(1 for s in samples if s["passed"])
        metrics = {
            "eval/pass_rate": passed / n if n else 0.0,
            "eval/avg_reward": sum(s["reward"] for s in samples) / n if n else 0.0,
            "eval/partial_rate": sum(1 for s in samples if 0 < s["reward"] < 1) / n if n else 0.0,
            "eval/total_tasks": float(n),
            "eval/passed_tasks": float(passed),
            "eval/evaluation_time_seconds": end - start,
        }
        self.last_eval_metrics = {k.split("/", 1)[1]: v for k, v in metrics.items()}
        await self.evaluate_log(
            metrics,
            start_time=start,
            end_time=end,
            samples=list(samples),
            verbose=False,
            generation_parameters={
                "temperature": self.config.agent_temperature,
                "max_tokens": self.config.max_token_length,
                "max_agent_turns": self.config.max_agent_turns,
            },
        )
        return metrics


if __name__ == "__main__":
    TerminalTasksEnv.cli()
