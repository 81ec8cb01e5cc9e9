"""The parser interface every model family implements, plus shared helpers.

A parser turns raw model text into OpenAI-style tool calls and back:

* ``parse(text) -> (content, calls)``. No calls → ``(text, None)``; calls found →
  ``(text before the first call marker, stripped, or None if empty, [calls])``;
  any internal exception → ``(text, None)``. Each call is a ``ToolCall``: an openai
  ``ChatCompletionMessageToolCall`` (``call.function.name``, as upstream returned)
  that also reads like the OpenAI dict (``call["function"]["name"]``, ``call.get("id")``,
  equal to that dict).
* ``format_tool_calls(content, calls) -> str`` renders ``[{"name", "arguments": dict}]``
  the way that family writes them (the simulator uses it to emit Phase 2 text).

Malformed calls: a payload that cannot be turned into a call (bad JSON, no name,
arguments that are not an object) is dropped and described in ``last_errors``; the
valid calls next to it are kept. Upstream dropped *every* call when one payload was
bad, which hid the good calls and told the model nothing.

Reasoning: call markers inside a closed ``<think>…</think>`` block are ignored (models
quote the syntax while thinking), and nothing after an unclosed ``<think>`` counts (the
output was cut off mid-reasoning). The reasoning stays in the returned content.
"""

from __future__ import annotations

import bisect
import json
import re
import secrets
import string
import uuid
from abc import ABC
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from openai.types.chat import ChatCompletionMessageToolCall
from openai.types.chat.chat_completion_message_function_tool_call import Function

from environments.redact import safe_head


class _ReadsLikeADict:
    """Mapping-style reads over a pydantic model's fields, for code written against dicts."""

    model_fields: ClassVar[dict[str, Any]]

    def __getitem__(self, key: str) -> Any:
        if isinstance(key, str) and key in type(self).model_fields:
            return getattr(self, key)
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def keys(self) -> list[str]:
        return list(type(self).model_fields)

    def values(self) -> list[Any]:
        return [getattr(self, k) for k in type(self).model_fields]

    def items(self) -> list[tuple[str, Any]]:
        return [(k, getattr(self, k)) for k in type(self).model_fields]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in type(self).model_fields

    def __len__(self) -> int:
        return len(type(self).model_fields)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return bool(self.model_dump() == dict(other))  # type: ignore[attr-defined]
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment, unused-ignore]  # mutable, like the dict it stands for


class ToolCallFunction(_ReadsLikeADict, Function):
    """``{"name", "arguments": JSON str}``, readable as attributes or keys."""


class ToolCall(_ReadsLikeADict, ChatCompletionMessageToolCall):
    """One parsed call: an openai ``ChatCompletionMessageToolCall`` that also reads like
    ``{"id", "type": "function", "function": {"name", "arguments"}}`` (``dict(call)``
    and ``json.dumps`` need ``call.model_dump()``)."""

    function: ToolCallFunction

    def __iter__(self) -> Iterator[str]:  # type: ignore[override, unused-ignore]
        # Iterate keys, as a dict would (pydantic yields (key, value) pairs).
        return iter(type(self).model_fields)


ParseResult = tuple[str | None, list[ToolCall] | None]

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"

_JSON = json.JSONDecoder()
# last_errors is shown to the model and the console: keep it short on garbage output.
MAX_ERRORS = 20
# After this many malformed payloads a parse stops looking: degenerate, repetitive
# output (common in RL) must not cost quadratic time on every turn.
MAX_MALFORMED = 64


@dataclass(frozen=True)
class FoundCall:
    """One call recovered from text, before it gets its final id."""

    name: str
    arguments: str  # JSON object text
    call_id: str | None = None  # a family-specific id taken from the text (kimi_k2)


@dataclass
class Extraction:
    """What a family found: where the first call marker starts, and the calls."""

    marker: int | None = None
    calls: list[FoundCall] | None = None

    def add(self, call: FoundCall) -> None:
        if self.calls is None:
            self.calls = []
        self.calls.append(call)

    def mark(self, index: int) -> None:
        if self.marker is None or index < self.marker:
            self.marker = index


