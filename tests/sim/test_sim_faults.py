"""Every fault kind, as a client sees it; changing faults at run time; counting them."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import httpx
import openai
import pytest

from hermes_console.sim import FAULT_KINDS, SimConfig, SimServer
from tests.sim.sim_helpers import first_turn


@pytest.fixture()
def faulty(sim):
    """The shared server with faults cleared before and after the test."""
    sim.set_faults(replace=True)
    yield sim
    sim.set_faults(replace=True)


def client(sim, timeout: float = 10) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{sim.base_url}/v1", api_key="x", max_retries=0, timeout=timeout)


async def chat(sim, tools, timeout: float = 10):
    async with client(sim, timeout) as c:
        return await c.chat.completions.create(model="m", messages=first_turn(), tools=tools)


async def test_http_500(faulty, sim_tools):
    faulty.set_faults(http_500=1.0)
    with pytest.raises(openai.APIStatusError) as ei:
        await chat(faulty, sim_tools)
    assert ei.value.status_code == 500


async def test_hang_times_the_client_out(faulty, sim_tools):
    faulty.set_faults(hang=1.0)
    with pytest.raises(openai.APITimeoutError):  # a guard firing instead would raise TimeoutError
        await asyncio.wait_for(chat(faulty, sim_tools, timeout=0.5), 30)
    for _ in range(50):  # the server notices the client left and frees the slot
        if faulty.stats()["in_flight"] == 0:
            break
        await asyncio.sleep(0.05)
    assert faulty.stats()["in_flight"] == 0


async def test_drop_connection(faulty, sim_tools):
    faulty.set_faults(drop_connection=1.0)
    with pytest.raises(openai.APIConnectionError):
        await chat(faulty, sim_tools)


async def test_malformed_tool_json(faulty, sim_tools):
    faulty.set_faults(malformed_tool_json=1.0)
    r = await chat(faulty, sim_tools)
    args = r.choices[0].message.tool_calls[0].function.arguments
    with pytest.raises(json.JSONDecodeError):
        json.loads(args)


async def test_unknown_tool(faulty, sim_tools):
    faulty.set_faults(unknown_tool=1.0)
    r = await chat(faulty, sim_tools)
    name = r.choices[0].message.tool_calls[0].function.name
    assert name not in {t["function"]["name"] for t in sim_tools}


async def test_empty_choices(faulty, sim_tools):
    faulty.set_faults(empty_choices=1.0)
    r = await chat(faulty, sim_tools)
    assert r.choices == []


async def test_garbage_text(faulty, sim_tools):
    faulty.set_faults(garbage_text=1.0)
    r = await chat(faulty, sim_tools)
    m = r.choices[0].message
    assert not m.tool_calls and m.content and r.choices[0].finish_reason == "stop"


async def test_unhealthy(faulty):
    async with httpx.AsyncClient() as c:
        assert (await c.get(f"{faulty.base_url}/health")).status_code == 200
        faulty.set_faults(unhealthy=1.0)
        assert (await c.get(f"{faulty.base_url}/health")).status_code == 503


async def test_faults_are_counted_in_stats(faulty, sim_tools):
    before = faulty.stats()["faults"]
    faulty.set_faults(garbage_text=1.0)
    await chat(faulty, sim_tools)
    await chat(faulty, sim_tools)
    after = faulty.stats()
    assert after["faults"]["garbage_text"] == before["garbage_text"] + 2
    assert after["fault_rates"] == {"garbage_text": 1.0}
    assert set(after["faults"]) == set(FAULT_KINDS)


async def test_admin_endpoint_changes_faults_at_run_time(faulty, sim_tools):
    url = f"{faulty.base_url}/admin/faults"
    async with aiohttp.ClientSession() as s:
        async with s.post(url, json={"empty_choices": 1.0}) as r:
            assert r.status == 200 and (await r.json())["faults"] == {"empty_choices": 1.0}
        assert (await chat(faulty, sim_tools)).choices == []
        async with s.post(url, json={"faults": {"nonsense": 0.5}}) as r:
            body = await r.json()
            assert r.status == 400 and "nonsense" in body["error"]["message"]
        async with s.post(url, json={"empty_choices": 2}) as r:
            assert r.status == 400
        async with s.delete(url) as r:
            assert (await r.json())["faults"] == {}
        async with s.get(url) as r:
            assert (await r.json())["faults"] == {}
        async with s.get(f"{faulty.base_url}/stats") as r:
            stats = await r.json()
            assert stats["requests"]["admin"] >= 5 and "latency_ms" in stats
    assert (await chat(faulty, sim_tools)).choices  # healthy again


async def test_partial_rates_are_deterministic_per_seed(sim_tools):
    async def run() -> list[str]:
        async with SimServer(SimConfig(seed=3, faults={"http_500": 0.5})) as s:
            out = []
            async with client(s) as c:
                for i in range(30):
                    msgs = first_turn(f"Create a file named f{i}.txt containing x")
                    try:
                        await c.chat.completions.create(model="m", messages=msgs, tools=sim_tools)
                        out.append("ok")
                    except openai.APIStatusError as e:
                        out.append(str(e.status_code))
            assert s.stats()["faults"]["http_500"] == out.count("500")
            return out

    first, second = await run(), await run()
    assert first == second and 5 < first.count("500") < 25


async def test_phase2_content_faults(faulty, tokenizer):
    faulty.set_faults(unknown_tool=1.0)
    from environments.tokenizer import chat_token_ids
    from tests.sim.sim_helpers import tool_schema

    ids = chat_token_ids(tokenizer, first_turn(), [tool_schema("terminal")], add_generation_prompt=True)
    async with aiohttp.ClientSession() as s:
        async with s.post(
            f"{faulty.base_url}/generate", json={"prompt": {"prompt_token_ids": ids}, "logprobs": 0, "max_tokens": 300}
        ) as r:
            body = await r.json()
    text = tokenizer.decode(body["token_ids"][0])
    first_call = json.loads(text.split("<tool_call>")[1].split("</tool_call>")[0])
    assert first_call["name"] != "terminal"  # the only tool offered
