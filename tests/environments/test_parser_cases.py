"""Each parser on hand-written model output (behaviours 22-24): single, multiple,
surrounding text, malformed payloads, truncated output, missing names.

The texts are written out in each family's own syntax (not produced by
``format_tool_calls``), so these tests check the parsers against the formats.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from environments.tool_call_parsers import get_parser

W = ("get_weather", {"city": "Paris"})
T = ("get_time", {"tz": "UTC"})
W_JSON = '{"city": "Paris"}'
T_JSON = '{"tz": "UTC"}'
BAD_JSON = '{"tz": }'
NAMELESS = f'{{"arguments": {W_JSON}}}'


@dataclass(frozen=True)
class Case:
    text: str
    calls: list[tuple[str, dict[str, Any]]] | None
    content: str | None = None
    errors: list[str] = field(default_factory=list)  # one expected substring per last_errors entry


def hermes_call(body: str, tag: str = "tool_call") -> str:
    return f"<{tag}>\n{body}\n</{tag}>"


def hermes_obj(name: str, args: str) -> str:
    return f'{{"name": "{name}", "arguments": {args}}}'


def hermes_cases(tag: str) -> dict[str, Case]:
    call: Callable[[str], str] = lambda body: hermes_call(body, tag)  # noqa: E731
    w, t = call(hermes_obj(*W_ARGS)), call(hermes_obj(*T_ARGS))
    return {
        "single": Case(f"Checking.\n{w}", [W], "Checking."),
        "multiple": Case(f"{w}\n{t}", [W, T]),
        "surrounding": Case(f"Before.\n{w}\nAfter.", [W], "Before."),
        "malformed": Case(f"{w}{call(hermes_obj('get_time', BAD_JSON))}", [W], errors=["invalid JSON"]),
        "only_malformed": Case(call("{not json at all"), None, errors=["invalid JSON"]),
        "truncated": Case(f"{w}\n<{tag}>\n{hermes_obj(*T_ARGS)}", [W, T]),
        "truncated_mid_json": Case(f'{w}<{tag}>{{"name": "get_time", "argu', [W], errors=["invalid JSON"]),
        "missing_name": Case(call(NAMELESS) + t, [T], errors=["no 'name'"]),
    }


W_ARGS = ("get_weather", W_JSON)
T_ARGS = ("get_time", T_JSON)


def mistral_cases() -> dict[str, Case]:
    w_obj, t_obj = hermes_obj(*W_ARGS), hermes_obj(*T_ARGS)
    return {
        "single": Case(f"Checking.[TOOL_CALLS][{w_obj}]", [W], "Checking."),
        "multiple": Case(f"[TOOL_CALLS]get_weather{W_JSON}[TOOL_CALLS]get_time{T_JSON}", [W, T]),
        "surrounding": Case(f"Before. [TOOL_CALLS]get_weather{W_JSON} After.", [W], "Before."),
        "malformed": Case(f"[TOOL_CALLS][{w_obj}, {hermes_obj('get_time', BAD_JSON)}]", [W], errors=["invalid JSON"]),
        "only_malformed": Case("[TOOL_CALLS]get_time{oops}", None, errors=["invalid JSON arguments for 'get_time'"]),
        "truncated": Case(
            f'[TOOL_CALLS]get_weather{W_JSON}[TOOL_CALLS]get_time{{"tz": "U', [W], errors=["invalid JSON"]
        ),
        "missing_name": Case(f'[TOOL_CALLS][{{"arguments": {W_JSON}}}, {t_obj}]', [T], errors=["no 'name'"]),
        "pre_v11_object": Case(f"[TOOL_CALLS] {w_obj}", [W]),
        "pre_v11_nested": Case(
            '[TOOL_CALLS][{"name": "write", "arguments": {"spec": {"a": [1, {"b": {"c": "}]"}}]}}}]',
            [("write", {"spec": {"a": [1, {"b": {"c": "}]"}}]}})],
        ),
        "raw_decode_trailing_text": Case(f"[TOOL_CALLS][{w_obj}] and then some prose", [W]),
        "v11_repeated_without_marker": Case(f"[TOOL_CALLS]get_weather{W_JSON} get_time{T_JSON}", [W, T]),
        "v13_args_token": Case(f"[TOOL_CALLS]get_weather[ARGS]{W_JSON}", [W]),
    }


def llama_cases() -> dict[str, Case]:
    def obj(name: str, args: str, key: str = "parameters") -> str:
        return f'{{"name": "{name}", "{key}": {args}}}'

    w, t = obj(*W_ARGS), obj(*T_ARGS)
    return {
        "single": Case(f"Checking.<|python_tag|>{w}", [W], "Checking."),
        "multiple": Case(f"{obj(*W_ARGS, key='arguments')}; {t}", [W, T]),
        "surrounding": Case(f"Let me call {w} now.", [W], "Let me call"),
        "malformed": Case(f"<|python_tag|>{w}; {obj('get_time', BAD_JSON)}", [W], errors=["invalid JSON"]),
        "only_malformed": Case('<|python_tag|>{"name": get_time}', None, errors=["invalid JSON"]),
        "truncated": Case(
            f'<|python_tag|>{w}; {{"name": "get_time", "parameters": {{"tz": "U', [W], errors=["invalid JSON"]
        ),
        "missing_name": Case(f'<|python_tag|>{{"parameters": {W_JSON}}}; {t}', [T], errors=["no 'name'"]),
        "nameless_call_is_not_content": Case(f'Ok. {{"parameters": {W_JSON}}} {t}', [T], "Ok.", errors=["no 'name'"]),
        "json_without_call_keys_is_prose": Case(
            f'Config is {{"name": "x"}} then {w}', [W], 'Config is {"name": "x"} then'
        ),
    }


CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


def deepseek_cases(call: Callable[[str, str], str], open_call: Callable[[str, str], str]) -> dict[str, Case]:
    """``call`` renders a closed call, ``open_call`` the same without its end token."""
    w, t = call(*W_ARGS), call(*T_ARGS)
    section = lambda *calls: CALLS_BEGIN + "".join(calls) + CALLS_END  # noqa: E731
    return {
        "single": Case("Checking." + section(w), [W], "Checking."),
        "multiple": Case(section(w, call("get_time", '{\n  "tz": "UTC"\n}')), [W, T]),
        "surrounding": Case(f"Before.\n{section(w)}\nAfter.", [W], "Before."),
        "malformed": Case(section(w, call("get_time", BAD_JSON)), [W], errors=["invalid JSON arguments"]),
        "only_malformed": Case(section(call("get_time", BAD_JSON)), None, errors=["invalid JSON arguments"]),
        "truncated": Case(CALLS_BEGIN + w + open_call(*T_ARGS), [W, T]),
        "truncated_mid_json": Case(CALLS_BEGIN + w + open_call("get_time", '{"tz": "U'), [W], errors=["invalid JSON"]),
        "missing_name": Case(section(call("  ", W_JSON), t), [T], errors=["no function name"]),
        "no_section_token": Case("Text " + w, [W], "Text"),
    }


def v3_call(name: str, args: str) -> str:
    return f"{CALL_BEGIN}function{SEP}{name}\n```json\n{args}\n```{CALL_END}"


def v3_open(name: str, args: str) -> str:
    return f"{CALL_BEGIN}function{SEP}{name}\n```json\n{args}"


def v31_call(name: str, args: str) -> str:
    return f"{CALL_BEGIN}{name}{SEP}{args}{CALL_END}"


def v31_open(name: str, args: str) -> str:
    return f"{CALL_BEGIN}{name}{SEP}{args}"


K_SB, K_SE = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
K_CB, K_AB, K_CE = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"


def kimi_call(call_id: str, args: str, closed: bool = True) -> str:
    return f"{K_CB}{call_id}{K_AB}{args}" + (K_CE if closed else "")


def kimi_cases() -> dict[str, Case]:
    w, t = kimi_call("functions.get_weather:0", W_JSON), kimi_call("functions.get_time:1", T_JSON)
    return {
        "single": Case(f"Checking.{K_SB}{w}{K_SE}", [W], "Checking."),
        "multiple": Case(f"<|tool_call_section_begin|>{w}{t}<|tool_call_section_end|>", [W, T]),
        "surrounding": Case(f"Before. {K_SB}{w}{K_SE} After.", [W], "Before."),
        "malformed": Case(
            f"{K_SB}{w}{kimi_call('functions.get_time:1', BAD_JSON)}{K_SE}", [W], errors=["invalid JSON"]
        ),
        "only_malformed": Case(f"{K_SB}{K_CB}functions.get_time:0{K_CE}{K_SE}", None, errors=["argument_begin"]),
        "truncated": Case(f"{K_SB}{w}{kimi_call('functions.get_time:1', T_JSON, closed=False)}", [W, T]),
        "missing_name": Case(f"{K_SB}{kimi_call('functions.:0', W_JSON)}{t}{K_SE}", [T], errors=["no function name"]),
    }


def glm_cases(nl: str) -> dict[str, Case]:
    def call(name: str, pairs: list[tuple[str, str]], closed: bool = True) -> str:
        body = "".join(f"<arg_key>{k}</arg_key>{nl}<arg_value>{v}</arg_value>{nl}" for k, v in pairs)
        return f"<tool_call>{name}{nl}{body}" + ("</tool_call>" if closed else "")

    w, t = call("get_weather", [("city", "Paris")]), call("get_time", [("tz", "UTC")])
    return {
        "single": Case(f"Checking.\n{w}", [W], "Checking."),
        "multiple": Case(f"{w}\n{t}", [W, T]),
        "surrounding": Case(f"Before.\n{w}\nAfter.", [W], "Before."),
        "malformed": Case(w + call("get_time", [(" ", "UTC")]), [W], errors=["empty <arg_key>"]),
        "only_malformed": Case('<tool_call>{"name": "get_time"}</tool_call>', None, errors=["no function name"]),
        "truncated": Case(f"{w}<tool_call>get_time{nl}<arg_key>tz</arg_key>{nl}<arg_value>UTC", [W, T]),
        "missing_name": Case(call("", [("city", "Paris")]) + t, [T], errors=["no function name"]),
        "no_arguments": Case("<tool_call>list_files</tool_call>", [("list_files", {})]),
    }


def qwen3_coder_cases() -> dict[str, Case]:
    def call(name: str, pairs: list[tuple[str, str]]) -> str:
        params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in pairs)
        return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"

    w, t = call("get_weather", [("city", "Paris")]), call("get_time", [("tz", "UTC")])
    return {
        "single": Case(f"Checking.\n{w}", [W], "Checking."),
        "multiple": Case(f"{w}\n{t}", [W, T]),
        "surrounding": Case(f"Before.\n{w}\nAfter.", [W], "Before."),
        "malformed": Case(w + call("get_time", [("", "UTC")]), [W], errors=["parameter with an empty name"]),
        "only_malformed": Case("<tool_call><function=get time", None, errors=["no function name"]),
        "truncated": Case(f"{w}\n<tool_call>\n<function=get_time>\n<parameter=tz>\nUTC", [W, T]),
        "missing_name": Case(call("", [("city", "Paris")]) + t, [T], errors=["no function name"]),
        "without_wrapper": Case(
            "Doing it: <function=get_weather><parameter=city>Paris</parameter></function>", [W], "Doing it:"
        ),
    }


CASES: dict[str, dict[str, Case]] = {
    "hermes": hermes_cases("tool_call"),
    "qwen": hermes_cases("tool_call"),
    "longcat": hermes_cases("longcat_tool_call"),
    "mistral": mistral_cases(),
    "llama3_json": llama_cases(),
    "llama4_json": llama_cases(),
    "deepseek_v3": deepseek_cases(v3_call, v3_open),
    "deepseek_v3_1": deepseek_cases(v31_call, v31_open),
    "deepseek_v31": deepseek_cases(v31_call, v31_open),
    "kimi_k2": kimi_cases(),
    "glm45": glm_cases("\n"),
    "glm47": glm_cases(""),
    "qwen3_coder": qwen3_coder_cases(),
}

PARAMS = [
    pytest.param(parser, kind, case, id=f"{parser}-{kind}")
    for parser, cases in CASES.items()
    for kind, case in cases.items()
]
REQUIRED_KINDS = {"single", "multiple", "surrounding", "malformed", "only_malformed", "truncated", "missing_name"}


def test_every_parser_has_every_required_case() -> None:
    for parser, cases in CASES.items():
        assert REQUIRED_KINDS <= set(cases), parser


@pytest.mark.parametrize(("parser_name", "kind", "case"), PARAMS)
def test_parser_case(parser_name: str, kind: str, case: Case) -> None:
    parser = get_parser(parser_name)
    content, calls = parser.parse(case.text)
    if case.calls is None:
        assert (content, calls) == (case.text, None)
    else:
        assert calls is not None, parser.last_errors
        assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == case.calls
        assert content == case.content
        assert len({c["id"] for c in calls}) == len(calls)
    assert len(parser.last_errors) == len(case.errors), parser.last_errors
    for message, expected in zip(parser.last_errors, case.errors):
        assert expected in message


# --- family specifics ---------------------------------------------------------------


def test_hermes_ids_are_call_and_8_hex() -> None:
    _, calls = get_parser("hermes").parse(CASES["hermes"]["multiple"].text)
    assert calls is not None
    for call in calls:
        assert call["id"].startswith("call_") and len(call["id"]) == 13
        int(call["id"][5:], 16)


def test_hermes_close_tag_inside_a_json_string_does_not_cut_the_payload() -> None:
    text = '<tool_call>{"name": "echo", "arguments": {"s": "a </tool_call> b"}}</tool_call>'
    _, calls = get_parser("hermes").parse(text)
    assert calls is not None and json.loads(calls[0]["function"]["arguments"]) == {"s": "a </tool_call> b"}


def test_hermes_double_encoded_arguments_are_decoded() -> None:
    text = '<tool_call>{"name": "f", "arguments": "{\\"x\\": 1}"}</tool_call>'
    _, calls = get_parser("hermes").parse(text)
    assert calls is not None and calls[0]["function"]["arguments"] == '{"x": 1}'


def test_hermes_non_object_arguments_are_reported() -> None:
    parser = get_parser("hermes")
    text = '<tool_call>{"name": "f", "arguments": [1, 2]}</tool_call>'
    assert parser.parse(text) == (text, None)
    assert "arguments must be a JSON object, got list" in parser.last_errors[0]


def test_mistral_ids_are_9_alphanumerics() -> None:
    _, calls = get_parser("mistral").parse(CASES["mistral"]["multiple"].text)
    assert calls is not None
    assert all(len(c["id"]) == 9 and c["id"].isalnum() for c in calls)


def test_kimi_ids_are_the_raw_function_ids_and_stay_unique() -> None:
    _, calls = get_parser("kimi_k2").parse(CASES["kimi_k2"]["multiple"].text)
    assert calls is not None
    assert [c["id"] for c in calls] == ["functions.get_weather:0", "functions.get_time:1"]
    repeated = f"{K_SB}{kimi_call('functions.a:0', '{}')}{kimi_call('functions.a:0', '{}')}{K_SE}"
    _, calls = get_parser("kimi_k2").parse(repeated)
    assert calls is not None and [c["id"] for c in calls] == ["functions.a:0", "functions.a:0_1"]


@pytest.mark.parametrize(
    ("raw_id", "name"),
    [("functions.get_weather:0", "get_weather"), ("ns.sub.tool:12", "tool"), ("plain_name:3", "plain_name")],
)
def test_kimi_name_is_taken_after_the_last_dot(raw_id: str, name: str) -> None:
    _, calls = get_parser("kimi_k2").parse(f"{K_SB}{kimi_call(raw_id, '{}')}{K_SE}")
    assert calls is not None and calls[0]["function"]["name"] == name and calls[0]["id"] == raw_id


TYPED_RAW = [
    ("n", "42"),
    ("f", "1.5"),
    ("b", "true"),
    ("nul", "null"),
    ("lst", "[1, 2]"),
    ("obj", '{"k": "v"}'),
    ("py", "{'k': None}"),
    ("s", "hello world"),
]
TYPED = {
    "n": 42,
    "f": 1.5,
    "b": True,
    "nul": None,
    "lst": [1, 2],
    "obj": {"k": "v"},
    "py": {"k": None},
    "s": "hello world",
}


@pytest.mark.parametrize("parser_name", ["glm45", "glm47"])
@pytest.mark.parametrize("nl", ["\n", ""])
def test_glm_values_are_typed_in_both_layouts(parser_name: str, nl: str) -> None:
    pairs = "".join(f"<arg_key>{k}</arg_key>{nl}<arg_value>{v}</arg_value>{nl}" for k, v in TYPED_RAW)
    _, calls = get_parser(parser_name).parse(f"<tool_call>configure{nl}{pairs}</tool_call>")
    assert calls is not None and json.loads(calls[0]["function"]["arguments"]) == TYPED


def test_qwen3_coder_values_are_typed_and_null_is_none() -> None:
    params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in TYPED_RAW)
    text = f"<tool_call>\n<function=configure>\n{params}</function>\n</tool_call>"
    _, calls = get_parser("qwen3_coder").parse(text)
    assert calls is not None and json.loads(calls[0]["function"]["arguments"]) == TYPED
    assert calls[0]["id"].startswith("call_") and len(calls[0]["id"]) == 29


def test_qwen3_coder_multiline_value_keeps_inner_newlines() -> None:
    text = "<tool_call>\n<function=write>\n<parameter=body>\nline 1\nline 2\n</parameter>\n</function>\n</tool_call>"
    _, calls = get_parser("qwen3_coder").parse(text)
    assert calls is not None and json.loads(calls[0]["function"]["arguments"]) == {"body": "line 1\nline 2"}


def test_hermes_malformed_payload_is_described_with_a_redacted_head() -> None:
    parser = get_parser("hermes")
    text = '<tool_call>{"name": "login", "arguments": {"api_key": "sk-abcdefghijklmnopqrstuvwx123456"</tool_call>'
    parser.parse(text)
    assert len(parser.last_errors) == 1
    assert parser.last_errors[0].startswith("tool call #1: invalid JSON")
    assert "sk-abcdefghijklmnopqrstuvwx123456" not in parser.last_errors[0]
