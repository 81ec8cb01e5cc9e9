"""Kimi K2: ``<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX
<|tool_call_argument_begin|>{json}<|tool_call_end|>…<|tool_calls_section_end|>``.

The singular ``<|tool_call_section_begin|>`` spelling is accepted too. The call id is
the raw ``functions.NAME:IDX`` (the model refers back to it); the name is the part
after the last dot, before the ``:IDX``.
"""

from __future__ import annotations

import json
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
    normalize_arguments,
    with_content,
)
from environments.tool_call_parsers.registry import register_parser

SECTION_BEGINS = ("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>")
SECTION_ENDS = ("<|tool_calls_section_end|>", "<|tool_call_section_end|>")
CALL_BEGIN = "<|tool_call_begin|>"
ARG_BEGIN = "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"


def name_from_id(raw_id: str) -> str:
    """``functions.get_weather:0`` → ``get_weather``."""
    head = raw_id.rsplit(":", 1)[0] if ":" in raw_id else raw_id
    return head.rsplit(".", 1)[-1].strip()


@register_parser("kimi_k2")
class KimiK2ToolCallParser(ToolCallParser):
    name = "kimi_k2"
    markers = (CALL_BEGIN,)

    def _extract(self, text: str, start: int) -> Extraction:
        found = Extraction()
        for tag in SECTION_BEGINS:
            if (section := text.find(tag, start)) != -1:
                found.mark(section)
        begins = TagIndex(text, CALL_BEGIN)
        stop_tags = [begins, *(TagIndex(text, tag) for tag in (CALL_END, *SECTION_ENDS))]
        position = begins.next(start)
        if position != -1:
            found.mark(position)
        number = 0
        while position != -1 and not self.gave_up:
            number += 1
            body = position + len(CALL_BEGIN)
            stop = first_of(*(tags.next(body) for tags in stop_tags), default=len(text))
            segment = text[body:stop]
            try:
                found.add(self._read_call(segment))
            except json.JSONDecodeError as exc:
                self.error(describe(number, f"invalid JSON arguments ({exc.msg})", segment))
            except ValueError as exc:
                self.error(describe(number, str(exc), segment))
            position = begins.next(stop)
        return found

    def _read_call(self, segment: str) -> FoundCall:
        raw_id, sep, payload = segment.partition(ARG_BEGIN)
        if not sep:
            raise ValueError("tool call has no <|tool_call_argument_begin|> token")
        raw_id = raw_id.strip()
        name = name_from_id(raw_id)
        if not name:
            raise ValueError("tool call has no function name")
        raw = json.loads(payload) if payload.strip() else None
        return FoundCall(name, dump_arguments(normalize_arguments(raw)), call_id=raw_id)

    def format_tool_calls(self, content: str | None, calls: Sequence[Mapping[str, Any]]) -> str:
        checked = check_calls(calls)
        if not checked:
            return content or ""
        body = "".join(
            f"{CALL_BEGIN}functions.{name}:{index}{ARG_BEGIN}{json.dumps(args, ensure_ascii=False)}{CALL_END}"
            for index, (name, args) in enumerate(checked)
        )
        return with_content(content, f"{SECTION_BEGINS[0]}{body}{SECTION_ENDS[0]}", separator="")
