"""An env whose rollouts create their sandbox late, in a tool thread (issue 19, point 8): a
stop that cancels the rollout first finds no sandbox to close; the thread creates it after.

Imported as ``late_sandbox_envs`` (tests/ has no packages; the name is unique in tests/)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from environments.terminal_tasks.env import TerminalTasksEnv

CREATE_AFTER_S = 1.5


class LateSandboxEnv(TerminalTasksEnv):
    name = "fault-late-sandbox"

    async def collect_trajectory(self, item: Any) -> Any:
        from environments import agent_loop
        from environments.sandboxes import get_sandbox

        task_id = f"late-{uuid.uuid4().hex[:8]}"

        def first_tool_call() -> None:  # like a terminal call whose sandbox creation is slow
            time.sleep(CREATE_AFTER_S)
            get_sandbox(task_id)

        await asyncio.get_running_loop().run_in_executor(agent_loop._tool_executor, first_tool_call)
        return await super().collect_trajectory(item)
