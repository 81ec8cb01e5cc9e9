"""environments.patches: the openai request fast path changes CPU cost, never the request."""

from __future__ import annotations

import datetime
import json
from typing import Any

import openai.resources.chat.completions.completions as chat_module
from openai import NOT_GIVEN
from openai.types.chat import completion_create_params

from environments import patches

PARAMS = completion_create_params.CompletionCreateParamsNonStreaming


def _body() -> dict[str, Any]:
    return {
        "model": "m",
        "n": 1,
        "temperature": 1.0,
        "max_tokens": 64,
        "stop": NOT_GIVEN,
        "seed": NOT_GIVEN,
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "a", "type": "function", "function": {"name": "terminal", "arguments": '{"command": "ls"}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "a", "content": '{"output": "x", "exit_code": 0}'},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "terminal",
                    "description": "d",
                    "parameters": {
                        "type": "object",
                        "properties": {"command": {"type": "string"}},
                        "required": ["command"],
                    },
                },
            }
        ],
        "extra": {"nested": [1, 2.5, True, None]},
    }


async def _both(body: dict[str, Any]) -> tuple[Any, Any]:
    was = patches.lean_chat_transform_enabled()
    patches.disable_lean_chat_transform()
    try:
        full = await chat_module.async_maybe_transform(body, PARAMS)
        assert patches.enable_lean_chat_transform()
        lean = await chat_module.async_maybe_transform(body, PARAMS)
    finally:
        if not was:
            patches.disable_lean_chat_transform()
    return full, lean


async def test_same_body_as_the_openai_transform() -> None:
    full, lean = await _both(_body())
    assert json.dumps(lean, sort_keys=True) == json.dumps(full, sort_keys=True)
    assert "stop" not in lean and "seed" not in lean


async def test_non_json_values_take_the_original_path() -> None:
    body = _body()
    body["metadata"] = {"when": datetime.date(2026, 1, 2)}  # formatted by openai's transform
    body["messages"] = tuple(body["messages"])  # iterables become lists there
    full, lean = await _both(body)
    assert lean == full
    assert isinstance(lean["messages"], list)


def test_plain_json() -> None:
    assert patches.plain_json({"a": [1, "x", None, {"b": False, "c": 1.5}]})
    assert not patches.plain_json({"a": (1, 2)})
    assert not patches.plain_json({1: "x"})
    assert not patches.plain_json({"a": b"bytes"})


def test_apply_patches_is_idempotent_and_enables_the_fast_path() -> None:
    import environments.hermes_base_env  # noqa: F401 - applies the patches at import

    assert patches.patches_applied()
    patches.apply_patches()
    assert patches.lean_chat_transform_enabled()