class ToolCallParser(ABC):
    """Base class: runs the family's extraction under the shared contract.

    A family implements ``_extract`` (and ``format_tool_calls`` to render calls). A
    parser written for the original layer that implements only ``parse(self, text)``
    works as is; one that implements neither is refused when instantiated."""

    name: ClassVar[str] = ""
    # Substrings at least one of which any text with calls contains: a cheap pre-check
    # for callers (the agent loop's fallback). Empty means "no such marker; parse it".
    markers: ClassVar[tuple[str, ...]] = ()

    def __init__(self) -> None:
        cls = type(self)
        if cls.parse is ToolCallParser.parse and cls._extract is ToolCallParser._extract:
            raise TypeError(
                f"tool call parser {cls.__name__} implements neither parse(self, text) nor _extract(self, text, start); "
                "implement parse(text) -> (content, calls or None)"
            )
        # Descriptions of payloads that looked like calls but could not be used,
        # from the latest parse() only. The agent loop reports them to the model.
        self.last_errors: list[str] = []
        self._errors_dropped = 0

    def parse(self, text: str) -> ParseResult:
        self.last_errors = []
        self._errors_dropped = 0
        if not isinstance(text, str) or not text:
            return text, None
        try:
            start, end = reasoning_bounds(text)
            found = self._extract(text[:end], start)
            calls = self._finish(found.calls) if found.calls else None
        except Exception as exc:  # noqa: BLE001 - contract: a parser never raises on model output
            self.error(f"parser {self.name or type(self).__name__} failed: {type(exc).__name__}: {safe_head(str(exc))}")
            calls = None
        if self._errors_dropped:
            self.last_errors.append(f"... and {self._errors_dropped} more malformed tool call(s)")
        if calls is None:
            return text, None
        marker = found.marker if found.marker is not None else 0
        return text[:marker].strip() or None, calls

    def _extract(self, text: str, start: int) -> Extraction:
        """Find calls in ``text`` at or after ``start``; record failures with ``error``."""
        raise NotImplementedError(f"{type(self).__name__} does not implement _extract")

    def format_tool_calls(self, content: str | None, calls: Sequence[Mapping[str, Any]]) -> str:
        """Render ``calls`` (``{"name": str, "arguments": dict}``) after ``content``."""
        raise NotImplementedError(
            f"tool call parser {type(self).__name__} cannot render calls (it implements only parse); "
            "implement format_tool_calls(content, calls) to use it for Phase 2 text"
        )

    def new_call_id(self) -> str:
        return "call_" + uuid.uuid4().hex[:8]

    def error(self, message: str) -> None:
        if len(self.last_errors) < MAX_ERRORS:
            self.last_errors.append(message)
        else:
            self._errors_dropped += 1

    @property
    def gave_up(self) -> bool:
        """True once enough malformed payloads were seen that scanning should stop."""
        return len(self.last_errors) + self._errors_dropped >= MAX_MALFORMED

    def _finish(self, found: list[FoundCall]) -> list[ToolCall]:
        used: set[str] = set()
        calls: list[ToolCall] = []
        for call in found:
            call_id = call.call_id or self.new_call_id()
            while call_id in used:
                # Text-supplied ids can repeat and random ones can collide: ids must be unique.
                call_id = f"{call.call_id}_{len(used)}" if call.call_id else self.new_call_id()
            used.add(call_id)
            calls.append(
                ToolCall(
                    id=call_id, type="function", function=ToolCallFunction(name=call.name, arguments=call.arguments)
                )
            )
        return calls


# --- helpers shared by the families -------------------------------------------------


def reasoning_bounds(text: str) -> tuple[int, int]:
    """The slice of ``text`` where call markers count: after the last ``</think>``,
    and before an unclosed ``<think>``."""
    close = text.rfind(THINK_CLOSE)
    start = close + len(THINK_CLOSE) if close != -1 else 0
    unclosed = text.find(THINK_OPEN, start)
    return start, (unclosed if unclosed != -1 else len(text))


def dump_arguments(arguments: Mapping[str, Any]) -> str:
    return json.dumps(arguments, ensure_ascii=False)


