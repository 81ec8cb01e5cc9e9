"""The lean Phase 1 chat path (``environments.lean_chat``), checked against the openai client
itself on a loopback server: same request body and headers, same parsed completion, same
errors; malformed replies named; and a real run through the simulator and ServerManager."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import openai._models as openai_models
import pydantic
import pytest
from aiohttp import web
from atroposlib.envs.server_handling.server_baseline import APIServer, APIServerConfig
from atroposlib.envs.server_handling.server_manager import ServerManager
from openai.types.chat import ChatCompletion, ChatCompletionTokenLogprob

from environments import lean_chat
from environments.lean_chat import LeanOpenAIServer, MalformedReply, build_completion, server_class_for
from hermes_console.sim import SimConfig, SimServer
from tests.faults.bad_server import BadServer
from tests.sim.sim_helpers import TOOL_NAMES, first_turn, tool_schema

pytestmark = pytest.mark.timeout(90)

REPLY = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 7,
    "model": "m",
    "system_fingerprint": "fp",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "logprobs": None,
            "message": {
                "role": "assistant",
                "content": "",
                "reasoning_content": "look first",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "terminal", "arguments": '{"command": "ls"}'},
                    }
                ],
            },
        }
    ],
    "usage": {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14},
}


class Recorder:
    """Loopback server: records each request; answers from a script of (status, body) replies."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.script: list[tuple[int, Any]] = []
        self.base_url = ""

    async def _chat(self, request: web.Request) -> web.Response:
        self.requests.append((dict(request.headers), await request.read()))
        status, body = self.script.pop(0) if self.script else (200, REPLY)
        text = body if isinstance(body, str) else json.dumps(body)
        return web.Response(status=status, text=text, content_type="application/json")


@pytest.fixture
async def recorder() -> AsyncIterator[Recorder]:
    rec = Recorder()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", rec._chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    rec.base_url = f"http://127.0.0.1:{port}"
    try:
        yield rec
    finally:
        await runner.cleanup()


def _config(base_url: str, timeout: int = 30) -> APIServerConfig:
    return APIServerConfig(
        base_url=f"{base_url}/v1",
        api_key="k",
        model_name="m",
        server_type="openai",
        timeout=timeout,
        health_check=False,
    )


def _lean(base_url: str, timeout: int = 30) -> tuple[LeanOpenAIServer, list[str]]:
    server = LeanOpenAIServer(_config(base_url, timeout))
    notes: list[str] = []
    server.on_attempt_error = notes.append
    return server, notes


def _kwargs() -> dict[str, Any]:
    tools = [tool_schema(n) for n in TOOL_NAMES]
    return {
        "model": "m",
        "messages": first_turn(),
        "n": 1,
        "temperature": 0.7,
        "tools": tools,
        "max_tokens": 64,
        "extra_body": {"skip_special_tokens": False},
    }


async def test_same_request_same_completion_as_the_openai_client(recorder):
    client = openai.AsyncOpenAI(base_url=f"{recorder.base_url}/v1", api_key="k", max_retries=0)
    lean, notes = _lean(recorder.base_url)
    try:
        expected = await client.chat.completions.create(**_kwargs())
        got = await lean._chat_completion_wrapper(**_kwargs())
        got_again = await lean._chat_completion_wrapper(**_kwargs())  # tool schemas from the cache
    finally:
        await client.close()
        await lean.aclose()
    (h_oai, b_oai), (h_lean, b_lean), (_, b_again) = recorder.requests
    assert json.loads(b_lean) == json.loads(b_oai) == json.loads(b_again)
    assert h_lean["Authorization"] == h_oai["Authorization"] == "Bearer k"
    assert h_lean["Content-Type"] == "application/json"
    assert got.model_dump() == expected.model_dump() == got_again.model_dump()
    call = got.choices[0].message.tool_calls[0]
    assert (call.id, call.function.name, call.function.arguments) == ("call_1", "terminal", '{"command": "ls"}')
    assert got.choices[0].message.reasoning_content == "look first"  # provider extras stay attributes
    assert notes == []


