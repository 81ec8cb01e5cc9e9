"""Every write the runtime makes into atroposlib's BaseEnv goes through atropos_bridge, and
each attribute written is one that atroposlib 0.4.0 itself reads (its own source is the
oracle): an upgrade that renames one fails here instead of silently doing nothing."""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from hermes_console.runtime import atropos_bridge as bridge

RUNTIME = Path(bridge.__file__).parent


@pytest.fixture(scope="module")
def atropos_source() -> str:
    import atroposlib.envs.base as base

    return inspect.getsource(base)


def _env() -> Any:
    return SimpleNamespace(config=SimpleNamespace(data_dir_to_save_evals="orig", batch_size=-1, total_steps=-1))


async def _send(*args: Any) -> None:
    return None


# (what the bridge does, the attributes it must set with their values, how atroposlib reads them)
WRITES: dict[str, Any] = {
    "install_jsonl_writer": (
        lambda e: bridge.install_jsonl_writer(e, "W"),
        {"jsonl_writer": "W"},
        [r"self\.jsonl_writer\.write"],
    ),
    "install_server_manager": (lambda e: bridge.install_server_manager(e, "S"), {"server": "S"}, [r"self\.server\."]),
    "set_max_token_len": (lambda e: bridge.set_max_token_len(e, 77), {"max_token_len": 77}, [r"self\.max_token_len"]),
    "enter_process_mode": (
        lambda e: bridge.enter_process_mode(e, 5, 4),
        {"process_mode": True, "n_groups_to_process": 5, "group_size_to_process": 4},
        [r"env\.process_mode = True", r"self\.n_groups_to_process", r"self\.group_size_to_process"],
    ),
    "route_sends": (
        lambda e: bridge.route_sends(e, _send),
        {"_send_scored_data_to_api": _send},
        [r"self\._send_scored_data_to_api\("],
    ),
    "apply_registration": (
        lambda e: bridge.apply_registration(
            e, env_id=3, wandb_name="w", starting_step=9, checkpoint_dir="c", checkpoint_interval=2
        ),
        {"env_id": 3, "wandb_prepend": "w", "curr_step": 9, "checkpoint_dir": "c", "checkpoint_interval": 2},
        [
            r"self\.env_id",
            r"self\.wandb_prepend",
            r"self\.curr_step",
            r"self\.checkpoint_dir",
            r"self\.checkpoint_interval",
        ],
    ),
    "apply_trainer_status": (
        lambda e: bridge.apply_trainer_status(e, {"current_step": 4}, 4),
        {"status_dict": {"current_step": 4}, "curr_step": 4},
        [r"self\.status_dict\[", r"self\.curr_step"],
    ),
    "set_step": (lambda e: bridge.set_step(e, 12), {"curr_step": 12}, [r"self\.curr_step"]),
    "set_config_value": (
        lambda e: (bridge.set_config_value(e, "batch_size", 8), bridge.set_config_value(e, "total_steps", 20)),
        {"config.batch_size": 8, "config.total_steps": 20},
        [r"self\.config\.batch_size", r"self\.config\.total_steps"],
    ),
}


@pytest.mark.parametrize("name", sorted(WRITES))
def test_each_write_sets_what_atroposlib_reads(name: str, atropos_source: str) -> None:
    apply, expected, reads = WRITES[name]
    env = _env()
    apply(env)
    for attr, value in expected.items():
        obj = env
        for part in attr.split("."):
            obj = getattr(obj, part)
        assert obj == value, f"{name} did not set {attr}"
    missing = [pattern for pattern in reads if not re.search(pattern, atropos_source)]
    assert not missing, f"atroposlib no longer reads {missing}: {name} would write into nothing"


def test_evaluate_log_is_routed_and_put_back(atropos_source: str) -> None:
    from atroposlib.envs.base import BaseEnv

    params = inspect.signature(BaseEnv.evaluate_log).parameters
    assert {"metrics", "samples", "verbose"} <= set(params)  # what the capture relies on
    assert re.search(r"self\.config\.data_dir_to_save_evals", atropos_source)

    class Env:
        async def evaluate_log(self, metrics: dict[str, Any], **kwargs: Any) -> str:
            return "class"

    calls: list[Any] = []

    async def capture(metrics: dict[str, Any], **kwargs: Any) -> str:
        calls.append(metrics)
        return "captured"

    env = Env()
    original, restore = bridge.route_evaluate_log(env, capture)
    assert asyncio.run(env.evaluate_log({"a": 1})) == "captured" and calls == [{"a": 1}]
    assert asyncio.run(original({})) == "class"
    restore()
    assert "evaluate_log" not in vars(env) and asyncio.run(env.evaluate_log({})) == "class"

    own: Callable[..., Any] = capture
    env.evaluate_log = own  # type: ignore[method-assign]  # an instance that had its own: kept
    _, restore = bridge.route_evaluate_log(env, _send)
    restore()
    assert env.evaluate_log is own

    holder = _env()
    with bridge.evals_saved_to(holder, "/tmp/evals"):
        assert holder.config.data_dir_to_save_evals == "/tmp/evals"
    assert holder.config.data_dir_to_save_evals == "orig"


def test_the_runtime_writes_into_the_env_only_through_the_bridge() -> None:
    """No `env.<attr> = ...` (or `self.env.<attr> =`) left in the runtime outside the bridge."""
    pattern = re.compile(r"^\s*(?:self\.)?env\.(?:config\.)?[A-Za-z_]+\s*=[^=]", re.M)
    offenders = []
    for path in sorted(RUNTIME.glob("*.py")):
        if path.name == "atropos_bridge.py":
            continue
        for line in pattern.findall(path.read_text()):
            offenders.append(f"{path.name}: {line.strip()}")
    assert not offenders, offenders
