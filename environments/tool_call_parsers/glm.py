"""GLM-4.5 / GLM-4.7: ``<tool_call>NAME<arg_key>k</arg_key><arg_value>v</arg_value>…</tool_call>``.

GLM-4.5 puts newlines between the parts, GLM-4.7 does not; both parsers read both
layouts (upstream's glm45 regex was stricter for no benefit). Values are typed: JSON,
then a Python literal, then the string. Unclosed final tags (truncated output) are
tolerated.
"""

from __future__ import annotations

import re
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

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
_NAME = re.compile(r"\s*([^\s<>{}\[\]\"']+)\s*")
# A value may run to the end when the output was cut off inside it.
_PAIR = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)(?:</arg_value>|$)", re.DOTALL)


@register_parser("glm45")
class Glm45ToolCallParser(ToolCallParser):
    name = "glm45"
    markers = (OPEN,)
    separator = "\n"  # between the parts when rendering

    def _extract(self, text: str, start: int) -> Extraction:
        found = Extraction()
        opens, closes = TagIndex(text, OPEN), TagIndex(text, CLOSE)
        position = opens.next(start)
        number = 0
        while position != -1 and not self.gave_up:
            number += 1
            found.mark(position)
            body = position + len(OPEN)
            stop = first_of(closes.next(body), opens.next(body), default=len(text))
            segment = text[body:stop]
            try:
                found.add(self._read_call(segment))
            except ValueError as exc:
                self.error(describe(number, str(exc), segment))
            position = opens.next(stop)
        return found

    def _read_call(self, segment: str) -> FoundCall:
        first_key = segment.find("<arg_key>")
        head = segment if first_key == -1 else segment[:first_key]
        name = _NAME.fullmatch(head) if head.strip() else None
        if name is None:
            raise ValueError("tool call has no function name before its arguments")
        arguments: dict[str, Any] = {}
        for key, value in _PAIR.findall(segment[len(head) :]):
            if not key.strip():
                raise ValueError("argument with an empty <arg_key>")
            arguments[key.strip()] = typed_value(value)
        return FoundCall(name.group(1), dump_arguments(arguments))

    def format_tool_calls(self, content: str | None, calls: Sequence[Mapping[str, Any]]) -> str:
        sep = self.separator
        blocks = []
        for name, args in check_calls(calls):
            pairs = "".join(
                f"<arg_key>{key}</arg_key>{sep}<arg_value>{render_value(v)}</arg_value>{sep}" for key, v in args.items()
            )
            blocks.append(f"{OPEN}{name}{sep}{pairs}{CLOSE}")
        return with_content(content, "\n".join(blocks))


@register_parser("glm47")
class Glm47ToolCallParser(Glm45ToolCallParser):
    name = "glm47"
    separator = ""
