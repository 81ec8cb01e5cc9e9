"""terminal_tasks, instrumented the same way for every runner it is compared under.

``TimedTerminalTasksEnv`` records when the first item was taken and when each
group was handed to ``handle_send_to_api``: throughput is groups over that span
whether the bare ``process_manager`` or the console's driver runs it, so setup,
imports and html generation are out of both measurements alike.
"""

from __future__ import annotations

import time
from typing import Any

from environments.terminal_tasks.env import TerminalTasksEnv


class TimedTerminalTasksEnv(TerminalTasksEnv):
    name = "terminal-tasks-timed"
    # Class-level so the bench can read them from outside the runtime thread.
    t_first_item: float | None = None
    sent_at: list[float] = []
    # The process's CPU (every thread: env, runtime, UI) at the same two moments
    cpu_first_item: float | None = None
    cpu_sent_at: list[float] = []

    @classmethod
    def reset_clock(cls) -> None:
        cls.t_first_item = None
        cls.sent_at = []
        cls.cpu_first_item = None
        cls.cpu_sent_at = []

    async def get_next_item(self) -> dict[str, Any]:
        if type(self).t_first_item is None:
            type(self).t_first_item = time.perf_counter()
            type(self).cpu_first_item = time.process_time()
        return await super().get_next_item()

    async def handle_send_to_api(self, *args: Any, **kwargs: Any) -> None:
        await super().handle_send_to_api(*args, **kwargs)
        type(self).sent_at.append(time.perf_counter())
        type(self).cpu_sent_at.append(time.process_time())

    @classmethod
    def groups_per_s(cls, n_groups: int) -> float | None:
        if cls.t_first_item is None or len(cls.sent_at) < n_groups:
            return None
        return n_groups / (cls.sent_at[n_groups - 1] - cls.t_first_item)

    @classmethod
    def cpu_ms_per_group(cls, n_groups: int) -> float | None:
        """This process's CPU per group over the same span as ``groups_per_s`` (the
        sandboxes' processes and the simulator are other processes, alike for every runner)."""
        if cls.cpu_first_item is None or len(cls.cpu_sent_at) < n_groups:
            return None
        return 1000 * (cls.cpu_sent_at[n_groups - 1] - cls.cpu_first_item) / n_groups


def env_overrides(
    tasks_file: str, out_jsonl: str, *, total_steps: int, group_size: int = 4, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Config values both runners use (the host's process-mode defaults, spelled out)."""
    values: dict[str, Any] = {
        "dataset_name": tasks_file,
        "data_path_to_save_groups": out_jsonl,
        "total_steps": total_steps,
        "group_size": group_size,
        "use_wandb": False,
        "ensure_scores_are_not_same": False,
        "include_messages": True,
    }
    values.update(extra or {})
    return values


def build_bare_env(cls: type, base_url: str, overrides: dict[str, Any]) -> Any:
    """The env as atroposlib's ``process`` CLI would build it (no console anywhere)."""
    from environments.atropos_compat import apply_offline_defaults, tame_atroposlib_logging

    apply_offline_defaults()
    tame_atroposlib_logging()
    config, servers = cls.config_init()
    config = config.model_copy(update=overrides)
    for s in servers:
        s.base_url = f"{base_url}/v1"
    env = cls(config=config, server_configs=servers, slurm=False, testing=False)
    env.process_mode = True
    env.n_groups_to_process = config.total_steps
    env.group_size_to_process = config.group_size
    return env
