"""The contract every registered parser keeps (behaviour 21) and the format/parse round trip."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from environments.tool_call_parsers import get_parser, list_parsers
from environments.tool_call_parsers.base import MAX_ERRORS
from environments.tool_call_parsers.values import render_value, typed_value

ALL = list_parsers()

ROUND_TRIP_CALLS: list[dict[str, Any]] = [
    {
        "name": "write_file",
        "arguments": {
            "path": "notes/résumé.md",
            "content": 'Grüße, 世界 🚀\nline two\t"quoted" and \\ backslash',
            "options": {"mode": "w", "tags": ["a", {"deep": [1, 2.5, None, True]}], "empty": {}},
            "count": 3,
            "ratio": 0.25,
            "flag": False,
            "nothing": None,
            "numeric_string": "123",
            "bool_string": "true",
            "null_string": "null",
            "py_literal_string": "[1, 2]",
            "padded": "  spaced  ",
            "markup": "a </tool_call> <b> </parameter> </arg_value> [TOOL_CALLS] ```",
            "blank": "",
        },
    },
    {"name": "terminal", "arguments": {"command": "ls -la | grep '{x}'"}},
    {"name": "todo", "arguments": {}},
]


def names_and_args(calls: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("content", ["I'll look into that — 先检查一下.", None])
def test_round_trip_keeps_names_arguments_and_content(name: str, content: str | None) -> None:
    parser = get_parser(name)
    text = parser.format_tool_calls(content, ROUND_TRIP_CALLS)
    parsed_content, calls = parser.parse(text)
    assert calls is not None, f"{name} could not read its own output:\n{text}"
    assert names_and_args(calls) == [(c["name"], c["arguments"]) for c in ROUND_TRIP_CALLS]
    assert parsed_content == content
    assert parser.last_errors == []


@pytest.mark.parametrize("name", ALL)
def test_calls_have_the_openai_shape_and_unique_ids(name: str) -> None:
    parser = get_parser(name)
    _, calls = parser.parse(parser.format_tool_calls(None, ROUND_TRIP_CALLS))
    assert calls is not None and len(calls) == 3
    for call in calls:
        assert set(call) == {"id", "type", "function"}
        assert call["type"] == "function"
        assert isinstance(call["id"], str) and call["id"]
        assert isinstance(call["function"]["name"], str)
        assert isinstance(call["function"]["arguments"], str)
        assert isinstance(json.loads(call["function"]["arguments"]), dict)
    assert len({c["id"] for c in calls}) == 3
    # Non-ASCII stays readable in the argument string (ensure_ascii=False).
    assert "世界" in calls[0]["function"]["arguments"]


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize(
    "text",
    [
        "Just a plain answer.",
        'Some JSON in prose: {"a": 1} and a brace }',
        "<think>only thinking</think>The answer is 4.",
        "Multi\nline\n\ttext with unicode ✓",
    ],
)
def test_plain_text_gives_text_and_none(name: str, text: str) -> None:
    parser = get_parser(name)
    result = parser.parse(text)
    assert isinstance(result, tuple) and len(result) == 2
    assert result == (text, None)
    assert parser.last_errors == []


@pytest.mark.parametrize("name", ALL)
def test_empty_string_gives_no_calls(name: str) -> None:
    assert get_parser(name).parse("") == ("", None)


@pytest.mark.parametrize("name", ALL)
def test_reasoning_before_the_call_is_kept_and_quoted_markers_ignored(name: str) -> None:
    parser = get_parser(name)
    quoted = parser.format_tool_calls(None, [{"name": "decoy", "arguments": {"x": 1}}])
    reasoning = f"<think>The syntax is {quoted} — let me use it.</think>"
    text = parser.format_tool_calls(reasoning, [{"name": "terminal", "arguments": {"command": "pwd"}}])
    content, calls = parser.parse(text)
    assert calls is not None
    assert names_and_args(calls) == [("terminal", {"command": "pwd"})]
    assert content == reasoning


@pytest.mark.parametrize("name", ALL)
def test_unclosed_reasoning_hides_calls_inside_it(name: str) -> None:
    parser = get_parser(name)
    text = "<think>maybe " + parser.format_tool_calls(None, [{"name": "terminal", "arguments": {}}])
    assert parser.parse(text) == (text, None)


@pytest.mark.parametrize("name", ALL)
def test_last_errors_reset_on_every_parse(name: str) -> None:
    parser = get_parser(name)
    parser.last_errors.append("stale")
    parser.parse("plain")
    assert parser.last_errors == []


def test_internal_exception_returns_text_and_none(monkeypatch: pytest.MonkeyPatch) -> None:
    def explode(obj: Any, **_: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr("environments.tool_call_parsers.hermes.call_from_object", explode)
    parser = get_parser("hermes")
    text = '<tool_call>{"name": "a", "arguments": {}}</tool_call>'
    assert parser.parse(text) == (text, None)
    assert parser.last_errors == ["parser hermes failed: RuntimeError: boom"]


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize(
    ("calls", "message"),
    [
        ([{"arguments": {}}], r"calls\[0\]\['name'\] must be a non-empty string"),
        (
            [{"name": "ok", "arguments": {}}, {"name": "x", "arguments": [1]}],
            r"calls\[1\]\['arguments'\]: arguments must be a JSON object, got list",
        ),
        (["terminal"], r"calls\[0\] must be a mapping"),
    ],
)
def test_format_rejects_bad_calls_with_a_clear_message(name: str, calls: list[Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        get_parser(name).format_tool_calls(None, calls)


@pytest.mark.parametrize("name", ALL)
def test_format_with_no_calls_is_just_the_content(name: str) -> None:
    assert get_parser(name).format_tool_calls("hello", []) == "hello"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("42", 42),
        ("-1.5", -1.5),
        ("true", True),
        ("null", None),
        ("None", None),
        ("True", True),
        ('{"a": [1, 2]}', {"a": [1, 2]}),
        ("{'a': (1, 2)}", {"a": (1, 2)}),
        ("hello world", "hello world"),
        ('"quoted"', "quoted"),
        ("{1, 2}", "{1, 2}"),
        ("1+2j", "1+2j"),
        ("", ""),
        ("  ", "  "),
    ],
)
def test_typed_value_tries_json_then_literal_then_string(raw: str, expected: Any) -> None:
    assert typed_value(raw) == expected
    assert type(typed_value(raw)) is type(expected)


@pytest.mark.parametrize("value", ["123", "plain", "a<b", " pad ", "None", 7, None, [1, "<x>"], {"k": "v"}])
def test_render_value_reads_back_as_the_same_value(value: Any) -> None:
    rendered = render_value(value)
    assert "<" not in rendered
    assert typed_value(rendered) == value


# Degenerate, repetitive output (common in RL) in every family's syntax at once, ~250 KB.
DEGENERATE = (
    '<tool_call>{[TOOL_CALLS]a{<｜tool▁call▁begin｜>x<|tool_call_begin|>x<function=x <arg_key>{"a" <|python_tag|>'
    * 2500
)


@pytest.mark.parametrize("name", ALL)
def test_degenerate_output_is_parsed_in_bounded_time_with_bounded_errors(name: str) -> None:
    parser = get_parser(name)
    started = time.thread_time()  # CPU time of this thread: a loaded machine does not inflate it
    parser.parse(DEGENERATE)
    assert time.thread_time() - started < 3.0  # quadratic scanning takes many seconds here
    assert len(parser.last_errors) <= MAX_ERRORS + 1


def test_many_malformed_calls_keep_the_valid_one_and_summarise_the_rest() -> None:
    parser = get_parser("hermes")
    bad = '<tool_call>{"name": "x", "arguments": {,}}</tool_call>' * 30
    content, calls = parser.parse(bad + '<tool_call>{"name": "ok", "arguments": {}}</tool_call>')
    assert content is None
    assert calls is not None and [c["function"]["name"] for c in calls] == ["ok"]
    assert len(parser.last_errors) == MAX_ERRORS + 1
    assert parser.last_errors[-1] == f"... and {30 - MAX_ERRORS} more malformed tool call(s)"


@pytest.mark.parametrize("name", ALL)
def test_markers_are_present_whenever_calls_are(name: str) -> None:
    parser = get_parser(name)
    if name.startswith("llama"):
        assert parser.markers == ()  # bare JSON: no marker to pre-check
        return
    assert parser.markers
    text = parser.format_tool_calls("pre", [{"name": "terminal", "arguments": {"command": "ls"}}])
    assert any(marker in text for marker in parser.markers)
    without = text
    for marker in parser.markers:
        without = without.replace(marker, "")
    assert parser.parse(without)[1] is None  # no marker, no calls
