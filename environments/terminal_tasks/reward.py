"""Verify a task inside the rollout's sandbox: 1.0 exact, 0.5 partial, 0.0 otherwise."""

from __future__ import annotations

import asyncio
import shlex
from typing import Any

from environments.terminal_tasks.tasks import TaskCheck

CHECK_TIMEOUT_S = 30


async def run_in_sandbox(ctx: Any, command: str, timeout: int = CHECK_TIMEOUT_S) -> dict[str, Any]:
    """``ctx.a_terminal`` when the context has async twins, else the sync call in a thread."""
    a_terminal = getattr(ctx, "a_terminal", None)
    if a_terminal is not None:
        return await a_terminal(command, timeout=timeout)
    return await asyncio.to_thread(ctx.terminal, command, timeout)


def _output(result: dict[str, Any]) -> str:
    return str(result.get("output") or "").strip()


def _ok(result: dict[str, Any]) -> bool:
    return result.get("exit_code") == 0


async def read_in_sandbox(ctx: Any, path: str) -> str | None:
    """The file's text, or None when it is missing or unreadable. ``ctx.a_read_text`` where the
    context has it (the text as stored, without a process where the workspace is a host dir);
    else ``cat`` through the context's terminal (the output the model's tools would show)."""
    a_read_text = getattr(ctx, "a_read_text", None)
    if a_read_text is not None:
        read = await a_read_text(path)
        return None if "content" not in read else str(read["content"])
    result = await run_in_sandbox(ctx, f"cat -- {shlex.quote(path)}")
    return str(result.get("output") or "") if _ok(result) else None


async def score_check(check: TaskCheck, ctx: Any) -> float:
    if check.type in ("file_equals", "file_contains"):
        text = await read_in_sandbox(ctx, check.path or "")
        if text is None:
            return 0.0  # missing or unreadable file
        got, expected = text.strip(), (check.expected or "").strip()
        if check.type == "file_equals":
            if got == expected:
                return 1.0
            return 0.5 if expected and expected in got else 0.0
        if expected in got:
            return 1.0
        return 0.5 if expected.lower() in got.lower() else 0.0
    result = await run_in_sandbox(ctx, check.command or "")
    if check.type == "command_exit_zero":
        return 1.0 if _ok(result) else 0.0
    got, expected = _output(result), (check.expected or "").strip()
    if got == expected:
        return 1.0
    return 0.5 if expected and expected in got else 0.0
