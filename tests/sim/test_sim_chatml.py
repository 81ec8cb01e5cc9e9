"""Reading a conversation back out of a ChatML prompt (the Phase 2 path)."""

from __future__ import annotations

import json

from environments.tokenizer import chat_token_ids
from hermes_console.sim.chatml import parse_chatml
from tests.sim.sim_helpers import tool_schema


def test_round_trip_through_the_chat_template(tokenizer):
    tools = [tool_schema("terminal"), tool_schema("write_file")]
    messages = [
        {"role": "system", "content": "Be careful."},
        {"role": "user", "content": "Count things."},
        {
            "role": "assistant",
            "content": "Looking.",
            "reasoning_content": "hmm",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "terminal", "arguments": '{"command": "grep -c x f"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"output": "3\\n"}'},
    ]
    text = tokenizer.decode(chat_token_ids(tokenizer, messages, tools, add_generation_prompt=True))
    got, got_tools = parse_chatml(text)
    assert [t["function"]["name"] for t in got_tools] == ["terminal", "write_file"]
    assert [m["role"] for m in got] == ["system", "user", "assistant", "tool"]
    assert got[0]["content"] == "Be careful." and got[1]["content"] == "Count things."
    asst = got[2]
    assert asst["content"] == "Looking." and asst["reasoning_content"] == "hmm"
    assert asst["tool_calls"][0]["function"]["name"] == "terminal"
    assert json.loads(asst["tool_calls"][0]["function"]["arguments"]) == {"command": "grep -c x f"}
    assert got[3]["content"] == '{"output": "3\\n"}'


def test_no_tools_and_no_system(tokenizer):
    text = tokenizer.decode(chat_token_ids(tokenizer, [{"role": "user", "content": "hi"}], None, True))
    got, tools = parse_chatml(text)
    assert tools == [] and got == [{"role": "user", "content": "hi"}]
