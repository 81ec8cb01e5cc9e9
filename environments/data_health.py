"""Per-rollout data checks: what the trainer gets from one rollout, and what is wrong with it.

One implementation for both sides: the env runs it on every rollout it scores (the
console's transcript shows the result), ``hermes-console check-data`` runs it on every
rollout of a groups JSONL (then adds its template checks). Cheap: one pass over the lists.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

NOT_TRAINED = -100

#: Kinds found here beyond check-data's own table (which has the rest).
EXTRA_KINDS: dict[str, str] = {
    "logprobs_missing": "Phase 2 rollout without one logprob per token",
    "turn_not_trained": "an assistant turn trains nothing",
    "placeholder": "placeholder tokens (not the chat template's): nothing real to train on",
}


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


_IS_TRAINED = NOT_TRAINED.__ne__  # int.__ne__: NotImplemented (not a bool) for a non-int mask


def _trained_flags(masks: Sequence[Any]) -> bytes | None:
    """One byte per position, 1 where the mask trains, made in C (a rollout has thousands of
    positions, and several scans of them ran per rollout in Python: ~0.3 ms of the CPU a
    rollout's end costs, when hundreds end together). None when a mask is not an int (a
    hand-edited JSONL): the callers then take the plain loop."""
    try:
        return bytes(map(_IS_TRAINED, masks))
    except TypeError:  # NotImplemented (a float, a string, None) is not a byte
        return None


def _runs_of(flags: bytes) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    start = flags.find(1)
    while start != -1:
        end = flags.find(0, start)
        if end == -1:
            end = len(flags)
        runs.append((start, end))
        start = flags.find(1, end)
    return runs


def trained_runs(masks: Sequence[Any]) -> list[tuple[int, int]]:
    """``[start, end)`` of each maximal run of trained (mask != -100) positions."""
    flags = _trained_flags(masks)
    if flags is not None:
        return _runs_of(flags)
    runs: list[tuple[int, int]] = []
    start = None
    for i, mask in enumerate(list(masks) + [NOT_TRAINED]):
        if mask != NOT_TRAINED and start is None:
            start = i
        elif mask == NOT_TRAINED and start is not None:
            runs.append((start, i))
            start = None
    return runs


def _first_mask_not_its_token(tokens: list[Any], masks: list[Any], runs: list[tuple[int, int]]) -> int | None:
    """The first trained position (``runs``) whose mask is not its token (None: every one is)."""
    for a, b in runs:
        if masks[a:b] != tokens[a:b]:  # compared in C; the position only when they differ
            return next(j for j in range(a, b) if masks[j] != tokens[j])
    return None


def rollout_problems(
    tokens: Any, masks: Any, logprobs: Any = None, *, expect_logprobs: bool = False
) -> list[tuple[str, str]]:
    """``(kind, detail)`` for each problem of one rollout's tokens/masks/logprobs; [] when
    healthy. Each mask is -100 or its token, something is trained, and logprobs (when given,
    or required by ``expect_logprobs`` in Phase 2) are 1.0 on masked positions and finite
    and <= 0 on trained ones."""
    return read_masks(tokens, masks, logprobs, expect_logprobs=expect_logprobs)[0]


def read_masks(
    tokens: Any, masks: Any, logprobs: Any = None, *, expect_logprobs: bool = False
) -> tuple[list[tuple[str, str]], list[tuple[int, int]]]:
    """:func:`rollout_problems` and the trained runs (:func:`trained_runs`; [] when the
    lists are unusable), from one reading of the masks."""
    if not isinstance(tokens, list) or not isinstance(masks, list):
        return [("missing_field", "tokens/masks are not lists")], []
    if len(tokens) != len(masks):
        return [("length_mismatch", f"{len(tokens)} tokens, {len(masks)} masks")], trained_runs(masks)
    out: list[tuple[str, str]] = []
    runs = trained_runs(masks)
    bad = _first_mask_not_its_token(tokens, masks, runs)
    if bad is not None:
        out.append(("mask_value", f"position {bad}: mask {masks[bad]!r}, token {tokens[bad]!r}"))
    if not runs:
        out.append(("nothing_trained", f"all {len(masks)} positions are -100"))
    if logprobs is None:
        if expect_logprobs:
            out.append(("logprobs_missing", f"no logprobs for {len(tokens)} tokens"))
        return out, runs
    if not isinstance(logprobs, list) or len(logprobs) != len(masks):
        size = len(logprobs) if isinstance(logprobs, list) else type(logprobs).__name__
        out.append(("length_mismatch", f"{len(masks)} masks, {size} logprobs"))
        return out, runs
    for j, (m, lp) in enumerate(zip(masks, logprobs)):
        if m == NOT_TRAINED and lp != 1.0:
            out.append(("logprob_masked", f"position {j}: logprob {lp!r} on a masked token"))
            break
    for j, (m, lp) in enumerate(zip(masks, logprobs)):
        if m != NOT_TRAINED and not (_is_number(lp) and math.isfinite(lp) and lp <= 0.0):
            out.append(("logprob_trained", f"position {j}: logprob {lp!r} on a trained token"))
            break
    return out, runs


def prompt_tokens(masks: Sequence[int]) -> int:
    """Masked positions before the first trained one: the system and user prompt (and the
    first assistant header). The other masked positions are tool results and role headers."""
    runs = trained_runs(masks)
    return runs[0][0] if runs else len(masks)
