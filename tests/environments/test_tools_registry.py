"""Tool definitions, argument coercion/validation and dispatch errors (behaviour 26)."""

from __future__ import annotations

import json
import logging

import pytest

from environments.tools import get_tool_definitions, handle_function_call, registry
from environments.tools.coercion import coerce_and_validate
from environments.tools.registry import register


def _names(defs):
    return [d["function"]["name"] for d in defs]


# ------------------------------------------------------------------ definitions


def test_enabled_filtering_and_schema_shape():
    defs = get_tool_definitions(["terminal", "file"], quiet_mode=True)
    assert _names(defs) == ["patch", "read_file", "search_files", "terminal", "write_file"]
    for d in defs:
        assert d["type"] == "function"
        assert set(d["function"]) == {"name", "description", "parameters"}
        assert d["function"]["parameters"]["type"] == "object"


def test_disabled_is_subtracted_last_even_from_composites():
    assert _names(get_tool_definitions(["debugging"], ["file"], quiet_mode=True)) == ["terminal"]
    assert _names(get_tool_definitions(["hermes-rl"], ["terminal", "todo"], quiet_mode=True)) == [
        "patch",
        "read_file",
        "search_files",
        "write_file",
    ]


def test_none_means_all_available_and_warns(caplog):
    with caplog.at_level(logging.WARNING, logger="environments.tools"):
        defs = get_tool_definitions(None, ["memory"], quiet_mode=False)
    assert set(_names(defs)) == {"terminal", "read_file", "write_file", "patch", "search_files", "todo"}
    assert any("every toolset" in r.message for r in caplog.records)


def test_unknown_toolsets_are_ignored_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="environments.tools"):
        defs = get_tool_definitions(["terminal", "bogus-set"], quiet_mode=True)
    assert _names(defs) == ["terminal"]
    assert any("bogus-set" in r.message for r in caplog.records)


def test_check_fn_false_tools_are_dropped():
    assert get_tool_definitions(["web", "browser", "vision", "image_gen", "moa"], quiet_mode=True) == []
    assert "web_search" in registry  # registered, just unavailable


def test_cache_returns_a_copy():
    first = get_tool_definitions(["terminal"], quiet_mode=True)
    first[0]["function"]["name"] = "poisoned"
    first[0]["function"]["parameters"]["properties"].clear()
    first.append({"junk": True})
    second = get_tool_definitions(["terminal"], quiet_mode=True)
    assert _names(second) == ["terminal"]
    assert "command" in second[0]["function"]["parameters"]["properties"]


def test_registry_changes_invalidate_the_cache():
    before = _names(get_tool_definitions(["terminal"], quiet_mode=True))
    spec = registry.get("terminal")
    try:
        register("terminal", "terminal", "x", spec.schema["parameters"], spec.handler, check_fn=lambda: False)
        assert get_tool_definitions(["terminal"], quiet_mode=True) == []
    finally:
        registry.register(spec)
    assert _names(get_tool_definitions(["terminal"], quiet_mode=True)) == before


# ------------------------------------------------------------------ coercion

