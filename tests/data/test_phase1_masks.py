"""Phase 1 masks: exactly the assistant-generated spans of every assistant turn.

Two independent checks on real tokenizers (the repo's local one, plus Qwen- and
Llama-3-style templates built locally on it):
* oracle: atroposlib's own ``tokenize_for_trainer(train_on_all_assistant_turns=True)``
  gives the same tokens and masks;
* a span checker written here: decode every trained run of tokens and look at
  what text it holds.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List

import pytest

from environments.atropos_compat import tokenize_conversation
from tests.data.templates import templated_tokenizer

TEMPLATES = ["local", "qwen", "llama3"]
END_OF_TURN = {"local": "<|im_end|>", "qwen": "<|im_end|>", "llama3": "<|eot_id|>"}
HEADERS = {"local": "<|im_start|>", "qwen": "<|im_start|>", "llama3": "<|start_header_id|>"}

TOOLS = [{"type": "function", "function": {"name": "terminal", "description": "run a shell command",
                                           "parameters": {"type": "object",
                                                          "properties": {"command": {"type": "string"}}}}}]


def _call(cid: str, command: str) -> Dict[str, Any]:
    return {"id": cid, "type": "function",
            "function": {"name": "terminal", "arguments": json.dumps({"command": command})}}


# The repro from issue 11.
REPRO = [
    {"role": "user", "content": "Count the files please"},
    {"role": "assistant", "content": "", "tool_calls": [_call("c1", "ls | wc -l")]},
    {"role": "tool", "tool_call_id": "c1", "content": "TOOL_OUTPUT_XYZ"},
    {"role": "assistant", "content": "done"},
]

LONGER = [
    {"role": "system", "content": "SYSTEM_TEXT_QQQ be brief"},
    {"role": "user", "content": "USER_TEXT_WWW fix the file"},
    {"role": "assistant", "content": "Looking first.", "reasoning_content": "THINK_AAA plan it",
     "tool_calls": [_call("c1", "cat a.txt"), _call("c2", "ls")]},
    {"role": "tool", "tool_call_id": "c1", "content": "TOOL_OUTPUT_XYZ one"},
    {"role": "tool", "tool_call_id": "c2", "content": "TOOL_OUTPUT_XYZ two"},
    {"role": "assistant", "content": "", "tool_calls": [_call("c3", "echo fixed > a.txt")]},
    {"role": "tool", "tool_call_id": "c3", "content": "TOOL_OUTPUT_XYZ three"},
    {"role": "user", "content": "USER_TEXT_WWW again?"},
    {"role": "assistant", "content": "ANSWER_BBB all fixed"},
]


@pytest.fixture(scope="module", params=TEMPLATES)
def kind_tok(request, tokenizer_path):
    return request.param, templated_tokenizer(tokenizer_path, request.param)


def trained_runs(tokens: List[int], masks: List[int]) -> List[List[int]]:
    """Maximal runs of consecutive trained positions (independent of the code under test)."""
    runs: List[List[int]] = []
    prev = False
    for tok, mask in zip(tokens, masks):
        if mask != -100:
            if not prev:
                runs.append([])
            runs[-1].append(tok)
        prev = mask != -100
    return runs


class _WithTools:
    """Lets atroposlib's tokenize_for_trainer (which passes no tools) render the same prompt."""

    def __init__(self, tok: Any, tools: Any) -> None:
        self._tok, self._tools = tok, tools

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tok, name)

    def apply_chat_template(self, chat, **kw):
        return self._tok.apply_chat_template(chat, tools=self._tools, **kw)


@pytest.mark.parametrize("messages", [REPRO, LONGER], ids=["repro", "longer"])
@pytest.mark.parametrize("with_tools", [False, True], ids=["no-tools", "tools"])
def test_masks_equal_atroposlib_oracle(kind_tok, messages, with_tools):
    from atroposlib.utils.tokenize_for_trainer import tokenize_for_trainer

    kind, tok = kind_tok
    tools = TOOLS if with_tools else None
    oracle = tokenize_for_trainer(_WithTools(tok, tools), messages, train_on_all_assistant_turns=True)
    tokens, masks = tokenize_conversation(tok, messages, tools=tools)
    assert tokens == list(oracle["tokens"])
    assert masks == list(oracle["masks"])


@pytest.mark.parametrize("messages", [REPRO, LONGER], ids=["repro", "longer"])
def test_trained_text_is_exactly_the_assistant_turns(kind_tok, messages):
    kind, tok = kind_tok
    tokens, masks = tokenize_conversation(tok, messages, tools=TOOLS)
    assert len(tokens) == len(masks)
    assert all(m == -100 or m == t for t, m in zip(tokens, masks))
    runs = [tok.decode(r, skip_special_tokens=False) for r in trained_runs(tokens, masks)]
    assistants = [m for m in messages if m["role"] == "assistant"]
    assert len(runs) == len(assistants), runs  # one trained run per assistant turn, nothing else
    for text, msg in zip(runs, assistants):
        assert "TOOL_OUTPUT_XYZ" not in text
        assert "USER_TEXT_WWW" not in text and "SYSTEM_TEXT_QQQ" not in text
        assert HEADERS[kind] not in text  # role headers are the template's, not the model's
        assert END_OF_TURN[kind] in text  # the end-of-turn token is trained
        assert (msg["content"] or "") in text
        for call in msg.get("tool_calls") or []:
            assert json.loads(call["function"]["arguments"])["command"] in text
    if messages is REPRO:  # the repro: the tool call and the final answer are trained
        assert "ls | wc -l" in runs[0] and runs[1].startswith("done")


def test_prompt_messages_keeps_earlier_assistant_turns_masked(tokenizer):
    # e.g. few-shot examples inside the prompt: assistant turns before index 3 are not trained
    tokens, masks = tokenize_conversation(tokenizer, REPRO, prompt_messages=3)
    runs = [tokenizer.decode(r, skip_special_tokens=False) for r in trained_runs(tokens, masks)]
    assert len(runs) == 1 and runs[0].startswith("done")