async def test_containers_json_accepts_give_the_openai_clients_body_and_objects_go_through_it(recorder):
    """Tuples and dict subclasses are JSON to both paths (the same body); an object is not JSON
    to the lean path, which then leaves the request to the openai client."""
    from collections import OrderedDict

    from environments.lean_chat import request_body

    def odd_kwargs() -> dict[str, Any]:
        kwargs = _kwargs()
        kwargs["messages"] = tuple(OrderedDict(m) for m in kwargs["messages"])
        return kwargs

    client = openai.AsyncOpenAI(base_url=f"{recorder.base_url}/v1", api_key="k", max_retries=0)
    lean, _notes = _lean(recorder.base_url)
    try:
        await client.chat.completions.create(**odd_kwargs())
        await lean._chat_completion_wrapper(**odd_kwargs())
    finally:
        await client.close()
        await lean.aclose()
    (_, b_oai), (_, b_lean) = recorder.requests
    assert json.loads(b_lean) == json.loads(b_oai)
    assert request_body(odd_kwargs(), {}) is not None

    class Opaque:
        pass

    with_object = _kwargs()
    with_object["messages"] = [*with_object["messages"], {"role": "user", "content": Opaque()}]
    assert request_body(with_object, {}) is None
    looped: list[Any] = []
    looped.append(looped)
    circular = _kwargs()
    circular["metadata"] = {"x": looped}
    assert request_body(circular, {}) is None


async def test_http_errors_match_the_openai_client_and_retry_like_it(recorder):
    bad_request = {"error": {"message": "messages: expected a list", "type": "invalid_request_error"}}
    client = openai.AsyncOpenAI(base_url=f"{recorder.base_url}/v1", api_key="k", max_retries=0)
    lean, notes = _lean(recorder.base_url)
    try:
        recorder.script = [(400, bad_request), (400, bad_request)]
        with pytest.raises(openai.BadRequestError) as want:
            await client.chat.completions.create(**_kwargs())
        with pytest.raises(openai.BadRequestError) as got:
            await lean._chat_completion_wrapper(**_kwargs())
        assert str(got.value) == str(want.value) and got.value.body == want.value.body
        assert len(recorder.requests) == 2 and notes == []  # a 400 is not retried, not a transport error
        # 5xx: retried by the client's rules, each failed attempt noted.
        recorder.script = [(500, {"error": {"message": "boom"}}), (503, "busy")]
        reply = await lean._chat_completion_wrapper(**_kwargs())
        assert reply.choices[0].message.tool_calls and len(recorder.requests) == 5
        assert notes == ["HTTP 500 from /chat/completions", "HTTP 503 from /chat/completions"]
        # A choice without a message is named, not turned into an empty answer.
        recorder.script = [(200, {"choices": [{"index": 0, "finish_reason": "stop"}]})]
        with pytest.raises(MalformedReply, match="choice 0 has no message object"):
            await lean._chat_completion_wrapper(**_kwargs())
        assert len(recorder.requests) == 6  # never retried by the client (x-should-retry: false)
    finally:
        await client.close()
        await lean.aclose()


def _variant(**changes: Any) -> dict[str, Any]:
    reply = json.loads(json.dumps(REPLY))
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        node: Any = reply
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[leaf] = value
    return reply


def _same_models(got: Any, want: Any, where: str = "completion") -> None:
    """Type, set fields, extras and values, level by level."""
    assert type(got) is type(want), where
    if isinstance(want, list):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            _same_models(g, w, f"{where}[{i}]")
        return
    if not isinstance(want, pydantic.BaseModel):
        assert got == want, where
        return
    assert got.model_fields_set == want.model_fields_set, where
    assert got.model_extra == want.model_extra, where
    for name in type(want).model_fields:
        _same_models(getattr(got, name), getattr(want, name), f"{where}.{name}")


