"""A group is kept only if it is valid training data (issue 19, point 3): finite scores,
every sequence shorter than max_token_len (atroposlib's own rule), in process and serve mode.
Everything else is in dropped.jsonl with its reason, and every file is strict JSON."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.faults.bad_data_envs import BAD_REWARDS, NonFiniteRewardEnv, TinyMaxTokenLenEnv
from tests.faults.cli_stop_helpers import whole_lines
from tests.faults.faults_helpers import fault_spec, write_tasks
from tests.helpers.run_api import TrainerAPI, queued_groups, register_trainer

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


def test_serve_mode_never_sends_groups_over_the_trainers_max_token_len(sim, tmp_path, run):
    with TrainerAPI() as api:
        register_trainer(api.url, max_token_len=64, batch_size=8, steps=4)
        r = run(
            fault_spec(sim, tmp_path, "--env.rollout_server_url", api.url, total_steps=4, mode="serve", max_in_flight=2)
        )
        r.until(lambda s: s.accounting.dropped.get("too_long", 0) >= 2, 60, "2 over-long groups dropped")
        # atroposlib's run-api holds what it was sent: nothing.
        assert queued_groups(api.url) == 0
        assert r.state.accounting.completed == 0, r.state.accounting
        assert not whole_lines(Path(r.state.run.jsonl_path))
        r.stop_clean()
