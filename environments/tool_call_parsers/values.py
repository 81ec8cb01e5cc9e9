"""Typed parameter values for the XML-style formats (glm45/47, qwen3_coder).

Those formats carry every value as text; the model means ``42`` as a number and
``null`` as None. Reading tries JSON, then a Python literal, then keeps the string;
writing picks a spelling that reads back as the same value.
"""

from __future__ import annotations

import ast
import json
from typing import Any

# ast.literal_eval on huge input can exhaust the stack; no sane argument is this long.
_LITERAL_EVAL_LIMIT = 20_000


def typed_value(raw: str) -> Any:
    """An XML-style parameter value: JSON, else a Python literal, else the string itself."""
    candidate = raw.strip()
    if not candidate:
        return raw
    try:
        return json.loads(candidate)
    except (json.JSONDecodeError, RecursionError):
        pass
    if len(candidate) <= _LITERAL_EVAL_LIMIT:
        try:
            value = ast.literal_eval(candidate)
            json.dumps(value)  # sets, bytes, complex... are not tool arguments
            return value
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            pass
    return raw


def render_value(value: Any) -> str:
    """Inverse of ``typed_value`` for XML-style formats.

    A string goes out raw only when it would read back as the same string; anything
    else is JSON with ``<`` escaped so it cannot close a tag early.
    """
    if isinstance(value, str) and "<" not in value:
        back = typed_value(value)
        if isinstance(back, str) and back == value:
            return value
    return json.dumps(value, ensure_ascii=False).replace("<", "\\u003c")
