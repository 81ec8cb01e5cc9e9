"""Phase 1 wire shapes through the real openai client."""

from __future__ import annotations

import json

import aiohttp
import openai
import pytest

from hermes_console.sim import SimConfig, SimServer
from tests.sim.sim_helpers import ERROR_TASK, first_turn


@pytest.fixture()
async def oai(sim):
    async with openai.AsyncOpenAI(base_url=f"{sim.base_url}/v1", api_key="x", max_retries=0, timeout=10) as c:
        yield c


async def test_chat_with_tools_returns_openai_tool_calls(oai, sim_tools):
    r = await oai.chat.completions.create(model="hermes-sim", messages=first_turn(), tools=sim_tools)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls
    assert calls and all(c.id.startswith("call_") and c.type == "function" for c in calls)
    offered = {t["function"]["name"] for t in sim_tools}
    for c in calls:
        assert c.function.name in offered
        assert isinstance(json.loads(c.function.arguments), dict)  # a JSON *string*
    assert len({c.id for c in calls}) == len(calls)
    assert (choice.message.model_extra or {}).get("reasoning_content")
    assert r.usage.prompt_tokens > 20 and r.usage.completion_tokens > 5
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


async def test_a_whole_episode_ends_with_a_final_answer(sim_tools):
    async with (
        SimServer(SimConfig(solve_rate=1.0)) as s,
        openai.AsyncOpenAI(base_url=f"{s.base_url}/v1", api_key="x", max_retries=0, timeout=10) as c,
    ):
        msgs = first_turn()
        for _ in range(8):
            r = await c.chat.completions.create(model="m", messages=msgs, tools=sim_tools, temperature=0)
            m = r.choices[0].message
            msgs.append(m.model_dump(exclude_none=True))
            if not m.tool_calls:
                break
            for tc in m.tool_calls:
                out = "3\n" if "grep" in tc.function.arguments else ""
                msgs.append(
                    {"role": "tool", "tool_call_id": tc.id, "content": json.dumps({"output": out, "exit_code": 0})}
                )
    assert r.choices[0].finish_reason == "stop" and m.content and not m.tool_calls
    writes = [
        json.loads(tc["function"]["arguments"])
        for x in msgs
        for tc in x.get("tool_calls") or []
        if tc["function"]["name"] == "write_file"
    ]
    assert writes == [{"path": "error_count.txt", "content": "3\n"}]  # what grep printed


async def test_n_choices(oai, sim_tools):
    r = await oai.chat.completions.create(model="m", messages=first_turn(), tools=sim_tools, n=4)
    assert [c.index for c in r.choices] == [0, 1, 2, 3]


async def test_max_tokens_truncates_with_finish_length(oai, sim_tools):
    r = await oai.chat.completions.create(model="m", messages=first_turn(), tools=sim_tools, max_tokens=5)
    choice = r.choices[0]
    assert choice.finish_reason == "length"
    assert not choice.message.tool_calls
    assert r.usage.completion_tokens == 5


async def test_usage_prompt_tokens_grow_with_the_prompt(oai):
    c = oai
    short = await c.chat.completions.create(model="m", messages=first_turn("hi"))
    long = await c.chat.completions.create(model="m", messages=first_turn("hi " + "word " * 200))
    assert long.usage.prompt_tokens >= short.usage.prompt_tokens + 100


async def test_without_tools_the_answer_is_text(oai):
    r = await oai.chat.completions.create(model="m", messages=first_turn())
    assert r.choices[0].finish_reason == "stop" and r.choices[0].message.content
    assert not r.choices[0].message.tool_calls


async def test_tool_choice_none_means_no_calls(oai, sim_tools):
    r = await oai.chat.completions.create(model="m", messages=first_turn(), tools=sim_tools, tool_choice="none")
    assert not r.choices[0].message.tool_calls


@pytest.mark.parametrize(
    "kwargs, param",
    [
        ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages.0.role"),
        ({"messages": []}, "messages"),
        ({"messages": first_turn(), "n": 0}, "n"),
        ({"messages": first_turn(), "temperature": 7}, "temperature"),
        (
            {"messages": first_turn(), "tools": [{"type": "function", "function": {"description": "no name"}}]},
            "tools.0.function.name",
        ),
    ],
)
async def test_bad_requests_are_openai_400s(oai, kwargs, param):
    with pytest.raises(openai.BadRequestError) as ei:
        await oai.chat.completions.create(model="m", **kwargs)
    err = ei.value.body
    assert err["type"] == "invalid_request_error" and err["param"] == param
    assert param in err["message"]


async def test_malformed_json_and_unknown_route(sim):
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{sim.base_url}/v1/chat/completions", data=b"{not json") as r:
            body = await r.json()
            assert r.status == 400 and body["error"]["code"] == "invalid_json"
        async with s.post(f"{sim.base_url}/v1/chat/completions", json=[1, 2]) as r:
            assert r.status == 400
        async with s.get(f"{sim.base_url}/v1/nope") as r:
            assert r.status == 404 and "error" in await r.json()
        async with s.get(f"{sim.base_url}/v1/chat/completions") as r:
            assert r.status == 405


async def test_streaming_is_refused_clearly(oai):
    with pytest.raises(openai.BadRequestError, match="stream"):
        await oai.chat.completions.create(model="m", messages=first_turn(), stream=True)


async def test_models_and_completions(oai):
    c = oai
    models = await c.models.list()
    assert [m.id for m in models.data] == ["hermes-sim"]
    r = await c.completions.create(model="m", prompt="Once upon a time", max_tokens=3, n=2, logprobs=1)
    assert len(r.choices) == 2 and all(ch.finish_reason in ("length", "stop") for ch in r.choices)
    assert all(len(ch.logprobs.token_logprobs) <= 3 for ch in r.choices)
    assert all(lp < 0 for ch in r.choices for lp in ch.logprobs.token_logprobs)
    assert r.usage.prompt_tokens > 0


async def test_completions_on_a_chatml_prompt_act_like_the_model(oai, sim_tools, tokenizer):
    from environments.tokenizer import chat_token_ids

    ids = chat_token_ids(tokenizer, first_turn(ERROR_TASK), sim_tools, add_generation_prompt=True)
    r = await oai.completions.create(model="m", prompt=tokenizer.decode(ids), max_tokens=300)
    assert "<tool_call>" in r.choices[0].text
