"""Tools that cannot run in hermes-console, registered honestly.

Network tools (web, browser, vision, image generation, mixture-of-agents) and
the agent-loop-only tools (memory, session_search, delegate_task) exist so
toolsets and distributions from the seed resolve. Their ``check_fn`` is False,
so they never reach the model's tool list; a direct call gets a clear error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from environments.tools.registry import register
from environments.toolsets import BROWSER_TOOLS

# Agent-loop tools: handle_function_call answers for these before dispatch.
AGENT_LOOP_TOOLS = frozenset({"todo", "memory", "session_search", "delegate_task"})


def _never() -> bool:
    return False


def _offline_handler(name: str) -> Callable[..., dict[str, Any]]:
    def handler(args: dict[str, Any], task_id: str | None, **_: Any) -> dict[str, Any]:
        return {"error": f"{name} is not available offline in hermes-console"}

    return handler


def _loop_handler(name: str) -> Callable[..., dict[str, Any]]:
    def handler(args: dict[str, Any], task_id: str | None, **_: Any) -> dict[str, Any]:
        return {"error": f"{name} must be handled by the agent loop"}

    return handler


def _obj(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required}


_STR = {"type": "string"}

_NETWORK_TOOLS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "web_search": ("web", "Search the web.", _obj({"query": _STR}, ["query"])),
    "web_extract": (
        "web",
        "Extract the text of web pages.",
        _obj({"urls": {"type": "array", "items": _STR}}, ["urls"]),
    ),
    "vision_analyze": (
        "vision",
        "Analyse an image.",
        _obj({"image_url": _STR, "question": _STR}, ["image_url"]),
    ),
    "image_generate": ("image_gen", "Generate an image from a prompt.", _obj({"prompt": _STR}, ["prompt"])),
    "mixture_of_agents": (
        "moa",
        "Ask several models and combine their answers.",
        _obj({"user_prompt": _STR}, ["user_prompt"]),
    ),
}

_BROWSER_PARAMS: dict[str, dict[str, Any]] = {
    "browser_navigate": _obj({"url": _STR}, ["url"]),
    "browser_click": _obj({"ref": _STR}, ["ref"]),
    "browser_type": _obj({"ref": _STR, "text": _STR}, ["ref", "text"]),
    "browser_scroll": _obj({"direction": {"type": "string", "enum": ["up", "down"]}}, ["direction"]),
    "browser_press": _obj({"key": _STR}, ["key"]),
    "browser_vision": _obj({"question": _STR}, ["question"]),
}

_LOOP_TOOLS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "memory": ("memory", "Persistent memory.", _obj({"action": _STR, "content": _STR}, [])),
    "session_search": ("session_search", "Search earlier sessions.", _obj({"query": _STR}, ["query"])),
    "delegate_task": ("delegation", "Delegate a sub-task to another agent.", _obj({"goal": _STR}, ["goal"])),
}

for _name, (_toolset, _desc, _params) in _NETWORK_TOOLS.items():
    register(_name, _toolset, _desc, _params, _offline_handler(_name), check_fn=_never)

for _name in BROWSER_TOOLS:
    register(
        _name,
        "browser",
        f"Browser action {_name.removeprefix('browser_')}.",
        _BROWSER_PARAMS.get(_name, _obj({}, [])),
        _offline_handler(_name),
        check_fn=_never,
    )

for _name, (_toolset, _desc, _params) in _LOOP_TOOLS.items():
    register(_name, _toolset, _desc, _params, _loop_handler(_name), check_fn=_never)
