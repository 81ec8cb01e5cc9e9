"""The real terminal_tasks env with one hook made faulty. Used in-process (as classes)
and through the CLI (``tests/faults/fault_envs.py:SetupRaisesEnv``)."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from environments.terminal_tasks.env import TerminalTasksEnv


class RewardRaisesEnv(TerminalTasksEnv):
    """compute_reward raises for every other rollout."""

    name = "fault-reward-raises"

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.reward_calls = 0

    async def compute_reward(self, item: dict[str, Any], result: Any, ctx: Any) -> float:
        self.reward_calls += 1
        if self.reward_calls % 2 == 1:
            raise KeyError("verifier lost its expected_output")
        return await super().compute_reward(item, result, ctx)


class BlockingRewardEnv(TerminalTasksEnv):
    """compute_reward blocks the event loop synchronously (the classic sync-in-async bug)."""

    name = "fault-reward-blocks"
    block_s = 2.0
    # held(): the first reward blocks until the test releases it (instead of block_s), so a
    # test can check what keeps working *while* the loop is blocked, with no clock involved.
    entered: threading.Event | None = None
    release: threading.Event | None = None

    @classmethod
    def held(cls) -> type[BlockingRewardEnv]:
        return type("HeldRewardEnv", (cls,), {"entered": threading.Event(), "release": threading.Event()})

    async def compute_reward(self, item: dict[str, Any], result: Any, ctx: Any) -> float:
        if self.release is not None and self.entered is not None:
            self.entered.set()
            self.release.wait(60)  # deliberately blocking the loop: this is the fault
        else:
            time.sleep(self.block_s)  # deliberately blocking: this is the fault
        return await super().compute_reward(item, result, ctx)


class SetupRaisesEnv(TerminalTasksEnv):
    name = "fault-setup-raises"

    async def setup(self) -> None:
        raise RuntimeError("could not open the task database at /nonexistent/tasks.db")


class NextItemRaisesEnv(TerminalTasksEnv):
    """get_next_item works for a few items, then raises (a dataset shard goes bad)."""

    name = "fault-next-item-raises"
    good_items = int(os.environ.get("FAULT_GOOD_ITEMS", "3"))

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.calls = 0

    async def get_next_item(self) -> dict[str, Any]:
        self.calls += 1
        if self.calls > self.good_items:
            raise OSError(5, "Input/output error reading shard 7 of the dataset")
        return await super().get_next_item()
