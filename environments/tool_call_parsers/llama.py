"""Llama 3.x / 4 JSON tool calls: bare ``{"name": ..., "parameters"|"arguments": {...}}``
objects, optionally after ``<|python_tag|>``, several separated by ``;`` or whitespace.

Only objects with a name *and* arguments/parameters count as calls, so JSON that
merely appears in prose is left alone.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from environments.tool_call_parsers.base import (
    MAX_MALFORMED,
    Extraction,
    JsonTooDeep,
    ToolCallParser,
    call_from_object,
    check_calls,
    decode_json_at,
    describe,
    object_starts,
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
        number, failures, end = 0, 0, start
        for index in object_starts(text, start):
            if index < end:
                continue  # inside an object already decoded
            try:
                obj, end_of_obj = decode_json_at(text, index)
            except JsonTooDeep:
                self.error(describe(number + 1, "JSON nested too deeply", text[index:]))
                break
            except json.JSONDecodeError as exc:
                if tag != -1 and not text[end:index].replace(";", "").strip():
                    # Right after the tag or a previous call: a broken call, not prose.
                    number += 1
                    self.error(describe(number, f"invalid JSON ({exc.msg})", text[index:]))
                failures += 1
                if failures >= MAX_MALFORMED or self.gave_up:
                    break
                continue
            end = end_of_obj
            if isinstance(obj, dict) and ("arguments" in obj or "parameters" in obj):
                number += 1
                found.mark(index)  # even a nameless call is not prose: keep it out of content
                try:
                    found.add(call_from_object(obj))
                except ValueError as exc:
                    self.error(describe(number, str(exc), text[index:end]))
        return found

    def format_tool_calls(self, content: str | None, calls: Sequence[Mapping[str, Any]]) -> str:
        objects = [
            json.dumps({"name": name, "parameters": args}, ensure_ascii=False) for name, args in check_calls(calls)
        ]
        if not objects:
            return content or ""
        return with_content(content, PYTHON_TAG + "; ".join(objects), separator="")
