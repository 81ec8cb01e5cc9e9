"""Tool definitions for the model and the dispatcher the agent loop calls.

``get_tool_definitions`` turns toolset names into OpenAI tool schemas;
``handle_function_call`` coerces and validates arguments, runs the tool and
always answers with a JSON string (errors are ``{"error": "..."}``).
"""

from __future__ import annotations

import copy
import json
import logging
import threading
from collections.abc import Iterable
from typing import Any

from environments import toolsets as _toolsets
from environments.tools import files as _files  # noqa: F401

# Importing the tool modules registers the tools.
from environments.tools import offline as _offline  # noqa: F401
from environments.tools import terminal as _terminal  # noqa: F401
from environments.tools import todo as _todo  # noqa: F401
from environments.tools.coercion import coerce_and_validate
from environments.tools.offline import AGENT_LOOP_TOOLS
from environments.tools.registry import ToolRegistry, ToolSpec, register, registry

logger = logging.getLogger(__name__)

__all__ = [
    "AGENT_LOOP_TOOLS",
    "ToolRegistry",
    "ToolSpec",
    "get_tool_definitions",
    "handle_function_call",
    "register",
    "registry",
]

_CacheKey = tuple[tuple[str, ...] | None, tuple[str, ...] | None, int, int]
_definitions_cache: dict[_CacheKey, list[dict[str, Any]]] = {}
_cache_lock = threading.Lock()


def _as_names(value: Iterable[str] | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):  # a single toolset name passed bare
        return (value,)
    return tuple(value)


def _resolve(names: tuple[str, ...], role: str, quiet: bool) -> set[str]:
    tools: set[str] = set()
    for name in names:
        if not _toolsets.validate_toolset(name):
            logger.warning(
                "%s toolset %r is unknown and ignored; known toolsets: %s",
                role,
                name,
                ", ".join(_toolsets.get_toolset_names()),
            )
            continue
        tools.update(_toolsets.resolve_toolset(name))
    return tools


def get_tool_definitions(
    enabled_toolsets: list[str] | None = None,
    disabled_toolsets: list[str] | None = None,
    quiet_mode: bool = False,
) -> list[dict[str, Any]]:
    """OpenAI tool schemas for the enabled toolsets minus the disabled ones.

    ``None`` enables every toolset. Disabled toolsets are subtracted last, so
    disabling ``web`` also removes web tools a composite brought in. Tools
    whose ``check_fn`` fails (network tools offline) are dropped. The result is
    memoised; every call returns a fresh deep copy."""
    enabled = _as_names(enabled_toolsets)
    disabled = _as_names(disabled_toolsets)
    key: _CacheKey = (enabled, disabled, registry.generation, _toolsets.generation)
    with _cache_lock:
        cached = _definitions_cache.get(key)
    if cached is None:
        if enabled is None:
            if not quiet_mode:
                logger.warning("no enabled_toolsets given: enabling every toolset")
            tools = set(_toolsets.resolve_toolset("all"))
        else:
            tools = _resolve(enabled, "enabled", quiet_mode)
        if disabled:
            tools -= _resolve(disabled, "disabled", quiet_mode)
        cached = registry.get_definitions(sorted(tools))
        with _cache_lock:
            if len(_definitions_cache) > 256:  # many distinct combos: start over
                _definitions_cache.clear()
            _definitions_cache[key] = cached
    return copy.deepcopy(cached)


def _error(message: str) -> str:
    return json.dumps({"error": message}, ensure_ascii=False)


def handle_function_call(
    function_name: str,
    function_args: dict[str, Any],
    task_id: str | None = None,
    user_task: str | None = None,
    **kwargs: Any,
) -> str:
    """Run one tool call for ``task_id``. Always returns a JSON string."""
    try:
        if not isinstance(function_name, str) or not function_name:
            return _error(f"Invalid tool call: the tool name must be a non-empty string, got {function_name!r}")
        if function_name in AGENT_LOOP_TOOLS:
            return _error(f"{function_name} must be handled by the agent loop")
        spec = registry.get(function_name)
        if spec is None:
            return _error(f"Unknown tool: {function_name}")

        args = function_args
        if args is None:
            args = {}
        elif isinstance(args, str):
            # a JSON-object string is an unambiguous encoding of the arguments
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError as exc:
                return _error(
                    f"Invalid arguments for tool '{function_name}': not valid JSON ({exc}); send a JSON object"
                )
        if not isinstance(args, dict):
            return _error(
                f"Invalid arguments for tool '{function_name}': expected a JSON object of named arguments, "
                f"got {type(args).__name__} {json.dumps(args, default=str)[:120]}"
            )

        args, problem = coerce_and_validate(args, spec.schema["parameters"])
        if problem:
            return _error(f"Invalid arguments for tool '{function_name}': {problem}")
        return registry.dispatch(function_name, args, task_id, user_task=user_task, **kwargs)
    except Exception as exc:  # the contract is "always a JSON string"
        logger.debug("handle_function_call(%s) failed", function_name, exc_info=True)
        return _error(f"Error executing {function_name}: {type(exc).__name__}: {exc}")
