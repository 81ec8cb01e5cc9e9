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
from typing import Any, Mapping, Sequence

from environments.tool_call_parsers.base import (
    Extraction,
    FoundCall,
    ToolCallParser,
    call_from_object,
    check_calls,
    decode_json_at,
    describe,
    dump_arguments,
    normalize_arguments,
    random_alnum,
    skip_whitespace,
    with_content,
)
from environments.tool_call_parsers.registry import register_parser

MARKER = "[TOOL_CALLS]"
ARGS_TOKEN = "[ARGS]"
# A v11 call head: the function name, optionally "[ARGS]", then the JSON object.
_V11_HEAD = re.compile(r"\s*([A-Za-z_][\w.\-]*)\s*(?:\[ARGS\])?\s*(?=\{)")


@register_parser("mistral")
class MistralToolCallParser(ToolCallParser):
    name = "mistral"

    def new_call_id(self) -> str:
        return random_alnum(9)  # Mistral's own id shape

    def _extract(self, text: str, start: int) -> Extraction:
        found = Extraction()
        first = text.find(MARKER, start)
        if first == -1:
            return found
        found.mark(first)
        segments = text[first:].split(MARKER)[1:]
        counter = [0]
        for segment in segments:
            if segment.lstrip().startswith(("[", "{")):
                self._json_layout(segment, found, counter)
            else:
                self._v11_layout(segment, found, counter)
        return found

    def _json_layout(self, segment: str, found: Extraction, counter: list[int]) -> None:
        try:
            value, _ = decode_json_at(segment, 0)  # trailing text after the JSON is ignored
        except json.JSONDecodeError as exc:
            self._scan_objects(segment, found, counter, f"invalid JSON ({exc.msg})")
            return
        for obj in value if isinstance(value, list) else [value]:
            counter[0] += 1
            try:
                found.add(call_from_object(obj))
            except ValueError as exc:
                self.error(describe(counter[0], str(exc), json.dumps(obj, ensure_ascii=False)))

    def _scan_objects(self, segment: str, found: Extraction, counter: list[int], problem: str) -> None:
        """Fallback: decode every top-level-looking ``{...}`` that parses; keep the calls."""
        index = segment.find("{")
        recovered = 0
        while index != -1:
            try:
                obj, end = decode_json_at(segment, index)
            except json.JSONDecodeError:
                index = segment.find("{", index + 1)
                continue
            if isinstance(obj, dict) and "name" in obj:
                counter[0] += 1
                try:
                    found.add(call_from_object(obj))
                    recovered += 1
                except ValueError as exc:
                    self.error(describe(counter[0], str(exc), segment[index:end]))
            index = segment.find("{", end)
        self.error(describe(counter[0] + 1, f"{problem}; recovered {recovered} call(s) before/around it", segment))

    def _v11_layout(self, segment: str, found: Extraction, counter: list[int]) -> None:
        position = 0
        while position < len(segment) and (head := _V11_HEAD.match(segment, position)):
            counter[0] += 1
            body = head.end()
            try:
                raw, end = decode_json_at(segment, body)
                found.add(FoundCall(head.group(1), dump_arguments(normalize_arguments(raw))))
            except json.JSONDecodeError as exc:
                self.error(describe(counter[0], f"invalid JSON arguments for {head.group(1)!r} ({exc.msg})", segment[body:]))
                return  # the rest of the segment cannot be delimited reliably
            except ValueError as exc:
                self.error(describe(counter[0], str(exc), segment[body:end]))
            position = skip_whitespace(segment, end)
        if position == 0 and segment.strip():
            counter[0] += 1
            self.error(describe(counter[0], "expected 'name{json}' or a JSON array after [TOOL_CALLS]", segment))

    def format_tool_calls(self, content: str | None, calls: Sequence[Mapping[str, Any]]) -> str:
        # v11 layout, one marker per call, as current Mistral models write it.
        rendered = "".join(f"{MARKER}{name}{json.dumps(args, ensure_ascii=False)}" for name, args in check_calls(calls))
        return with_content(content, rendered, separator="")
