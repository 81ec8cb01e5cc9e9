"""The simulator through atroposlib's own server classes (Phase 1 and Phase 2)."""

from __future__ import annotations

import json
import warnings

import pytest

from tests.sim.sim_helpers import ERROR_TASK, first_turn


def _manager(sim, server_type: str, tokenizer_path: str):
    from atroposlib.envs.server_handling.server_manager import APIServerConfig, ServerManager

    cfg = APIServerConfig(
        base_url=f"{sim.base_url}/v1",
        api_key="x",
        model_name="hermes-sim",
        server_type=server_type,
        tokenizer_name=tokenizer_path,
        health_check=False,
        timeout=10,
    )
    sm = ServerManager([cfg])
    sm.tool_parser = "hermes"  # what HermesAgentBaseEnv sets from config.tool_call_parser
    return sm


async def test_openai_server_chat_with_tools(sim, sim_tools, tokenizer_path):
    from atroposlib.envs.server_handling.openai_server import OpenAIServer

    sm = _manager(sim, "openai", tokenizer_path)
    assert isinstance(sm.servers[0], OpenAIServer)
    r = await sm.chat_completion(messages=first_turn(), tools=sim_tools, n=3, max_tokens=400)
    assert len(r.choices) == 3
    assert all(c.finish_reason == "tool_calls" and c.message.tool_calls for c in r.choices)


async def test_vllm_tokens_and_logprobs(sim, tokenizer, tokenizer_path, sim_tools):
    from atroposlib.envs.server_handling.vllm_server import VLLMServer

    from environments.tokenizer import chat_token_ids

    sm = _manager(sim, "vllm", tokenizer_path)
    server = sm.servers[0]
    assert isinstance(server, VLLMServer)
    ids = chat_token_ids(tokenizer, first_turn(ERROR_TASK), sim_tools, add_generation_prompt=True)
    prompt, outs, lps, finishes = await server.tokens_and_logprobs_completion(
        input_ids=ids, n=2, max_tokens=400, temperature=1.0
    )
    assert prompt == ids and len(outs) == len(lps) == len(finishes) == 2
    for out, lp, fin in zip(outs, lps, finishes):
        assert len(out) == len(lp) and fin == "stop"
        assert out[-1] == tokenizer.eos_token_id  # ends like a real model
        assert all(isinstance(x, float) and x < 0 for x in lp)
        assert "<tool_call>" in tokenizer.decode(out)
    _, short, _, fin = await server.tokens_and_logprobs_completion(input_ids=ids, max_tokens=4)
    assert len(short[0]) == 4 and fin == ["length"]


async def test_vllm_prompt_logprobs(sim, tokenizer_path):
    sm = _manager(sim, "vllm", tokenizer_path)
    out = await sm.servers[0].get_logprobs(input_ids=[5, 6, 7, 8], top_k=2)
    assert out["prompt_tokens"] == [5, 6, 7, 8]
    assert len(out["prompt_topk_logprobs"]) == 4 and out["prompt_topk_token_ids"][1][0] == 6


@pytest.mark.parametrize("server_type", ["vllm", "sglang"])
async def test_managed_server_multi_turn(sim, sim_tools, tokenizer, tokenizer_path, server_type):
    sm = _manager(sim, server_type, tokenizer_path)
    msgs = first_turn(ERROR_TASK)
    contents = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "vLLM is not installed" from the translator
        async with sm.managed_server(tokenizer=tokenizer) as managed:
            for _ in range(8):
                r = await managed.chat_completion(messages=msgs, tools=sim_tools, max_tokens=600)
                text = r.choices[0].message.content
                contents.append(text)
                msgs.append({"role": "assistant", "content": text})
                if "<tool_call>" not in text:
                    break
                out = "3\n" if "grep -c" in text else ""
                msgs.append({"role": "tool", "content": json.dumps({"output": out, "exit_code": 0})})
            nodes = managed.get_state()["nodes"]
    assert "<tool_call>" in contents[0] and contents[0].endswith("<|im_end|>")
    assert '"error_count.txt"' in "".join(contents) and "<tool_call>" not in contents[-1]
    assert len(nodes) == 1  # every turn extended the same sequence
    node = nodes[0]
    assert len(node.tokens) == len(node.masked_tokens) == len(node.logprobs)
    first_prompt = len(tokenizer.encode(node.full_text.split("<|im_start|>assistant\n", 1)[0])) + 1
    assert all(m == -100 for m in node.masked_tokens[:first_prompt])
    trained = [i for i, m in enumerate(node.masked_tokens) if m != -100]
    assert trained and all(node.masked_tokens[i] == node.tokens[i] and node.logprobs[i] < 0 for i in trained)
    # one unmasked run per turn, and each decodes to exactly the text the client saw
    runs: list[list[int]] = []
    for i in trained:
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    assert len(runs) == len(contents)
    for run, text in zip(runs, contents):
        assert tokenizer.decode([node.tokens[i] for i in run], skip_special_tokens=False) == text
    assert node.full_text.endswith(contents[-1])
