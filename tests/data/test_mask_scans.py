"""The per-rollout mask scans (made in C since session 24) against a plain reading written here.

``data_health`` reads a rollout's masks with ``bytes``/``find`` instead of Python loops; these
tests hold it to what the loops said, position by position: the trained runs, the first mask
that is not its token, nothing trained, prompt tokens, and the env's health figures built on them
(``HermesAgentBaseEnv._health``). Masks that are not ints (a hand-edited JSONL that
``check-data`` reads) take the loops, with the same answers.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from environments.atropos_compat import trained_runs as compat_trained_runs
from environments.data_health import prompt_tokens, read_masks, rollout_problems, trained_runs
from environments.hermes_base_env import HermesAgentBaseEnv

NOT = -100


def oracle_runs(masks: list[Any]) -> list[tuple[int, int]]:
    runs, start = [], None
    for i, m in enumerate(masks):
        if m != NOT and start is None:
            start = i
        if m == NOT and start is not None:
            runs.append((start, i))
            start = None
    if start is not None:
        runs.append((start, len(masks)))
    return runs


def oracle_first_bad(tokens: list[Any], masks: list[Any]) -> int | None:
    for j in range(len(masks)):
        if masks[j] != NOT and masks[j] != tokens[j]:
            return j
    return None


def random_rollout(rng: random.Random) -> tuple[list[Any], list[Any]]:
    n = rng.choice([0, 1, 2, 7, 50, 400])
    tokens = [rng.randrange(0, 50_000) for _ in range(n)]
    masks: list[Any] = []
    trained = rng.random() < 0.5
    for t in tokens:
        if rng.random() < 0.1:
            trained = not trained
        masks.append(t if trained else NOT)
    if masks and rng.random() < 0.3:  # a mask that is neither -100 nor its token
        j = rng.randrange(len(masks))
        masks[j] = tokens[j] + 1
    if masks and rng.random() < 0.2:  # a value only the loops can read
        masks[rng.randrange(len(masks))] = rng.choice([-100.0, 3.5, "7", None, True])
    return tokens, masks


@pytest.mark.parametrize("seed", range(6))
def test_scans_agree_with_the_plain_reading(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(400):
        tokens, masks = random_rollout(rng)
        runs = oracle_runs(masks)
        assert trained_runs(masks) == runs == compat_trained_runs(masks)
        assert prompt_tokens(masks) == (runs[0][0] if runs else len(masks))
        problems, got_runs = read_masks(tokens, masks)
        assert got_runs == runs
        assert problems == rollout_problems(tokens, masks)
        kinds = {k: d for k, d in problems}
        bad = oracle_first_bad(tokens, masks)
        if bad is None:
            assert "mask_value" not in kinds
        else:
            assert kinds["mask_value"].startswith(f"position {bad}:")
        assert ("nothing_trained" in kinds) == all(m == NOT for m in masks)


@pytest.mark.parametrize(
    ("masks", "runs"),
    [
        ([], []),
        ([NOT, NOT], []),
        ([1, 2, 3], [(0, 3)]),
        ([1, NOT, 3], [(0, 1), (2, 3)]),
        ([NOT, 5, 6], [(1, 3)]),
        ([0, NOT], [(0, 1)]),  # token id 0 trains (a zero byte is "not trained" only as a flag)
        ([NOT, -100.0, 7], [(2, 3)]),  # -100.0 == -100: not trained, read by the loop
        ([True, False], [(0, 2)]),
    ],
)
def test_edge_cases(masks: list[Any], runs: list[tuple[int, int]]) -> None:
    assert trained_runs(masks) == runs == oracle_runs(masks)


def test_health_figures_match_the_plain_reading() -> None:
    rng = random.Random(99)
    for _ in range(200):
        tokens, masks = random_rollout(rng)
        out = HermesAgentBaseEnv._health({"tokens": tokens, "masks": masks, "placeholder": False}, assistant_turns=3)
        runs = oracle_runs(masks)
        assert out["trainable_tokens"] == sum(1 for m in masks if m != NOT)
        assert out["trainable_turns"] == len(runs)
        assert out["run_tokens"] == [b - a for a, b in runs]
        assert out["prompt_tokens"] == next((j for j, m in enumerate(masks) if m != NOT), len(masks))
        assert ("turn_not_trained: " in " ".join(out["problems"])) == (len(runs) < 3)


def test_placeholder_rollouts_count_tokens_but_no_turns() -> None:
    out = HermesAgentBaseEnv._health({"tokens": [1, 2, 3], "masks": [NOT, 2, 3], "placeholder": True}, 1)
    assert (out["trainable_tokens"], out["trainable_turns"], out["prompt_tokens"]) == (2, 0, 1)
    assert any(p.startswith("placeholder: ") for p in out["problems"])
