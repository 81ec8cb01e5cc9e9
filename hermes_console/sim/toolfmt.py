"""Tool calls as model text (Phase 2), in the configured parser's format.

Uses ``environments.tool_call_parsers`` when it is importable and knows the
format; otherwise falls back to the Hermes ``<tool_call>{json}</tool_call>``
form, which is also what our local chat template writes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

_HERMES_RE = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def hermes_format(content: str | None, calls: list[dict[str, Any]]) -> str:
    parts = [content] if content else []
    for call in calls:
        args = call.get("arguments", {})
        # Malformed-JSON faults pass the arguments as a raw (broken) string.
        args_text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        parts.append(f'<tool_call>{{"name": {json.dumps(call["name"])}, "arguments": {args_text}}}</tool_call>')
    return "\n".join(parts)


@lru_cache(maxsize=16)
def _project_formatter(name: str) -> Callable[[str | None, list[dict[str, Any]]], str] | None:
    try:
        from environments.tool_call_parsers import get_parser
    except Exception:  # noqa: BLE001 - not written yet, or broken: keep the simulator usable
        return None
    try:
        parser = get_parser(name)
    except KeyError:
        return None
    fmt = getattr(parser, "format_tool_calls", None)
    return fmt if callable(fmt) else None


def format_tool_calls(content: str | None, calls: list[dict[str, Any]], parser_name: str = "hermes") -> str:
    """Render ``calls`` ([{"name", "arguments": dict}]) after ``content`` as model text."""
    if any(isinstance(c.get("arguments"), str) for c in calls):
        return hermes_format(content, calls)  # broken JSON cannot go through a real formatter
    fmt = _project_formatter(parser_name)
    if fmt is not None:
        try:
            return fmt(content, calls)
        except Exception:  # noqa: BLE001 - a format the parser cannot render falls back to hermes
            pass
    return hermes_format(content, calls)


def parse_tool_calls(text: str, parser_name: str = "hermes") -> tuple[str, list[dict[str, Any]]]:
    """Split assistant text into (content, [{"name", "arguments": dict | str}]).

    Used to read earlier assistant turns back out of a Phase 2 prompt.
    """
    try:
        from environments.tool_call_parsers import get_parser

        content, calls = get_parser(parser_name).parse(text)
        if calls:
            out: list[dict[str, Any]] = []
            for c in calls:
                fn = c.get("function", c)
                args: Any = fn.get("arguments", "{}")
                try:
                    args = json.loads(args) if isinstance(args, str) else args
                except ValueError:
                    pass
                out.append({"name": fn.get("name", ""), "arguments": args})
            return content or "", out
    except Exception:  # noqa: BLE001 - unparseable text falls back to the hermes regex
        pass
    found: list[dict[str, Any]] = []
    for m in _HERMES_RE.finditer(text):
        try:
            obj = json.loads(m.group(1))
            found.append({"name": str(obj.get("name", "")), "arguments": obj.get("arguments", {})})
        except (ValueError, AttributeError):
            found.append({"name": "", "arguments": m.group(1)})
    content = _HERMES_RE.sub("", text).strip()
    return content, found