REPLY_SHAPES = {
    "tool call and a provider extra": REPLY,
    "logprobs object": _variant(
        choices__0__logprobs={
            "content": [{"token": "a", "logprob": -1, "bytes": [97], "top_logprobs": []}],
            "refusal": None,
        }
    ),
    "usage details": _variant(
        usage={
            "prompt_tokens": 10,
            "completion_tokens": 4,
            "total_tokens": 14,
            "prompt_tokens_details": {"cached_tokens": 3},
            "completion_tokens_details": {"reasoning_tokens": 1},
        }
    ),
    "annotations, refusal, vLLM extras": _variant(
        choices__0__message__annotations=[
            {"type": "url_citation", "url_citation": {"url": "u", "title": "t", "start_index": 0, "end_index": 1}}
        ],
        choices__0__message__refusal=None,
        choices__0__stop_reason=None,
        prompt_logprobs=None,
        kv_transfer_params={"k": 1},
        queue_seconds=0.25,
    ),
    "plain answer": _variant(
        choices__0__message={"role": "assistant", "content": "42"}, choices__0__finish_reason="stop"
    ),
}


@pytest.mark.parametrize("shape", REPLY_SHAPES)
def test_a_reply_is_built_as_the_openai_client_parses_it(shape):
    """Oracle: openai's own ``construct_type``, what its client does with a 200 body."""
    reply = REPLY_SHAPES[shape]
    want = openai_models.construct_type(type_=ChatCompletion, value=json.loads(json.dumps(reply)))
    got = build_completion(json.dumps(reply).encode(), 64, None)
    _same_models(got, want)
    assert got.model_dump() == want.model_dump()


def test_built_values_skip_openais_per_field_walk_and_raw_json_still_takes_it(monkeypatch):
    calls: list[str] = []
    walk = openai_models._construct_field

    def counted(value: Any, field: Any, key: str) -> Any:
        calls.append(key)
        return walk(value, field, key)

    monkeypatch.setattr(openai_models, "_construct_field", counted)
    build_completion(json.dumps(REPLY).encode(), 64, None)
    assert calls == []  # every model of a plain reply is built without the walk
    build_completion(json.dumps(REPLY_SHAPES["logprobs object"]).encode(), 64, None)
    assert "logprobs" in calls  # a raw JSON object still goes through openai's construct
    # a model with a float field is left to openai's construct: an int there becomes a float
    token = lean_chat._construct(ChatCompletionTokenLogprob, token="a", logprob=-1, bytes=None, top_logprobs=[])
    assert type(token.logprob) is float and token.logprob == -1.0


@pytest.mark.parametrize(
    "mode, cause",
    [("garbage", "body is not JSON"), ("nochoices", "no choices in the reply"), ("huge", "reply larger than")],
)
async def test_malformed_200_replies_raise_with_the_cause(mode, cause):
    bad = BadServer(mode).start()
    lean, notes = _lean(bad.base_url)
    try:
        with pytest.raises(openai.InternalServerError) as err:
            await lean._chat_completion_wrapper(model="m", messages=first_turn())
    finally:
        await lean.aclose()
        bad.stop()
    assert isinstance(err.value, MalformedReply) and err.value.status_code == 502
    assert f"malformed reply (HTTP 200): {cause}" in str(err.value)
    assert bad.requests == 1 and len(notes) == 1 and cause in notes[0]


async def test_a_drip_feeding_server_is_cut_by_the_total_timeout():
    bad = BadServer("slowloris").start()
    lean, notes = _lean(bad.base_url, timeout=2)
    lean.max_retries = 0
    try:
        with pytest.raises(openai.APITimeoutError):
            await asyncio.wait_for(lean._chat_completion_wrapper(model="m", messages=first_turn()), 60)
    finally:
        await lean.aclose()
        bad.stop()
    assert len(notes) == 1 and "total per-request timeout" in notes[0]


