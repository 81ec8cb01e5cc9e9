"""Mistral: ``[TOOL_CALLS]`` followed by calls in one of two layouts.

* before tokenizer v11: a JSON array (or one object) of ``{"name", "arguments"}``;
* v11 and later: ``name{json}``, repeated (each call may carry its own marker;
  a ``[ARGS]`` token between name and JSON, as v13 writes it, is accepted).

Bad JSON in the array form falls back to scanning for call objects one by one
(``raw_decode``), so one broken entry does not lose the others. Unlike upstream, a
v11 call whose arguments are not JSON is dropped and reported, never passed on raw.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from environments.tool_call_parsers.base import (
    MAX_MALFORMED,
    Extraction,
    FoundCall,
    JsonTooDeep,
    ToolCallParser,
    call_from_object,
    check_calls,
    decode_json_at,
    describe,
    dump_arguments,
    normalize_arguments,
    object_starts,
    random_alnum,
    skip_whitespace,
    with_content,
)
from environments.tool_call_parsers.registry import register_parser

MARKER = "[TOOL_CALLS]"
# A v11 call head: the function name, optionally "[ARGS]", then the JSON object.
_V11_HEAD = re.compile(r"\s*([A-Za-z_][\w.\-]*)\s*(?:\[ARGS\])?\s*(?=\{)")


@register_parser("mistral")
class MistralToolCallParser(ToolCallParser):
    name = "mistral"
    markers = (MARKER,)

    def new_call_id(self) -> str:
        return random_alnum(9)  # Mistral's own id shape

    def _extract(self, text: str, start: int) -> Extraction:
        found = Extraction()
        first = text.find(MARKER, start)
        if first == -1:
            return found
        found.mark(first)
        # A cursor, not text.split(MARKER): "[TOOL_CALLS]" may sit inside a JSON string.
        position = first + len(MARKER)
        number = 0
        while not self.gave_up:
            position = skip_whitespace(text, position)
            if position >= len(text):
                break
            if text[position] in "[{":
                position, number = self._json_layout(text, position, found, number)
            elif head := _V11_HEAD.match(text, position):
                position, number = self._v11_call(text, head, found, number)
            else:
                number += 1
                self.error(
                    describe(number, "expected 'name{json}' or a JSON array after [TOOL_CALLS]", text[position:])
                )
                position = self._next_marker(text, position)
                continue
            position = skip_whitespace(text, position)
            if text.startswith(MARKER, position):
                position += len(MARKER)
            elif not _V11_HEAD.match(text, position):
                break  # trailing prose after the calls
        return found

    @staticmethod
    def _next_marker(text: str, position: int) -> int:
        """Where to resume after an unreadable call: past the next marker, else the end."""
        following = text.find(MARKER, position)
        return len(text) if following == -1 else following + len(MARKER)

    def _json_layout(self, text: str, position: int, found: Extraction, number: int) -> tuple[int, int]:
        try:
            value, end = decode_json_at(text, position)
        except json.JSONDecodeError as exc:
            stop = text.find(MARKER, position)
            stop = len(text) if stop == -1 else stop
            number = self._scan_objects(text[position:stop], found, number, f"invalid JSON ({exc.msg})")
            return stop, number
        for obj in value if isinstance(value, list) else [value]:
            number += 1
            try:
                found.add(call_from_object(obj))
            except ValueError as exc:
                self.error(describe(number, str(exc), json.dumps(obj, ensure_ascii=False)))
        return end, number

    def _scan_objects(self, segment: str, found: Extraction, number: int, problem: str) -> int:
        """Fallback: decode every ``{...}`` that parses on its own; keep the calls in it."""
        candidates = object_starts(segment)
        recovered, failures, end = 0, 0, 0
        for index in candidates:
            if index < end:
                continue  # inside an object already decoded
            try:
                obj, end = decode_json_at(segment, index)
            except JsonTooDeep:
                break
            except json.JSONDecodeError:
                failures += 1
                if failures >= MAX_MALFORMED:
                    break
                continue
            if isinstance(obj, dict) and "name" in obj:
                number += 1
                try:
                    found.add(call_from_object(obj))
                    recovered += 1
                except ValueError as exc:
                    self.error(describe(number, str(exc), segment[index:end]))
        self.error(describe(number + 1, f"{problem}; recovered {recovered} call(s) by scanning", segment))
        return number + 1

    def _v11_call(self, text: str, head: re.Match[str], found: Extraction, number: int) -> tuple[int, int]:
        number += 1
        body = head.end()
        try:
            raw, end = decode_json_at(text, body)
        except json.JSONDecodeError as exc:
            self.error(describe(number, f"invalid JSON arguments for {head.group(1)!r} ({exc.msg})", text[body:]))
            return self._next_marker(text, body), number
        try:
            found.add(FoundCall(head.group(1), dump_arguments(normalize_arguments(raw))))
        except ValueError as exc:
            self.error(describe(number, str(exc), text[body:end]))
        return end, number

    def format_tool_calls(self, content: str | None, calls: Sequence[Mapping[str, Any]]) -> str:
        # v11 layout, one marker per call, as current Mistral models write it.
        rendered = "".join(f"{MARKER}{name}{json.dumps(args, ensure_ascii=False)}" for name, args in check_calls(calls))
        return with_content(content, rendered, separator="")
