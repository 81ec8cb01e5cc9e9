"""TerminalBench2EvalEnv ("terminal-bench-2"): eval-only, each task verified by its own test.sh.

Per task: register the sandbox overrides (``cwd: /app``, the task image), unpack
``environment_tar`` into the cwd, run the agent, then in the verifier runner upload the tests
to ``/tests``, run ``/tests/test.sh`` with ``test_timeout`` and read
``/logs/verifier/reward.txt``. ``evaluate()`` runs the tasks with a concurrency limit and a
per-task timeout, streams one JSON line per finished task and reports the pass rate overall
and per category.

The default dataset of ``config_init`` is a tiny offline fixture (bwrap or local, no Docker):
``hermes-console run environments.benchmarks.terminalbench_2 --mode evaluate``. The Hub
dataset: ``--env.dataset_name NousResearch/terminal-bench-2`` (needs network and images).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from pydantic import Field

from environments import events
from environments.atropos_compat import DEFAULT_BASE_URL, DEFAULT_MODEL_NAME, DEFAULT_TIMEOUT_S
from environments.benchmarks.terminalbench_2.tasks import (
    FIXTURE_PATH,
    load_items,
    parse_reward,
    split_names,
    unpack_b64_tar,
)
from environments.hermes_base_env import APIServerConfig, HermesAgentBaseEnv, HermesAgentEnvConfig
from environments.task_overrides import clear_task_env_overrides, register_task_env_overrides
from environments.tokenizer import local_tokenizer_path
from environments.tool_context import ToolContext

logger = logging.getLogger(__name__)

TASK_CWD = "/app"
TESTS_DIR = "/tests"
LOGS_DIR = "/logs/verifier"
SETUP_TIMEOUT_S = 60
# Upstream skips these on Modal (nested virtualisation / very long runs).
DEFAULT_SKIP = ("qemu-startup", "qemu-alpine-ssh", "crack-7z-hash")


class TerminalBench2EvalConfig(HermesAgentEnvConfig):
    dataset_name: str | None = Field(
        default="NousResearch/terminal-bench-2", description="Hub dataset name or a local JSONL file / dataset dir"
    )
    test_timeout: int = Field(default=180, description="seconds test.sh may run")
    force_build: bool = Field(
        default=False, description="build the task image from its Dockerfile (not supported here)"
    )
    task_filter: str | None = Field(default=None, description="comma-separated task names to run (all if empty)")
    skip_tasks: str | None = Field(default=None, description="comma-separated task names to skip")
    task_timeout: int = Field(default=1800, description="seconds per task (agent + verifier)")
    max_concurrent_tasks: int = Field(default=8, description="tasks running at once")
    eval_concurrency: int = Field(default=0, description="if > 0, overrides max_concurrent_tasks")
    results_path: str | None = Field(
        default=None,
        description="streaming results JSONL (default: <data_dir_to_save_evals or logs>/samples_<timestamp>.jsonl)",
    )


def _default_backend() -> str:
    return "bwrap" if shutil.which("bwrap") else "local"


class TerminalBench2EvalEnv(HermesAgentBaseEnv):
    name = "terminal-bench-2"
    env_config_cls = TerminalBench2EvalConfig
    default_skip: tuple[str, ...] = DEFAULT_SKIP

    def __init__(
        self, config: TerminalBench2EvalConfig, server_configs: Any, slurm: bool = False, testing: bool = False
    ) -> None:
        super().__init__(config, server_configs, slurm=slurm, testing=testing)
        self.all_eval_items: list[dict[str, Any]] = []
        self.eval_items: list[dict[str, Any]] = []
        self._cursor = 0
        self.last_eval_metrics: dict[str, float] = {}
        self.results_file: Path | None = None
        self._results_lock = threading.Lock()

    @classmethod
    def config_init(cls) -> tuple[TerminalBench2EvalConfig, list[APIServerConfig]]:
        config = cls.env_config_cls(
            enabled_toolsets=["terminal", "file"],
            max_agent_turns=60,
            agent_temperature=0.6,
            terminal_backend=_default_backend(),  # upstream: modal (not runnable here)
            terminal_timeout=300,
            tool_pool_size=128,
            group_size=1,
            total_steps=1,
            steps_per_eval=1,
            use_wandb=False,
            tokenizer_name=local_tokenizer_path(),
            max_token_length=4096,
            data_path_to_save_groups=None,
            dataset_name=str(FIXTURE_PATH),  # offline fixture; pass a Hub name for the real benchmark
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

    def _select(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        wanted = set(split_names(self.config.task_filter))
        skipped = set(split_names(self.config.skip_tasks)) | set(self.default_skip)
        return [i for i in items if (not wanted or i["task_name"] in wanted) and i["task_name"] not in skipped]

    def _open_results(self) -> Path:
        if self.config.results_path:
            path = Path(self.config.results_path)
        else:
            root = Path(self.config.data_dir_to_save_evals or "logs")
            path = root / f"samples_{time.strftime('%Y%m%d_%H%M%S')}_{uuid.uuid4().hex[:6]}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
        return path

    async def setup(self) -> None:
        if self.config.force_build:
            raise ValueError(
                "force_build=True is not supported by hermes-console (task images are not built from "
                "their Dockerfiles here); use the prebuilt docker_image of each task (force_build=False)"
            )
        if self.config.terminal_backend == "local":
            # Tasks and test.sh use absolute paths (/app, /tests, /logs): on local they would hit the host.
            raise ValueError(
                "terminal_backend 'local' cannot run TerminalBench tasks (their absolute paths /app, "
                "/tests and /logs/verifier would be the host's); use terminal_backend bwrap or docker"
            )
        # A sandbox must outlive the longest task (the reaper would take it mid-task).
        lifetime = int(self.config.task_timeout) + 120
        self.config.terminal_lifetime = lifetime
        os.environ["TERMINAL_LIFETIME_SECONDS"] = str(lifetime)
        self._configure_sandboxes(self.config)
        source = self.config.dataset_name or str(FIXTURE_PATH)
        items = await asyncio.to_thread(load_items, source, self.config.dataset_split)
        self.all_eval_items = self._select(items)
        self.eval_items = self.all_eval_items  # the console's eval progress reads its length
        if not self.all_eval_items:
            raise ValueError(
                f"{source}: no tasks left after task_filter={self.config.task_filter!r} / "
                f"skip_tasks={self.config.skip_tasks!r}"
            )
        logger.info("%s: %d task(s) from %s", self.name, len(self.all_eval_items), source)

    # Training is not what this env is for (upstream stubs these too).
    async def get_next_item(self) -> dict[str, Any]:
        if not self.all_eval_items:
            raise RuntimeError("get_next_item() called before setup(); no tasks loaded")
        item = self.all_eval_items[self._cursor % len(self.all_eval_items)]
        self._cursor += 1
        return item

    async def collect_trajectories(self, item: Any) -> tuple[None, list[Any]]:
        return None, []

    async def score(self, rollout_group_data: Any) -> None:
        return None

    def format_prompt(self, item: dict[str, Any]) -> str:
        return str(item["instruction"])

    # ------------------------------------------------------------------ one task

    def _overrides(self, item: dict[str, Any]) -> dict[str, Any]:
        overrides: dict[str, Any] = {"cwd": TASK_CWD}
        image = item.get("docker_image")
        if image:
            overrides.update(docker_image=image, modal_image=image)
        return overrides

    def _unpack_environment(self, item: dict[str, Any], ctx: ToolContext) -> None:
        with tempfile.TemporaryDirectory(prefix="tb2-env-") as tmp:
            if not unpack_b64_tar(item.get("environment_tar"), Path(tmp), f"{item['task_name']}: environment_tar"):
                return
            for res in ctx.upload_dir(tmp, TASK_CWD):
                if res.get("exit_code") != 0:
                    raise RuntimeError(
                        f"{item['task_name']}: uploading the environment to {TASK_CWD} failed: "
                        f"{str(res.get('output'))[:300]}"
                    )

    def _run_tests(self, item: dict[str, Any], ctx: ToolContext) -> float:
        """The verifier (sync, in a worker thread): upload tests, run test.sh, read reward.txt."""
        name = item["task_name"]
        ctx.terminal(f"mkdir -p {TESTS_DIR} {LOGS_DIR}", timeout=SETUP_TIMEOUT_S)
        with tempfile.TemporaryDirectory(prefix="tb2-tests-") as tmp:
            tests = Path(tmp) / "tests"
            if unpack_b64_tar(item.get("tests_tar"), tests, f"{name}: tests_tar"):
                for res in ctx.upload_dir(str(tests), TESTS_DIR):
                    if res.get("exit_code") != 0:
                        raise RuntimeError(f"{name}: uploading tests failed: {str(res.get('output'))[:300]}")
            script = Path(tmp) / "test.sh"
            script.write_text(str(item["test_sh"]), encoding="utf-8")
            up = ctx.upload_file(str(script), f"{TESTS_DIR}/test.sh")
            if up.get("exit_code") != 0:
                raise RuntimeError(f"{name}: uploading test.sh failed: {str(up.get('output'))[:300]}")
            run = ctx.terminal(
                f"chmod +x {TESTS_DIR}/test.sh && bash {TESTS_DIR}/test.sh", timeout=int(self.config.test_timeout)
            )
            reward_file = Path(tmp) / "reward.txt"
            got = ctx.download_file(f"{LOGS_DIR}/reward.txt", str(reward_file))
            text = reward_file.read_text(encoding="utf-8", errors="replace") if got.get("success") else None
        return parse_reward(text, run.get("exit_code"))

    async def compute_reward(self, item: dict[str, Any], result: Any, ctx: ToolContext) -> float:
        return await asyncio.to_thread(self._run_tests, item, ctx)

    async def rollout_and_score_eval(self, item: dict[str, Any], task_id: str | None = None) -> dict[str, Any]:
        task_id = task_id or f"tb2-{uuid.uuid4().hex[:12]}"
        register_task_env_overrides(task_id, self._overrides(item))
        ctx = ToolContext(task_id)
        loop = asyncio.get_running_loop()
        out: dict[str, Any] = {
            "task_name": item["task_name"],
            "category": item.get("category") or "uncategorized",
            "passed": False,
            "reward": 0.0,
        }
        try:
            await asyncio.to_thread(self._unpack_environment, item, ctx)
            tools = self._resolve_tools_for_group()
            result, _phase = await self._run_agent(self._build_messages(item), tools, task_id)
            produced = result.turns_used > 0 and any(m.get("role") == "assistant" for m in result.messages)
            reward = float(await self.compute_reward(item, result, ctx)) if produced else 0.0
            out.update(
                reward=reward,
                passed=reward >= 1.0,
                turns_used=result.turns_used,
                finished_naturally=result.finished_naturally,
                messages=result.messages,
            )
            if result.error:
                out["error"] = str(result.error)[:500]
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - one broken task scores 0, never ends the evaluation
            logger.error("[%s] task failed: %s", item["task_name"], exc)
            out["error"] = f"{type(exc).__name__}: {exc}"[:500]
        finally:
            clear_task_env_overrides(task_id)
            # shielded: a timeout/cancel must still end the task's processes and sandbox
            await asyncio.shield(loop.run_in_executor(None, ctx.cleanup))
        return out

    # ------------------------------------------------------------------ evaluation

    def _save_result(self, record: dict[str, Any]) -> None:
        if self.results_file is None:
            return
        line = json.dumps(record, default=str)
        with self._results_lock, open(self.results_file, "a", encoding="utf-8") as fp:
            fp.write(line + "\n")
            fp.flush()

    async def _one(self, item: dict[str, Any], semaphore: asyncio.Semaphore) -> dict[str, Any]:
        async with semaphore:
            started = time.monotonic()
            task_id, group_id = f"tb2-{uuid.uuid4().hex[:12]}", f"eval-{item['task_name']}"
            if events.active:  # the console shows eval tasks like rollouts (progress, drill-down)
                events.emit(
                    events.RolloutStarted(rollout_id=task_id, group_id=group_id, item_summary=str(item["task_name"]))
                )
            try:
                record = await asyncio.wait_for(
                    self.rollout_and_score_eval(item, task_id), timeout=self.config.task_timeout
                )
            except TimeoutError:
                record = {
                    "task_name": item["task_name"],
                    "category": item.get("category") or "uncategorized",
                    "passed": False,
                    "reward": 0.0,
                    "timed_out": True,
                    "error": f"timeout ({self.config.task_timeout}s)",
                }
            record["duration_s"] = round(time.monotonic() - started, 3)
            if events.active:
                events.emit(
                    events.RolloutFinished(
                        rollout_id=task_id,
                        group_id=group_id,
                        reward=float(record["reward"]),
                        turns_used=int(record.get("turns_used") or 0),
                        finished_naturally=bool(record.get("finished_naturally")),
                        duration_s=record["duration_s"],
                        error=record.get("error"),
                    )
                )
        await asyncio.to_thread(self._save_result, record)
        return record

    @staticmethod
    def _metrics(samples: list[dict[str, Any]], seconds: float) -> dict[str, float]:
        n = len(samples)
        passed = sum(1 for s in samples if s["passed"])
        metrics = {
            "eval/pass_rate": passed / n if n else 0.0,
            "eval/total_tasks": float(n),
            "eval/passed_tasks": float(passed),
            "eval/timed_out_tasks": float(sum(1 for s in samples if s.get("timed_out"))),
            "eval/evaluation_time_seconds": seconds,
        }
        categories: dict[str, list[bool]] = {}
        for s in samples:
            categories.setdefault(str(s["category"]), []).append(bool(s["passed"]))
        for category, results in sorted(categories.items()):
            metrics[f"eval/pass_rate_{category}"] = sum(results) / len(results)
        return metrics

    async def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        if not self.all_eval_items:
            await self.setup()
        # one results file per evaluation (an env can be evaluated more than once in the console)
        self.results_file = self._open_results()
        logger.info("%s: results stream to %s", self.name, self.results_file)
        start = time.time()
        limit = self.config.eval_concurrency or self.config.max_concurrent_tasks
        semaphore = asyncio.Semaphore(max(1, int(limit)))
        tasks = [asyncio.ensure_future(self._one(item, semaphore)) for item in self.all_eval_items]
        try:
            samples = list(await asyncio.gather(*tasks))
        except BaseException:
            # cancelled (Ctrl+C / stop): end every task; each one's finally cleans its sandbox
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        end = time.time()
        metrics = self._metrics(samples, end - start)
        self.last_eval_metrics = {k.split("/", 1)[1]: v for k, v in metrics.items()}
        await self.evaluate_log(
            metrics,
            start_time=start,
            end_time=end,
            samples=samples,
            verbose=False,
            generation_parameters={
                "temperature": self.config.agent_temperature,
                "max_tokens": self.config.max_token_length,
                "max_agent_turns": self.config.max_agent_turns,
            },
        )
        return metrics

    async def wandb_log(self, wandb_metrics: dict[str, Any] | None = None) -> None:
        wandb_metrics = {} if wandb_metrics is None else wandb_metrics
        wandb_metrics.update({f"eval/{k}": v for k, v in self.last_eval_metrics.items()})
        await super().wandb_log(wandb_metrics)


if __name__ == "__main__":
    TerminalBench2EvalEnv.cli()
