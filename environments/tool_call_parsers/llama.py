"""Llama 3.x / 4 JSON tool calls: bare ``{"name": ..., "parameters"|"arguments": {...}}``
objects, optionally after ``<|python_tag|>``, several separated by ``;`` or whitespace.

Only objects with a name *and* arguments/parameters count as calls, so JSON that
merely appears in prose is left alone.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from environments.tool_call_parsers.base import (
    Extraction,
    ToolCallParser,
    call_from_object,
    check_calls,
    decode_json_at,
    describe,
    with_content,
)
from environments.tool_call_parsers.registry import register_parser

PYTHON_TAG = "<|python_tag|>"


@register_parser("llama4_json")
@register_parser("llama3_json")
class LlamaToolCallParser(ToolCallParser):
    name = "llama3_json"

    def _extract(self, text: str, start: int) -> Extraction:
        found = Extraction()
        tag = text.find(PYTHON_TAG, start)
        if tag != -1:
            found.mark(tag)  # after the tag everything is meant as calls
            start = tag + len(PYTHON_TAG)
        number = 0
        index = text.find("{", start)
        while index != -1:
            try:
                obj, end = decode_json_at(text, index)
            except json.JSONDecodeError as exc:
                if tag != -1 and not text[start:index].replace(";", "").strip():
                    # Right after the tag or a previous call: a broken call, not prose.
                    number += 1
                    self.error(describe(number, f"invalid JSON ({exc.msg})", text[index:]))
                index = text.find("{", index + 1)
                continue
            if isinstance(obj, dict) and ("arguments" in obj or "parameters" in obj):
                number += 1
                try:
                    found.add(call_from_object(obj))
                    found.mark(index)
                except ValueError as exc:
                    self.error(describe(number, str(exc), text[index:end]))
            start = end
            index = text.find("{", end)
        return found

    def format_tool_calls(self, content: str | None, calls: Sequence[Mapping[str, Any]]) -> str:
        objects = [json.dumps({"name": name, "parameters": args}, ensure_ascii=False) for name, args in check_calls(calls)]
        if not objects:
            return content or ""
        return with_content(content, PYTHON_TAG + "; ".join(objects), separator="")
