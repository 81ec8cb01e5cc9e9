"""The runtime's writes into atroposlib's ``BaseEnv``, in one place.

atroposlib 0.4.0 keeps its run state in plain attributes of the env (and of its
config) that its own methods read: the jsonl writer, the server manager, the
trainer's step and limits, process-mode counters. The console drives the env
without atroposlib's CLI and trainer loop, so it has to set them itself. Every
such write goes through a function here, each named after what atroposlib does
with the attribute. ``tests/runtime/test_atropos_bridge.py`` checks, one by one,
that atroposlib still reads (or, for process mode, itself sets) every attribute
written here, so an atroposlib upgrade that renames one fails a test instead of
silently doing nothing.

(The env layer's own workarounds live in ``environments/atropos_compat.py``.)
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

# -------------------------------------------------------------------- outputs and servers


def install_jsonl_writer(env: Any, writer: Any) -> None:
    """``handle_send_to_api`` writes every kept group with ``self.jsonl_writer.write``."""
    env.jsonl_writer = writer


def install_server_manager(env: Any, manager: Any) -> None:
    """Rollouts ask ``self.server`` (a ServerManager) for completions."""
    env.server = manager


def set_max_token_len(env: Any, max_token_len: int) -> None:
    """The per-group length check reads ``self.max_token_len`` (-1: no trainer limit)."""
    env.max_token_len = max_token_len


def enter_process_mode(env: Any, total_steps: int, group_size: int) -> None:
    """What atroposlib's own ``process`` command sets before it collects groups."""
    env.process_mode = True
    env.n_groups_to_process = total_steps
    env.group_size_to_process = group_size


# -------------------------------------------------------------------- the trainer (serve mode)


def route_sends(env: Any, send: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]] | None:
    """Groups reach the trainer through ``self._send_scored_data_to_api``; returns the one replaced."""
    original = getattr(env, "_send_scored_data_to_api", None)
    env._send_scored_data_to_api = send
    return original


def apply_registration(
    env: Any, *, env_id: int, wandb_name: Any, starting_step: int, checkpoint_dir: Any, checkpoint_interval: Any
) -> None:
    """What ``register_env`` stores from run-api's reply (atroposlib reads each later)."""
    env.env_id = env_id
    env.wandb_prepend = wandb_name
    env.curr_step = starting_step
    env.checkpoint_dir = checkpoint_dir
    env.checkpoint_interval = checkpoint_interval


def apply_trainer_status(env: Any, status: dict[str, Any], current_step: int) -> None:
    """``derived_batch_size`` and friends read ``self.status_dict``; wandb logs at ``curr_step``."""
    env.status_dict = status
    env.curr_step = current_step


def set_step(env: Any, step: int) -> None:
    """``wandb_log`` logs at ``self.curr_step``."""
    env.curr_step = step


def set_config_value(env: Any, field: str, value: Any) -> None:
    """A config field atroposlib reads at run time (``batch_size``, ``total_steps``) set from the trainer."""
    setattr(env.config, field, value)


# -------------------------------------------------------------------- evaluation


def route_evaluate_log(
    env: Any, capture: Callable[..., Awaitable[Any]]
) -> tuple[Callable[..., Awaitable[Any]], Callable[[], None]]:
    """Env ``evaluate()`` implementations report through ``self.evaluate_log``: route it to
    ``capture``. Returns the original (to pass the call on) and a function that puts it back."""
    had_own = "evaluate_log" in vars(env)
    original = env.evaluate_log
    env.evaluate_log = capture

    def restore() -> None:
        if had_own:
            env.evaluate_log = original
        else:
            with contextlib.suppress(AttributeError):
                del env.evaluate_log

    return original, restore


@contextlib.contextmanager
def evals_saved_to(env: Any, path: str) -> Iterator[None]:
    """``evaluate_log`` writes its files under ``config.data_dir_to_save_evals``: point it at ``path``."""
    saved = env.config.data_dir_to_save_evals
    env.config.data_dir_to_save_evals = path
    try:
        yield
    finally:
        env.config.data_dir_to_save_evals = saved
