"""Hermes / Qwen: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from environments.tool_call_parsers.base import (
    Extraction,
    TagIndex,
    ToolCallParser,
    call_from_object,
    check_calls,
    decode_json_at,
    describe,
    first_of,
    with_content,
)
from environments.tool_call_parsers.registry import register_parser


@register_parser("hermes")
class HermesToolCallParser(ToolCallParser):
    """JSON payloads between tags; a missing close tag on the last call is tolerated
    (truncated output). Entries without a name and bad JSON go to ``last_errors``."""

    name = "hermes"
    open_tag: ClassVar[str] = "<tool_call>"
    close_tag: ClassVar[str] = "</tool_call>"
    markers = ("<tool_call>",)

    def _extract(self, text: str, start: int) -> Extraction:
        found = Extraction()
        opens, closes = TagIndex(text, self.open_tag), TagIndex(text, self.close_tag)
        position = start
        number = 0
        while (opened := opens.next(position)) != -1 and not self.gave_up:
            number += 1
            found.mark(opened)
            body = opened + len(self.open_tag)
            close, next_open = closes.next(body), opens.next(body)
            # The payload ends at the close tag, or the next call, or the end (truncated).
            limit = first_of(close, next_open, default=len(text))
            try:
                # raw_decode, not a regex: a "</tool_call>" inside a JSON string is fine.
                obj, end = decode_json_at(text, body)
            except json.JSONDecodeError as exc:
                self.error(describe(number, f"invalid JSON ({exc.msg})", text[body:limit]))
                position = limit + len(self.close_tag) if limit == close else limit
                continue
            try:
                found.add(call_from_object(obj))
            except ValueError as exc:
                self.error(describe(number, str(exc), text[body:end]))
            close, next_open = closes.next(end), opens.next(end)
            if close != -1 and (next_open == -1 or close < next_open):
                position = close + len(self.close_tag)
            else:
                position = end
        return found

    def format_tool_calls(self, content: str | None, calls: Sequence[Mapping[str, Any]]) -> str:
        blocks = [
            f"{self.open_tag}\n{json.dumps({'name': name, 'arguments': args}, ensure_ascii=False)}\n{self.close_tag}"
            for name, args in check_calls(calls)
        ]
        return with_content(content, "\n".join(blocks))


@register_parser("qwen")
class QwenToolCallParser(HermesToolCallParser):
    """Qwen writes the Hermes format; its own class and name, as upstream had."""

    name = "qwen"