def normalize_arguments(raw: Any) -> dict[str, Any]:
    """Arguments as a dict: missing → {}, a JSON-object string is decoded (double encoding).

    Raises ValueError saying what was wrong otherwise.
    """
    if raw is None:
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as exc:
            raise ValueError(f"arguments string is not valid JSON ({exc.msg})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"arguments must be a JSON object, got {type(raw).__name__}")
    return raw


def call_from_object(obj: Any, *, allow_parameters: bool = True) -> FoundCall:
    """A call from a decoded ``{"name": ..., "arguments"|"parameters": {...}}`` object.

    Raises ValueError describing the problem (no name, bad arguments).
    """
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object with a 'name', got {type(obj).__name__}")
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ValueError("tool call has no 'name'")
    raw = obj.get("arguments")
    if raw is None and allow_parameters:
        raw = obj.get("parameters")
    return FoundCall(name.strip(), dump_arguments(normalize_arguments(raw)))


class JsonTooDeep(json.JSONDecodeError):
    """Nesting beyond the interpreter's recursion limit: never a real tool call."""

    def __init__(self, position: int) -> None:
        # JSONDecodeError computes line numbers by counting over the text; skip that.
        ValueError.__init__(self, "JSON nested too deeply")
        self.msg, self.doc, self.pos, self.lineno, self.colno = "JSON nested too deeply", "", position, 0, 0


def decode_json_at(text: str, index: int) -> tuple[Any, int]:
    """Decode one JSON value starting at ``index`` (leading whitespace skipped)."""
    index = skip_whitespace(text, index)
    try:
        return _JSON.raw_decode(text, index)
    except RecursionError:
        raise JsonTooDeep(index) from None


# Where a JSON object with a key may start: the only candidates worth decoding.
_OBJECT_START = re.compile(r'\{\s*"')


def object_starts(text: str, start: int = 0, end: int | None = None) -> list[int]:
    return [m.start() for m in _OBJECT_START.finditer(text, start, len(text) if end is None else end)]


class TagIndex:
    """Every position of one tag in a text, found once; ``next(pos)`` by bisection.

    Repeating ``text.find(tag, pos)`` per call is quadratic on output full of opening
    tags and no closing ones.
    """

    def __init__(self, text: str, tag: str) -> None:
        self._positions = [m.start() for m in re.finditer(re.escape(tag), text)]

    def next(self, position: int) -> int:
        """First occurrence at or after ``position``, or -1."""
        i = bisect.bisect_left(self._positions, position)
        return self._positions[i] if i < len(self._positions) else -1


def first_of(*positions: int, default: int) -> int:
    """The smallest position that was found (-1 means not found)."""
    return min((p for p in positions if p != -1), default=default)


def skip_whitespace(text: str, index: int) -> int:
    while index < len(text) and text[index].isspace():
        index += 1
    return index


def describe(index: int, problem: str, payload: str) -> str:
    """One ``last_errors`` entry: which call, what was wrong, and a redacted head of it."""
    # Cut before redacting: redaction is a regex pass and payloads can be huge.
    return f"tool call #{index}: {problem}: {safe_head(payload[:1000].strip(), 160)!r}"


def check_calls(calls: Sequence[Mapping[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """Validate ``format_tool_calls`` input: each item needs a str name and dict arguments."""
    checked: list[tuple[str, dict[str, Any]]] = []
    for position, call in enumerate(calls):
        if not isinstance(call, Mapping):
            raise ValueError(f"calls[{position}] must be a mapping with 'name' and 'arguments', got {call!r}")
        name = call.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"calls[{position}]['name'] must be a non-empty string, got {name!r}")
        try:
            arguments = normalize_arguments(call.get("arguments"))
        except ValueError as exc:
            raise ValueError(f"calls[{position}]['arguments']: {exc}") from None
        checked.append((name, arguments))
    return checked


def with_content(content: str | None, rendered: str, separator: str = "\n") -> str:
    """Content first (if any), then the rendered calls."""
    if not content:
        return rendered
    return f"{content}{separator}{rendered}" if rendered else content


_ALNUM = string.ascii_letters + string.digits


def random_alnum(length: int) -> str:
    return "".join(secrets.choice(_ALNUM) for _ in range(length))
