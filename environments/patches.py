"""Every patch of the openai module and of atroposlib server instances, in one place.

``apply_patches()`` (the seed's entry point) applies the process-wide one; the console's
server instrumentation (``hermes_console/runtime/servers.py``, ``health.py``) writes into
server instances only through the functions at the end of this module, each named after
what atroposlib (or openai) does with what it writes. ``tests/environments/test_patches.py``
checks each against the patched library's own source and behaviour, so an upgrade that
renames a method or attribute fails a test instead of silently patching nothing.
(BaseEnv attribute writes live in ``hermes_console/runtime/atropos_bridge.py``; the env
layer's trap workarounds in ``environments/atropos_compat.py``.)

The process-wide patch, for CPU per LLM call (BENCHMARKS.md, P2): the openai client's
``AsyncCompletions.create`` walks every message and tool schema through
``async_maybe_transform(body, CompletionCreateParams)`` -- TypedDict
introspection costing ~1-10 ms per request, the largest CPU cost of a rollout's
chat call. On plain JSON values the walk changes nothing but dropping
top-level NOT_GIVEN/omit values: chat params declare no key aliases and its
formats apply to datetimes and file objects only. So when the body below the
top level is plain JSON we drop those values ourselves and skip the walk (same
request bytes); anything else takes the original path. Opt out with
``HERMES_OPENAI_FULL_TRANSFORM=1``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

_applied = False
_original_transform: Callable[..., Any] | None = None
_SCALARS = (str, int, float, bool, type(None))
OPT_OUT_VAR = "HERMES_OPENAI_FULL_TRANSFORM"


def plain_json(value: Any, depth: int = 0) -> bool:
    """True when ``value`` is made only of JSON types (lists, str-keyed dicts, scalars)."""
    if isinstance(value, _SCALARS):
        return True
    if depth > 64:
        return False
    if type(value) is list:
        return all(plain_json(v, depth + 1) for v in value)
    if type(value) is dict:
        return all(type(k) is str and plain_json(v, depth + 1) for k, v in value.items())
    return False


def enable_lean_chat_transform() -> bool:
    """Install the fast path; False if the openai layout is not the one we know."""
    global _original_transform
    if _original_transform is not None:
        return True
    try:
        import openai.resources.chat.completions.completions as chat_module
        from openai._utils import is_given
    except ImportError:
        return False
    original = getattr(chat_module, "async_maybe_transform", None)
    if original is None:
        return False

    async def lean_transform(data: Any, expected_type: Any, **kwargs: Any) -> Any:
        if type(data) is dict:
            given = {k: v for k, v in data.items() if is_given(v)}
            if plain_json(given):
                return given
        return await original(data, expected_type, **kwargs)

    chat_module.async_maybe_transform = lean_transform
    _original_transform = original
    return True


def disable_lean_chat_transform() -> None:
    """Put the openai client's own transform back (benchmarks compare both)."""
    global _original_transform
    if _original_transform is None:
        return
    import openai.resources.chat.completions.completions as chat_module

    chat_module.async_maybe_transform = _original_transform
    _original_transform = None


def lean_chat_transform_enabled() -> bool:
    return _original_transform is not None


def apply_patches() -> None:
    """Apply the patches once; safe to call any number of times."""
    global _applied
    if _applied:
        return
    _applied = True
    if os.environ.get(OPT_OUT_VAR, "").strip() not in ("", "0"):
        logger.debug("apply_patches(): %s set, openai request transform left as is", OPT_OUT_VAR)
        return
    if not enable_lean_chat_transform():
        logger.debug("apply_patches(): openai layout not recognised; nothing patched")


def patches_applied() -> bool:
    return _applied


# ---------------------------------------------------------------------------- server instances
# Instance attributes shadow the class's, so atroposlib itself is never edited and each
# ServerManager's servers are patched on their own.


def replace_server_method(server: Any, name: str, method: Callable[..., Any]) -> bool:
    """Shadow ``server.<name>`` on this instance: atroposlib's ``APIServer`` calls its public
    methods and their ``_*_wrapper`` attempts through ``self``, ServerManager calls the public
    ones on the server it picked. False (nothing written) if the server has no such method."""
    if not callable(getattr(server, name, None)):
        return False
    setattr(server, name, method)
    return True


def replace_client_transport(server: Any, wrap: Callable[[Any], Any]) -> bool:
    """``OpenAIServer.openai`` is an ``AsyncOpenAI`` whose httpx client sends every request
    through ``_client._transport``: replace it with ``wrap(transport)``. False if absent."""
    http = getattr(getattr(server, "openai", None), "_client", None)
    transport = getattr(http, "_transport", None)
    if http is None or transport is None:
        return False
    http._transport = wrap(transport)
    return True


def tag_server(server: Any, mark: str, value: Any) -> None:
    """Our own bookkeeping on a server instance (counters, health), under a ``_hermes_*`` name."""
    if not mark.startswith("_hermes_"):
        raise ValueError(f"tag_server: mark {mark!r} must start with '_hermes_' (never an atroposlib attribute)")
    setattr(server, mark, value)


def set_server_healthy(server: Any, healthy: bool) -> None:
    """``APIServer`` waits while ``server_healthy`` is False; ServerManager routes around it."""
    server.server_healthy = healthy


def set_attempt_hooks(server: Any, on_error: Callable[[str], None], max_reply_bytes: int) -> bool:
    """The lean chat path (``environments.lean_chat.LeanOpenAIServer``) reports each failed attempt
    to ``on_error`` and caps replies at ``max_reply_bytes``. False for other servers."""
    if not hasattr(server, "on_attempt_error"):
        return False
    server.on_attempt_error = on_error
    server.max_reply_bytes = max_reply_bytes
    return True


def set_manager_tool_parser(manager: Any, parser: str) -> None:
    """ServerManager hands ``tool_parser`` to the ManagedServers it makes (Phase 2 tool calls)."""
    manager.tool_parser = parser
