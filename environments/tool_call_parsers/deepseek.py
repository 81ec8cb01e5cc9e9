"""DeepSeek V3 and V3.1 tool-call tokens.

V3:   ``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>``
V3.1: ``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>``

Every call is read (upstream once kept only the first), payloads may span lines, and
a missing end token on the last call (truncated output) is tolerated.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
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

# The bars are U+FF5C (fullwidth) and the underscores U+2581, as in DeepSeek's vocabulary.
CALLS_BEGIN = "<\uff5ctool\u2581calls\u2581begin\uff5c>"
CALLS_END = "<\uff5ctool\u2581calls\u2581end\uff5c>"
CALL_BEGIN = "<\uff5ctool\u2581call\u2581begin\uff5c>"
CALL_END = "<\uff5ctool\u2581call\u2581end\uff5c>"
SEP = "<\uff5ctool\u2581sep\uff5c>"


def call_segments(text: str, start: int, found: Extraction) -> Iterator[str]:
    """The text of each call (between its begin token and its end, or the next call)."""
    section = text.find(CALLS_BEGIN, start)
    if section != -1:
        found.mark(section)
    begins, ends, section_ends = TagIndex(text, CALL_BEGIN), TagIndex(text, CALL_END), TagIndex(text, CALLS_END)
    position = begins.next(start)
    if position != -1:
        found.mark(position)
    while position != -1:
        body = position + len(CALL_BEGIN)
        stop = first_of(ends.next(body), begins.next(body), section_ends.next(body), default=len(text))
        yield text[body:stop]
        position = begins.next(stop)


def decode_arguments(raw: str) -> str:
    """JSON object text → canonical JSON string; empty means no arguments."""
    return dump_arguments(normalize_arguments(json.loads(raw) if raw.strip() else None))


def strip_fence(raw: str) -> str:
    """The JSON inside a ```json fence (closing fence optional when truncated)."""
    text = raw.strip()
    if text.startswith("```"):
        newline = text.find("\n")
        text = text[newline + 1 :] if newline != -1 else text[3:].removeprefix("json")
        if text.rstrip().endswith("```"):
            text = text.rstrip()[:-3]
    return text


@register_parser("deepseek_v3")
class DeepSeekV3ToolCallParser(ToolCallParser):
    name = "deepseek_v3"
    markers = (CALL_BEGIN,)

    def _extract(self, text: str, start: int) -> Extraction:
        found = Extraction()
        for number, segment in enumerate(call_segments(text, start, found), 1):
            if self.gave_up:
                break
            try:
                found.add(self._read_call(segment))
            except json.JSONDecodeError as exc:
                self.error(describe(number, f"invalid JSON arguments ({exc.msg})", segment))
            except ValueError as exc:
                self.error(describe(number, str(exc), segment))
        return found

    def _read_call(self, segment: str) -> FoundCall:
        _kind, sep, rest = segment.partition(SEP)
        if not sep:
            raise ValueError("tool call has no separator token between type and name")
        name, _newline, payload = rest.partition("\n")
        if not name.strip():
            raise ValueError("tool call has no function name")
        return FoundCall(name.strip(), decode_arguments(strip_fence(payload)))

    def format_tool_calls(self, content: str | None, calls: Sequence[Mapping[str, Any]]) -> str:
        checked = check_calls(calls)
        if not checked:
            return content or ""
        body = "".join(
            f"{CALL_BEGIN}function{SEP}{name}\n```json\n{json.dumps(args, ensure_ascii=False)}\n```{CALL_END}"
            for name, args in checked
        )
        return with_content(content, f"{CALLS_BEGIN}{body}{CALLS_END}", separator="")


@register_parser("deepseek_v31")
@register_parser("deepseek_v3_1")
class DeepSeekV31ToolCallParser(DeepSeekV3ToolCallParser):
    name = "deepseek_v3_1"

    def _read_call(self, segment: str) -> FoundCall:
        name, sep, payload = segment.partition(SEP)
        if not sep:
            raise ValueError("tool call has no separator token after the name")
        if not name.strip():
            raise ValueError("tool call has no function name")
        return FoundCall(name.strip(), decode_arguments(strip_fence(payload)))

    def format_tool_calls(self, content: str | None, calls: Sequence[Mapping[str, Any]]) -> str:
        checked = check_calls(calls)
        if not checked:
            return content or ""
        body = "".join(
            f"{CALL_BEGIN}{name}{SEP}{json.dumps(args, ensure_ascii=False)}{CALL_END}" for name, args in checked
        )
        return with_content(content, f"{CALLS_BEGIN}{body}{CALLS_END}", separator="")
