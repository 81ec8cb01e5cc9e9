"""Tool registry: one ToolSpec per tool, looked up by name.

Tools register themselves at import time (``environments.tools`` imports every
tool module). The registry only stores and dispatches; argument coercion and
the JSON-string contract live in ``environments.tools.__init__``.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

# handler(args, task_id, **ctx) -> dict (serialised for the caller) or str (already JSON)
ToolHandler = Callable[..., dict[str, Any] | str]
CheckFn = Callable[[], bool]


def _always() -> bool:
    return True


@dataclass
class ToolSpec:
    """Everything the runtime needs to know about one tool."""

    name: str
    toolset: str
    # OpenAI function schema: {"name", "description", "parameters": <JSON schema>}
    schema: dict[str, Any]
    handler: ToolHandler
    check_fn: CheckFn = field(default=_always)
    # Results above this size are persisted to the sandbox (see budget.py);
    # None defers to the budget config default.
    max_result_size_chars: float | None = None

    def __post_init__(self) -> None:
        if self.schema.get("name") != self.name:
            raise ValueError(f"tool {self.name!r}: schema name {self.schema.get('name')!r} must equal the tool name")
        params = self.schema.get("parameters")
        if not isinstance(params, dict) or params.get("type") != "object":
            raise ValueError(f"tool {self.name!r}: schema 'parameters' must be a JSON schema of type 'object'")

    def available(self) -> bool:
        """check_fn, with a raising check treated as unavailable."""
        try:
            return bool(self.check_fn())
        except Exception as exc:  # noqa: BLE001 - a broken check must not break definitions
            logger.debug("check_fn of %s raised %r; treating as unavailable", self.name, exc)
            return False

    def definition(self) -> dict[str, Any]:
        """OpenAI ``tools=[...]`` entry (a fresh deep copy each time)."""
        return {"type": "function", "function": json.loads(json.dumps(self.schema))}


class ToolRegistry:
    """Name -> ToolSpec with a generation counter that bumps on every change,
    so callers can memoise anything derived from the registry."""

    def __init__(self) -> None:
        self._tools: dict[str, ToolSpec] = {}
        self._lock = threading.Lock()
        self.generation = 0

    def register(self, spec: ToolSpec) -> ToolSpec:
        with self._lock:
            self._tools[spec.name] = spec
            self.generation += 1
        return spec

    def unregister(self, name: str) -> bool:
        with self._lock:
            removed = self._tools.pop(name, None) is not None
            if removed:
                self.generation += 1
        return removed

    def get(self, name: str) -> ToolSpec | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def get_definitions(self, names: list[str]) -> list[dict[str, Any]]:
        """Definitions for the named tools that exist and whose check passes, sorted by name."""
        out = []
        for name in sorted(set(names)):
            spec = self._tools.get(name)
            if spec is not None and spec.available():
                out.append(spec.definition())
        return out

    def dispatch(self, name: str, args: dict[str, Any], task_id: str | None = None, **ctx: Any) -> str:
        """Run a tool; always a JSON string. Unknown names and handler
        exceptions become ``{"error": ...}``."""
        spec = self._tools.get(name)
        if spec is None:
            return json.dumps({"error": f"Unknown tool: {name}"})
        try:
            result = spec.handler(args, task_id, **ctx)
        except Exception as exc:  # the model gets the error, the rollout survives
            logger.debug("tool %s raised", name, exc_info=True)
            return json.dumps({"error": f"Tool execution failed: {type(exc).__name__}: {exc}"})
        if isinstance(result, str):
            return result
        return json.dumps(result, ensure_ascii=False, default=str)


# The process-wide registry every tool module registers into.
registry = ToolRegistry()


def register(
    name: str,
    toolset: str,
    description: str,
    parameters: dict[str, Any],
    handler: ToolHandler,
    check_fn: CheckFn = _always,
    max_result_size_chars: float | None = None,
) -> ToolSpec:
    """Convenience wrapper building the OpenAI schema from its parts."""
    schema = {"name": name, "description": description, "parameters": parameters}
    return registry.register(
        ToolSpec(
            name=name,
            toolset=toolset,
            schema=schema,
            handler=handler,
            check_fn=check_fn,
            max_result_size_chars=max_result_size_chars,
        )
    )
