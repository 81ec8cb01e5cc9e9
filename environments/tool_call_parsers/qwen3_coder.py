"""Qwen3-Coder XML calls::

    <tool_call>
    <function=NAME>
    <parameter=KEY>
    VALUE
    </parameter>
    </function>
    </tool_call>

Triggered by ``<function=``; the ``<tool_call>`` wrapper and every closing tag are
optional (truncated output). Values are typed: JSON (so ``null`` → None), then a
Python literal, then the string, after dropping the one newline the layout adds on
each side.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from environments.tool_call_parsers.base import (
    Extraction,
    FoundCall,
    TagIndex,
    ToolCallParser,
    check_calls,
    describe,
    dump_arguments,
    first_of,
    with_content,
)
from environments.tool_call_parsers.registry import register_parser
from environments.tool_call_parsers.values import render_value, typed_value

WRAPPER_OPEN = "<tool_call>"
FUNCTION_OPEN = "<function="
FUNCTION_CLOSE = "</function>"
_PARAMETER = re.compile(r"<parameter=([^>]*)>(.*?)(?=</parameter>|<parameter=|</function>|</tool_call>|$)", re.DOTALL)


def layout_value(raw: str) -> Any:
    """Undo the newline the layout puts after ``<parameter=k>`` and before its close."""
    raw = raw.removeprefix("\n").removesuffix("\n")
    return typed_value(raw)


@register_parser("qwen3_coder")
class Qwen3CoderToolCallParser(ToolCallParser):
    name = "qwen3_coder"
    markers = (FUNCTION_OPEN,)

    def new_call_id(self) -> str:
        return "call_" + uuid.uuid4().hex[:24]

    def _extract(self, text: str, start: int) -> Extraction:
        found = Extraction()
        position = text.find(FUNCTION_OPEN, start)
        if position == -1:
            return found
        wrapper = text.rfind(WRAPPER_OPEN, start, position)
        # The wrapper belongs to this call only if nothing but whitespace separates them.
        found.mark(wrapper if wrapper != -1 and not text[wrapper + len(WRAPPER_OPEN) : position].strip() else position)
        opens, closes = TagIndex(text, FUNCTION_OPEN), TagIndex(text, FUNCTION_CLOSE)
        number = 0
        while position != -1 and not self.gave_up:
            number += 1
            body = position + len(FUNCTION_OPEN)
            stop = first_of(closes.next(body), opens.next(body), default=len(text))
            segment = text[body:stop]
            try:
                found.add(self._read_call(segment))
            except ValueError as exc:
                self.error(describe(number, str(exc), FUNCTION_OPEN + segment))
            position = opens.next(stop)
        return found

    def _read_call(self, segment: str) -> FoundCall:
        name, closed, rest = segment.partition(">")
        name = name.strip()
        if not closed or not name or "<" in name:
            raise ValueError("tool call has no function name (expected <function=NAME>)")
        arguments: dict[str, Any] = {}
        for key, value in _PARAMETER.findall(rest):
            if not key.strip():
                raise ValueError("parameter with an empty name (expected <parameter=KEY>)")
            arguments[key.strip()] = layout_value(value)
        return FoundCall(name, dump_arguments(arguments))

    def format_tool_calls(self, content: str | None, calls: Sequence[Mapping[str, Any]]) -> str:
        blocks = []
        for name, args in check_calls(calls):
            params = "".join(f"<parameter={key}>\n{render_value(value)}\n</parameter>\n" for key, value in args.items())
            blocks.append(f"{WRAPPER_OPEN}\n{FUNCTION_OPEN}{name}>\n{params}{FUNCTION_CLOSE}\n</tool_call>")
        return with_content(content, "\n".join(blocks))