async def test_a_refused_connection_is_an_api_connection_error():
    bad = BadServer("garbage").start()
    url = bad.base_url
    bad.stop()
    lean, notes = _lean(url)
    lean.max_retries = 0
    try:
        with pytest.raises(openai.APIConnectionError) as err:
            await lean._chat_completion_wrapper(model="m", messages=first_turn())
    finally:
        await lean.aclose()
    assert type(err.value.__cause__).__name__ == "ConnectError"  # what the openai client reports
    assert len(notes) == 1 and notes[0].startswith("ConnectError: ")


async def test_a_phase1_manager_uses_it_and_gets_native_tool_calls_from_the_simulator():
    async with SimServer(SimConfig(seed=7, solve_rate=1.0)) as sim:
        configs = [_config(sim.base_url)]
        assert server_class_for(configs, APIServer) is LeanOpenAIServer
        vllm = [_config(sim.base_url).model_copy(update={"server_type": "vllm"})]
        assert server_class_for(vllm, APIServer) is APIServer  # Phase 2 keeps atroposlib's choice
        manager = ServerManager(configs, server_class=server_class_for(configs, APIServer))
        [server] = manager.servers
        assert isinstance(server, LeanOpenAIServer)
        tools = [tool_schema(n) for n in TOOL_NAMES]
        try:
            reply = await manager.chat_completion(messages=first_turn(), tools=tools, n=2, max_tokens=256)
        finally:
            await server.aclose()
            await server.openai.close()
    assert [c.index for c in reply.choices] == [0, 1]
    calls = reply.choices[0].message.tool_calls
    assert calls and all(c.type == "function" and c.id for c in calls)
    assert {c.function.name for c in calls} <= set(TOOL_NAMES)
    assert all(isinstance(json.loads(c.function.arguments), dict) for c in calls)


def test_a_bare_env_that_never_closes_its_server_leaves_no_open_session():
    """atroposlib's process/serve never close their servers: the session closes with its loop."""
    bad = BadServer("nochoices").start()
    server, _ = _lean(bad.base_url)
    try:

        async def one_call() -> None:
            with pytest.raises(MalformedReply):
                await server._chat_completion_wrapper(model="m", messages=first_turn())

        asyncio.run(one_call())  # shuts the loop's async generators down, as atroposlib's CLI does
    finally:
        bad.stop()
    assert server._session is not None and server._session.closed


def test_tool_schemas_are_serialised_once_for_every_rollout_that_shares_them(monkeypatch):
    """Each rollout's loop holds its own list of the group's schema dicts: 300 rollouts
    (more than the cache holds lists) sharing them cost one serialisation, not 300; other
    schemas, or a changed list, get their own; the text is always the schemas' JSON."""
    from environments import lean_chat

    walks: list[int] = []
    real = lean_chat.plain_json
    monkeypatch.setattr(lean_chat, "plain_json", lambda v, depth=0: walks.append(1) or real(v, depth))
    schemas = [tool_schema(n) for n in TOOL_NAMES]
    cache: lean_chat.ToolsCache = {}
    bodies = [lean_chat.request_body({**_kwargs(), "tools": list(schemas)}, cache) for _ in range(300)]
    assert len(walks) == 1
    assert all(json.loads(b or b"")["tools"] == schemas for b in bodies)
    fewer = lean_chat.request_body({**_kwargs(), "tools": schemas[:1]}, cache)
    other = [*schemas[:-1], tool_schema("other_tool")]
    changed = lean_chat.request_body({**_kwargs(), "tools": other}, cache)
    as_tuple = lean_chat.request_body({**_kwargs(), "tools": tuple(schemas)}, cache)
    assert json.loads(fewer or b"")["tools"] == schemas[:1]
    assert json.loads(changed or b"")["tools"] == other
    assert as_tuple is None  # not a list: the openai client sends it
    assert len(walks) == 4
