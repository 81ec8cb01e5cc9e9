"""``apply_patches()``: idempotent process-wide patches (the seed's entry point).

One patch, for CPU per LLM call (BENCHMARKS.md, P2): the openai client's
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
