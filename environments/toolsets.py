"""Toolsets: named groups of tools, possibly including other toolsets.

``resolve_toolset`` flattens a toolset to its sorted tool names. Tools that
cannot run here (web, browser, vision, image generation, mixture-of-agents)
are still listed so toolsets and distributions from the seed resolve; their
registry ``check_fn`` is False, so ``get_tool_definitions`` drops them.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Iterable
from typing import Any

logger = logging.getLogger(__name__)

ALL_ALIASES = ("all", "*")

BROWSER_TOOLS = [
    "browser_navigate",
    "browser_snapshot",
    "browser_click",
    "browser_type",
    "browser_scroll",
    "browser_back",
    "browser_press",
    "browser_close",
    "browser_get_images",
    "browser_vision",
    "browser_console",
    "browser_wait",
]

TOOLSETS: dict[str, dict[str, Any]] = {
    # ---- leaf toolsets
    "terminal": {"description": "Run shell commands in the rollout's sandbox", "tools": ["terminal"], "includes": []},
    "file": {
        "description": "Read, write, patch and search files in the sandbox workspace",
        "tools": ["read_file", "write_file", "patch", "search_files"],
        "includes": [],
    },
    "todo": {"description": "Task planning list (handled by the agent loop)", "tools": ["todo"], "includes": []},
    "web": {
        "description": "Web search and page extraction (offline: unavailable)",
        "tools": ["web_search", "web_extract"],
        "includes": [],
    },
    "search": {"description": "Web search only (offline: unavailable)", "tools": ["web_search"], "includes": []},
    "browser": {
        "description": "Browser automation (offline: unavailable)",
        "tools": BROWSER_TOOLS + ["web_search"],
        "includes": [],
    },
    "vision": {"description": "Image analysis (offline: unavailable)", "tools": ["vision_analyze"], "includes": []},
    "image_gen": {
        "description": "Image generation (offline: unavailable)",
        "tools": ["image_generate"],
        "includes": [],
    },
    "moa": {"description": "Mixture of agents (offline: unavailable)", "tools": ["mixture_of_agents"], "includes": []},
    "memory": {
        "description": "Persistent memory (not available in RL environments)",
        "tools": ["memory"],
        "includes": [],
    },
    "session_search": {
        "description": "Search past sessions (not available in RL environments)",
        "tools": ["session_search"],
        "includes": [],
    },
    "delegation": {
        "description": "Delegate to a sub-agent (not available in RL environments)",
        "tools": ["delegate_task"],
        "includes": [],
    },
    # ---- composites
    "debugging": {
        "description": "Terminal plus web and file tools for debugging",
        "tools": ["terminal"],
        "includes": ["web", "file"],
    },
    "safe": {
        "description": "No terminal or file access: web, vision, image generation",
        "tools": [],
        "includes": ["web", "vision", "image_gen"],
    },
    "hermes-rl": {
        "description": "What RL coding tasks need: terminal, files, todo",
        "tools": [],
        "includes": ["terminal", "file", "todo"],
    },
    "hermes-research": {
        "description": "Research: web, browser, vision, files, todo",
        "tools": [],
        "includes": ["web", "browser", "vision", "file", "todo"],
    },
    "hermes-cli": {
        "description": "Everything the interactive Hermes CLI offers",
        "tools": [],
        "includes": [
            "terminal",
            "file",
            "todo",
            "web",
            "browser",
            "vision",
            "image_gen",
            "moa",
            "memory",
            "session_search",
            "delegation",
        ],
    },
}

# Legacy names some configs still use.
ALIASES: dict[str, str] = {
    "terminal_tools": "terminal",
    "file_tools": "file",
    "web_tools": "web",
    "browser_tools": "browser",
    "vision_tools": "vision",
    "image_tools": "image_gen",
    "moa_tools": "moa",
    "todo_tools": "todo",
}

_BUILTIN = frozenset(TOOLSETS)
_lock = threading.Lock()
# Bumped whenever the table changes, so memoised tool definitions go stale.
generation = 0


def _canonical(name: str) -> str:
    return ALIASES.get(name, name)


def validate_toolset(name: str) -> bool:
    """True for ``all``/``*``, a known toolset, or a legacy alias."""
    if not isinstance(name, str):
        return False
    return name in ALL_ALIASES or _canonical(name) in TOOLSETS


def get_toolset(name: str) -> dict[str, Any] | None:
    """A copy of the toolset's entry, or None."""
    entry = TOOLSETS.get(_canonical(name))
    return copy.deepcopy(entry) if entry is not None else None


def resolve_toolset(name: str, visited: set[str] | None = None) -> list[str]:
    """Sorted tool names of ``name`` including everything it includes.

    Cycles and diamonds terminate: a toolset already visited contributes
    nothing the second time (its tools are already in the union)."""
    if name in ALL_ALIASES:
        return resolve_multiple_toolsets(list(TOOLSETS))
    name = _canonical(name)
    entry = TOOLSETS.get(name)
    if entry is None:
        return []
    if visited is None:
        visited = set()
    if name in visited:
        return []
    visited.add(name)
    tools: set[str] = set(entry.get("tools", []))
    for child in entry.get("includes", []):
        tools.update(resolve_toolset(child, visited))
    return sorted(tools)


def resolve_multiple_toolsets(names: Iterable[str]) -> list[str]:
    tools: set[str] = set()
    for name in names:
        tools.update(resolve_toolset(name))
    return sorted(tools)


def get_all_toolsets() -> dict[str, dict[str, Any]]:
    return copy.deepcopy(TOOLSETS)


def get_toolset_names() -> list[str]:
    return sorted(TOOLSETS)


def create_custom_toolset(
    name: str, description: str, tools: list[str] | None = None, includes: list[str] | None = None
) -> None:
    """Add (or replace) a toolset at runtime. Built-in toolsets cannot be replaced."""
    global generation
    if not isinstance(name, str) or not name or name in ALL_ALIASES:
        raise ValueError(f"invalid toolset name {name!r}: expected a non-empty string other than 'all'/'*'")
    if name in _BUILTIN:
        raise ValueError(f"toolset {name!r} is built in and cannot be redefined")
    with _lock:
        TOOLSETS[name] = {"description": description, "tools": list(tools or []), "includes": list(includes or [])}
        generation += 1


def delete_custom_toolset(name: str) -> bool:
    """Remove a toolset added with create_custom_toolset (built-ins stay)."""
    global generation
    if name in _BUILTIN:
        raise ValueError(f"toolset {name!r} is built in and cannot be deleted")
    with _lock:
        removed = TOOLSETS.pop(name, None) is not None
        if removed:
            generation += 1
    return removed


def get_toolset_info(name: str) -> dict[str, Any] | None:
    entry = TOOLSETS.get(_canonical(name))
    if entry is None:
        return None
    resolved = resolve_toolset(name)
    return {
        "name": _canonical(name),
        "description": entry.get("description", ""),
        "tools": list(entry.get("tools", [])),
        "includes": list(entry.get("includes", [])),
        "resolved_tools": resolved,
        "tool_count": len(resolved),
        "is_composite": bool(entry.get("includes")),
    }
