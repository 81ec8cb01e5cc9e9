"""A group is kept only if it is valid training data (issue 19, point 3): finite scores,
every sequence shorter than max_token_len (atroposlib's own rule), in process and serve mode.
Everything else is in dropped.jsonl with its reason, and every file is strict JSON."""

from __future__ import annotations

import asyncio
import math
import socket
import threading
import time
from pathlib import Path

import aiohttp
import pytest

from bad_data_envs import BAD_REWARDS, NonFiniteRewardEnv, TinyMaxTokenLenEnv
from cli_stop_helpers import whole_lines
from faults_helpers import fault_spec, write_tasks

pytestmark = pytest.mark.timeout(120)


def _json_lines(path: Path) -> list:
    import json

    return [json.loads(ln) for ln in whole_lines(path)]  # whole_lines: strict (no NaN/Infinity)


def test_non_finite_rewards_are_dropped_with_the_reason_never_written_as_nan(sim, tmp_path, run):
    tasks = write_tasks(tmp_path / "tasks.jsonl", [f"Run this command: echo {i}" for i in range(5)])
    r = run(fault_spec(sim, tmp_path, total_steps=5, tasks=tasks, env=NonFiniteRewardEnv))
    r.until_done_items(5, 60)
    r.assert_accounted()
    groups = Path(r.state.run.jsonl_path)
    kept = _json_lines(groups)
    dropped = _json_lines(groups.with_name("dropped.jsonl"))
    for group in kept:
        assert all(isinstance(s, (int, float)) and math.isfinite(s) for s in group["scores"]), group["scores"]
    reasons = {e.group_id: e.reason for e in r.of("item_dropped")}
    bad = [g for g, why in reasons.items() if why == "non_finite_score"]
    assert len(bad) == len(BAD_REWARDS), reasons
    assert sorted(d["group_id"] for d in dropped if d["reason"] == "non_finite_score") == sorted(bad)
    assert all("expected finite numbers" in d["detail"] for d in dropped if d["reason"] == "non_finite_score")
    assert len(kept) == r.state.accounting.completed == 5 - len(BAD_REWARDS) - (len(reasons) - len(bad))
    r.stop_clean()


def _too_long(tokens_per_seq: list, cap: int) -> bool:
    return any(n >= cap for n in tokens_per_seq)


def test_over_long_groups_are_dropped_not_kept(sim, tmp_path, run, monkeypatch):
    monkeypatch.setenv("FAULT_MAX_TOKEN_LEN", "64")
    r = run(fault_spec(sim, tmp_path, total_steps=2, env=TinyMaxTokenLenEnv))
    r.until_done_items(2, 60)
    r.assert_accounted()
    groups = Path(r.state.run.jsonl_path)
    # Independent check on what was written: no kept sequence reaches the cap.
    for group in _json_lines(groups):
        assert not _too_long([len(t) for t in group["tokens"]], 64)
    dropped = _json_lines(groups.with_name("dropped.jsonl"))
    assert [d["reason"] for d in dropped] == ["too_long", "too_long"], [d["reason"] for d in dropped]
    for d in dropped:
        assert _too_long([len(t) for t in d["group"]["tokens"]], 64)
    assert r.state.accounting.completed == 0 and r.state.accounting.dropped.get("too_long") == 2
    r.stop_clean()


async def _register_trainer(url: str, max_token_len: int, batch_size: int, steps: int) -> None:
    async with aiohttp.ClientSession() as session:
        await (await session.get(f"{url}/reset_data")).read()
        reg = {"wandb_group": "g", "wandb_project": "p", "batch_size": batch_size, "max_token_len": max_token_len,
               "checkpoint_dir": "", "save_checkpoint_interval": -1, "starting_step": 0, "num_steps": steps}
        await (await session.post(f"{url}/register", json=reg)).read()
        await (await session.get(f"{url}/batch")).read()  # a trainer has started: envs may register


async def _queued(url: str) -> int:
    async with aiohttp.ClientSession() as session:
        return int((await (await session.get(f"{url}/status")).json())["queue_size"])


class TrainerAPI:
    """atroposlib's own FastAPI trainer API (run-api), served by uvicorn on a free loopback port."""

    def __init__(self) -> None:
        import uvicorn
        from atroposlib.api.server import app

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="error", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, name="test-trainer-api")

    def __enter__(self) -> "TrainerAPI":
        self.thread.start()
        end = time.monotonic() + 30
        while not self.server.started and time.monotonic() < end:
            time.sleep(0.05)
        assert self.server.started
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


def test_serve_mode_never_sends_groups_over_the_trainers_max_token_len(sim, tmp_path, run):
    with TrainerAPI() as api:
        asyncio.run(_register_trainer(api.url, max_token_len=64, batch_size=8, steps=4))
        r = run(fault_spec(sim, tmp_path, "--env.rollout_server_url", api.url, total_steps=4, mode="serve",
                           max_in_flight=2))
        r.until(lambda s: s.accounting.dropped.get("too_long", 0) >= 2, 60, "2 over-long groups dropped")
        # atroposlib's run-api holds what it was sent: nothing.
        assert asyncio.run(_queued(api.url)) == 0
        assert r.state.accounting.completed == 0, r.state.accounting
        assert not whole_lines(Path(r.state.run.jsonl_path))
        r.stop_clean()
