"""terminal_tasks envs that produce data a trainer cannot use (issue 19, point 3).

Imported as ``bad_data_envs`` (tests/ has no packages; the name is unique in tests/)."""

from __future__ import annotations

import math
import os
from typing import Any

from environments.terminal_tasks.env import TerminalTasksEnv

BAD_REWARDS = {"train-0": math.nan, "train-1": math.inf, "train-2": -math.inf}


class NonFiniteRewardEnv(TerminalTasksEnv):
    """Tasks train-0/1/2 score NaN / +inf / -inf; the others are scored normally."""

    name = "fault-non-finite-reward"

    async def compute_reward(self, item: dict[str, Any], result: Any, ctx: Any) -> float:
        bad = BAD_REWARDS.get(item.get("task_id", ""))
        if bad is not None:
            return bad
        return await super().compute_reward(item, result, ctx)


class TinyMaxTokenLenEnv(TerminalTasksEnv):
    """A trainer-like sequence cap far below any rollout (env var FAULT_MAX_TOKEN_LEN)."""

    name = "fault-tiny-max-token-len"

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.max_token_len = int(os.environ.get("FAULT_MAX_TOKEN_LEN", "64"))
