"""Tool-result budget: keep huge tool results out of the model's context.

A result above its size threshold is saved in the sandbox workspace
(``.hermes-results/<tool_use_id>.txt``) and replaced by a short
``<persisted-output>`` preview telling the model how to read the rest. A turn
whose tool results together exceed ``turn_budget`` persists its largest
results first. ``read_file`` is never persisted: it has its own per-read
limit, and persisting it would send the model in a circle.
"""

from __future__ import annotations

import base64
import logging
import math
import posixpath
import re
import shlex
from typing import Any

from pydantic import BaseModel, Field

from environments.sandboxes.hostio import write_beneath
from environments.tools import sandbox_access
from environments.tools.registry import registry

logger = logging.getLogger(__name__)

RESULTS_DIR = ".hermes-results"
PERSISTED_TAG = "<persisted-output"
PINNED_THRESHOLDS: dict[str, float] = {"read_file": math.inf}


class BudgetConfig(BaseModel):
    """Size limits in characters."""

    default_result_size: int = Field(100_000, gt=0, description="per-result threshold unless overridden")
    turn_budget: int = Field(200_000, gt=0, description="all tool results of one turn together")
    preview_size: int = Field(1_500, ge=0, description="characters of a persisted result shown inline")
    tool_overrides: dict[str, float] = Field(default_factory=dict, description="tool name -> threshold")


DEFAULT_BUDGET = BudgetConfig()


def resolve_threshold(tool_name: str, config: BudgetConfig) -> float:
    """Pinned > config override > registry max_result_size_chars > config default."""
    if tool_name in PINNED_THRESHOLDS:
        return PINNED_THRESHOLDS[tool_name]
    if tool_name in config.tool_overrides:
        return float(config.tool_overrides[tool_name])
    spec = registry.get(tool_name)
    if spec is not None and spec.max_result_size_chars is not None:
        return float(spec.max_result_size_chars)
    return float(config.default_result_size)


def _safe_id(tool_use_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", str(tool_use_id or "result"))[:100] or "result"


def _store(content: str, tool_use_id: str, task_id: str | None) -> str | None:
    """Write ``content`` into the task's sandbox; return the path the model sees, or None."""
    if task_id is None:
        return None
    try:
        sandbox = sandbox_access.get_sandbox(task_id)
        name = f"{_safe_id(tool_use_id)}.txt"
        view_path = f"{str(sandbox.workspace).rstrip('/')}/{RESULTS_DIR}/{name}"
        if getattr(sandbox, "host_workspace", None) is not None:
            # The model owns the workspace and may have planted links there: never follow one.
            write_beneath(sandbox.host_workspace, f"{RESULTS_DIR}/{name}", content.encode("utf-8"))
        else:
            q = shlex.quote(view_path)
            result = sandbox.execute(
                f"mkdir -p {shlex.quote(posixpath.dirname(view_path))} && base64 -d > {q}",
                60,
                stdin_data=base64.b64encode(content.encode("utf-8")).decode("ascii"),
            )
            if result.exit_code != 0:
                return None
        return view_path
    except Exception as exc:  # noqa: BLE001 - fall back to inline truncation
        logger.debug("could not persist tool result %s: %r", tool_use_id, exc)
        return None


def _persisted(content: str, path: str, config: BudgetConfig) -> str:
    preview = content[: config.preview_size]
    return (
        f'<persisted-output path="{path}" chars="{len(content)}">\n'
        f"This result was {len(content)} characters, too large to show here; it was saved to {path}. "
        f"First {len(preview)} characters:\n{preview}\n"
        f'... Read the rest with read_file(path="{path}", offset=..., limit=...) or search it with search_files.\n'
        "</persisted-output>"
    )


def _inline(content: str, keep: int, reason: str) -> str:
    return (
        content[:keep]
        + f"\n... [truncated {len(content) - keep} of {len(content)} characters: {reason}; no sandbox to save the rest]"
    )


def maybe_persist_tool_result(
    content: str,
    tool_name: str,
    tool_use_id: str,
    task_id: str | None,
    config: BudgetConfig = DEFAULT_BUDGET,
    threshold: float | None = None,
) -> str:
    """Return ``content`` unchanged, or a ``<persisted-output>`` stand-in when it is too large."""
    if not isinstance(content, str):
        content = str(content)
    limit = resolve_threshold(tool_name, config) if threshold is None else float(threshold)
    if len(content) <= limit or content.startswith(PERSISTED_TAG):
        return content
    path = _store(content, tool_use_id, task_id)
    if path is None:
        keep = int(min(limit, len(content)))
        return _inline(content, keep, f"the {tool_name} result exceeded {int(limit)} characters")
    return _persisted(content, path, config)


def enforce_turn_budget(
    tool_messages: list[dict[str, Any]], task_id: str | None, config: BudgetConfig = DEFAULT_BUDGET
) -> list[dict[str, Any]]:
    """Persist the largest results of one turn until the turn fits ``turn_budget``.

    The message dicts are updated in place (so a slice of the conversation
    stays in sync) and the same list is returned."""

    def size() -> int:
        return sum(len(str(m.get("content") or "")) for m in tool_messages)

    while size() > config.turn_budget:
        candidates = [
            m
            for m in tool_messages
            if isinstance(m.get("content"), str)
            and not m["content"].startswith(PERSISTED_TAG)
            and m.get("name") not in PINNED_THRESHOLDS
            and len(m["content"]) > config.preview_size + 400  # persisting must actually shrink it
        ]
        if not candidates:
            break
        biggest = max(candidates, key=lambda m: len(m["content"]))
        content = biggest["content"]
        call_id = str(biggest.get("tool_call_id") or f"turn-{id(biggest):x}")
        path = _store(content, call_id, task_id)
        if path is None:
            biggest["content"] = _inline(
                content, config.preview_size, "the turn's tool results exceeded the turn budget"
            )
        else:
            biggest["content"] = _persisted(content, path, config)
    return tool_messages