SCHEMA = {
    "type": "object",
    "properties": {
        "n": {"type": "integer"},
        "x": {"type": "number"},
        "flag": {"type": "boolean"},
        "items": {"type": "array", "items": {"type": "string"}},
        "nums": {"type": "array", "items": {"type": "integer"}},
        "obj": {"type": "object"},
        "maybe": {"type": ["string", "null"]},
        "mode": {"type": "string", "enum": ["a", "b"]},
        "s": {"type": "string"},
    },
    "required": ["n"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"n": "42"}, {"n": 42}),
        ({"n": 7.0}, {"n": 7}),
        ({"n": 1, "x": "2.5"}, {"n": 1, "x": 2.5}),
        ({"n": 1, "flag": "true"}, {"n": 1, "flag": True}),
        ({"n": 1, "flag": "False"}, {"n": 1, "flag": False}),
        ({"n": 1, "items": '["a", "b"]'}, {"n": 1, "items": ["a", "b"]}),
        ({"n": 1, "items": "solo"}, {"n": 1, "items": ["solo"]}),
        ({"n": 1, "nums": ["1", 2]}, {"n": 1, "nums": [1, 2]}),
        ({"n": 1, "obj": '{"k": 1}'}, {"n": 1, "obj": {"k": 1}}),
        ({"n": 1, "maybe": "null"}, {"n": 1, "maybe": None}),
        ({"n": 1, "s": 5}, {"n": 1, "s": "5"}),
        ({"n": 1, "mode": None}, {"n": 1}),  # null for an optional arg means "default"
    ],
)
def test_coercion(args, expected):
    out, problem = coerce_and_validate(args, SCHEMA)
    assert problem is None
    assert out == expected


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ({}, "'n' is required (integer)"),
        ({"n": "forty"}, "'n' must be integer, got string 'forty'"),
        ({"n": True}, "'n' must be integer, got boolean"),
        ({"n": 1, "flag": "maybe"}, "'flag' must be boolean"),
        ({"n": 1, "mode": "c"}, "'mode' must be one of 'a', 'b', got 'c'"),
        ({"n": 1, "obj": "[1]"}, "'obj' must be object"),
        ({"n": 1, "nums": ["x"]}, "'nums'[0] must be integer"),
        ({"n": 1, "extra": 1}, "unexpected argument 'extra'"),
    ],
)
def test_validation_errors_name_argument_value_and_expectation(args, fragment):
    _, problem = coerce_and_validate(args, SCHEMA)
    assert problem is not None and fragment in problem


# ------------------------------------------------------------------ dispatch


def _call(name, args, **kw):
    raw = handle_function_call(name, args, **kw)
    assert isinstance(raw, str)
    return json.loads(raw)


def test_required_argument_error_message():
    assert _call("terminal", {}) == {"error": "Invalid arguments for tool 'terminal': 'command' is required (string)"}


def test_wrong_type_error_message():
    out = _call("terminal", {"command": ["ls"]})
    assert out["error"].startswith("Invalid arguments for tool 'terminal': 'command' must be string, got array")


def test_non_dict_payload_is_a_clear_error():
    out = _call("read_file", [1, 2])
    assert "expected a JSON object of named arguments, got list" in out["error"]
    out = _call("read_file", "not json")
    assert "not valid JSON" in out["error"]


def test_agent_loop_tools_and_unknown_tools():
    for name in ("todo", "memory", "session_search", "delegate_task"):
        assert _call(name, {}) == {"error": f"{name} must be handled by the agent loop"}
    assert _call("frobnicate", {}) == {"error": "Unknown tool: frobnicate"}


def test_offline_tools_answer_honestly():
    assert _call("web_search", {"query": "x"}) == {"error": "web_search is not available offline in hermes-console"}
    assert _call("browser_snapshot", {}) == {"error": "browser_snapshot is not available offline in hermes-console"}


def test_handler_exception_becomes_tool_execution_failed():
    def boom(args, task_id, **_):
        raise RuntimeError("kaput")

    register("boom_tool", "testing", "raises", {"type": "object", "properties": {}}, boom)
    try:
        assert _call("boom_tool", {}) == {"error": "Tool execution failed: RuntimeError: kaput"}
    finally:
        registry.unregister("boom_tool")


def test_task_id_user_task_and_extra_kwargs_reach_the_handler():
    seen = {}

    def spy(args, task_id, **ctx):
        seen.update(args=args, task_id=task_id, **ctx)
        return {"ok": True}

    register("spy_tool", "testing", "spy", {"type": "object", "properties": {"n": {"type": "integer"}}}, spy)
    try:
        assert _call("spy_tool", {"n": "3"}, task_id="t-9", user_task="do it", tool_call_id="c1") == {"ok": True}
    finally:
        registry.unregister("spy_tool")
    assert seen == {"args": {"n": 3}, "task_id": "t-9", "user_task": "do it", "tool_call_id": "c1"}
