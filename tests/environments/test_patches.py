"""environments.patches: the openai request fast path changes CPU cost, never the request."""

from __future__ import annotations

import datetime
import json
import re
from typing import Any

import openai.resources.chat.completions.completions as chat_module
import pytest
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


# ---------------------------------------------------------------------------- server instances
# One test per write, each against atroposlib's / openai's own source or behaviour (the oracle).


def _atropos_source(module: str) -> str:
    import importlib
    import inspect

    return inspect.getsource(importlib.import_module(f"atroposlib.envs.server_handling.{module}"))


def _server() -> Any:
    from atroposlib.envs.server_handling.openai_server import OpenAIServer
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig

    config = APIServerConfig(
        base_url="http://127.0.0.1:9/v1", api_key="k", model_name="m", server_type="openai", health_check=False
    )
    return OpenAIServer(config)


def test_replace_server_method_is_what_atroposlib_calls() -> None:
    import asyncio

    baseline, manager = _atropos_source("server_baseline"), _atropos_source("server_manager")
    # The methods the console wraps: attempts are called through self, public ones on the picked server.
    for name in ("_chat_completion_wrapper", "_completion_wrapper", "_tokens_and_logprobs_completion_wrapper"):
        assert f"self.{name}(" in baseline, name
    for name in ("chat_completion", "completion", "tokens_and_logprobs_completion"):
        assert re.search(rf"\b(?:selected_server|server|self\.servers\[[^\]]+\])\.{name}\(", manager), name
    server = _server()
    seen: list[dict[str, Any]] = []

    async def attempt(**kwargs: Any) -> str:
        seen.append(kwargs)
        return "from the patched attempt"

    assert patches.replace_server_method(server, "_chat_completion_wrapper", attempt)
    assert not patches.replace_server_method(server, "no_such_method", attempt)
    got = asyncio.run(server.chat_completion(messages=[{"role": "user", "content": "hi"}]))
    assert got == "from the patched attempt" and seen[0]["model"] == "m"  # atroposlib's own call path used it
    assert type(server)._chat_completion_wrapper is not attempt  # the class itself is untouched


def test_replace_client_transport_carries_every_openai_request() -> None:
    import asyncio

    server = _server()
    httpx_mod = patches_httpx()
    sent: list[Any] = []

    class Canned:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        async def handle_async_request(self, request: Any) -> Any:
            sent.append(request)
            body = {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": []}
            return httpx_mod.Response(200, json=body, request=request)

        async def aclose(self) -> None:
            await self.inner.aclose()

    assert patches.replace_client_transport(server, Canned)
    reply = asyncio.run(server.openai.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}]))
    assert reply.id == "x" and len(sent) == 1 and sent[0].url.path.endswith("/chat/completions")
    assert not patches.replace_client_transport(object(), Canned)


def patches_httpx() -> Any:
    """The httpx module the openai client is built on (openai may ship its own copy)."""
    import openai._base_client as base

    return getattr(base, "httpx2", None) or base.httpx


def test_set_server_healthy_is_what_atroposlib_waits_on_and_routes_by() -> None:
    assert re.search(r"while not self\.server_healthy", _atropos_source("server_baseline"))
    assert re.search(r"\.server_healthy", _atropos_source("server_manager"))
    server = _server()
    patches.set_server_healthy(server, False)
    assert server.server_healthy is False
    patches.set_server_healthy(server, True)
    assert server.server_healthy is True


def test_set_manager_tool_parser_is_what_the_manager_hands_to_managed_servers() -> None:
    from atroposlib.envs.server_handling.server_manager import ServerManager

    assert re.search(r"tool_parser=self\.tool_parser", _atropos_source("server_manager"))
    assert "tool_parser" in inspect_params(ServerManager.__init__)
    holder = type("M", (), {})()
    patches.set_manager_tool_parser(holder, "hermes")
    assert holder.tool_parser == "hermes"


def inspect_params(fn: Any) -> set[str]:
    import inspect

    return set(inspect.signature(fn).parameters)


def test_tag_server_and_attempt_hooks_never_touch_atroposlib_names() -> None:
    from environments.lean_chat import LeanOpenAIServer

    server = _server()
    with pytest.raises(ValueError, match="_hermes_"):
        patches.tag_server(server, "server_healthy", 1)
    patches.tag_server(server, "_hermes_counted", 1)
    assert server._hermes_counted == 1
    assert not patches.set_attempt_hooks(server, print, 10)  # not a lean server: nothing written
    names = set(dir(_server()))
    assert not {"on_attempt_error", "max_reply_bytes"} & names  # ours, not atroposlib's
    assert {"on_attempt_error", "max_reply_bytes"} <= set(dir(LeanOpenAIServer))


def test_the_console_patches_servers_only_through_this_module() -> None:
    """No setattr on a server / manager, transport swap or server_healthy write left in the runtime."""
    from pathlib import Path

    runtime = Path(__file__).resolve().parents[2] / "hermes_console" / "runtime"
    pattern = re.compile(
        r"setattr\((?:server|manager)\b|\b(?:server|manager)\.[A-Za-z_]+\s*=[^=]|\._transport\s*=[^=]", re.M
    )
    offenders = [f"{p.name}: {m}" for p in sorted(runtime.glob("*.py")) for m in pattern.findall(p.read_text())]
    assert not offenders, offenders
