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


def rollout_problems(
    tokens: Any, masks: Any, logprobs: Any = None, *, expect_logprobs: bool = False
) -> list[tuple[str, str]]:
    """``(kind, detail)`` for each problem of one rollout's tokens/masks/logprobs; [] when
    healthy. Each mask is -100 or its token, something is trained, and logprobs (when given,
    or required by ``expect_logprobs`` in Phase 2) are 1.0 on masked positions and finite
    and <= 0 on trained ones."""
    if not isinstance(tokens, list) or not isinstance(masks, list):
        return [("missing_field", "tokens/masks are not lists")]
    if len(tokens) != len(masks):
        return [("length_mismatch", f"{len(tokens)} tokens, {len(masks)} masks")]
    out: list[tuple[str, str]] = []
    bad = next((j for j, (t, m) in enumerate(zip(tokens, masks)) if m != NOT_TRAINED and m != t), None)
    if bad is not None:
        out.append(("mask_value", f"position {bad}: mask {masks[bad]!r}, token {tokens[bad]!r}"))
    if all(m == NOT_TRAINED for m in masks):
        out.append(("nothing_trained", f"all {len(masks)} positions are -100"))
    if logprobs is None:
        if expect_logprobs:
            out.append(("logprobs_missing", f"no logprobs for {len(tokens)} tokens"))
        return out
    if not isinstance(logprobs, list) or len(logprobs) != len(masks):
        size = len(logprobs) if isinstance(logprobs, list) else type(logprobs).__name__
        out.append(("length_mismatch", f"{len(masks)} masks, {size} logprobs"))
        return out
    for j, (m, lp) in enumerate(zip(masks, logprobs)):
        if m == NOT_TRAINED and lp != 1.0:
            out.append(("logprob_masked", f"position {j}: logprob {lp!r} on a masked token"))
            break
    for j, (m, lp) in enumerate(zip(masks, logprobs)):
        if m != NOT_TRAINED and not (_is_number(lp) and math.isfinite(lp) and lp <= 0.0):
            out.append(("logprob_trained", f"position {j}: logprob {lp!r} on a trained token"))
            break
    return out


def prompt_tokens(masks: Sequence[int]) -> int:
    """Masked positions before the first trained one: the system and user prompt (and the
    first assistant header). The other masked positions are tool results and role headers."""
    return next((j for j, m in enumerate(masks) if m != NOT_TRAINED), len(masks))
