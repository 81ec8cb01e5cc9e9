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
from typing import Any

import pytest

from environments.atropos_compat import tokenize_conversation
from tests.data.templates import templated_tokenizer

TEMPLATES = ["local", "qwen", "llama3"]
END_OF_TURN = {"local": "<|im_end|>", "qwen": "<|im_end|>", "llama3": "<|eot_id|>"}
HEADERS = {"local": "<|im_start|>", "qwen": "<|im_start|>", "llama3": "<|start_header_id|>"}

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "terminal",
            "description": "run a shell command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]


def _call(cid: str, command: str) -> dict[str, Any]:
    return {
        "id": cid,
        "type": "function",
        "function": {"name": "terminal", "arguments": json.dumps({"command": command})},
    }


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
    {
        "role": "assistant",
        "content": "Looking first.",
        "reasoning_content": "THINK_AAA plan it",
        "tool_calls": [_call("c1", "cat a.txt"), _call("c2", "ls")],
    },
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


def trained_runs(tokens: list[int], masks: list[int]) -> list[list[int]]:
    """Maximal runs of consecutive trained positions (independent of the code under test)."""
    runs: list[list[int]] = []
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


@pytest.mark.parametrize("path", ["fast", "exact"])
@pytest.mark.parametrize("messages", [REPRO, LONGER], ids=["repro", "longer"])
@pytest.mark.parametrize("with_tools", [False, True], ids=["no-tools", "tools"])
def test_masks_equal_atroposlib_oracle(kind_tok, messages, with_tools, path, monkeypatch):
    """Both ways of finding the spans (text boundaries / per-turn tokenization) match the oracle."""
    from atroposlib.utils.tokenize_for_trainer import tokenize_for_trainer

    from environments import atropos_compat

    calls = []
    real_build = atropos_compat._TextBoundaries.build
    if path == "exact":
        monkeypatch.setattr(atropos_compat._TextBoundaries, "build", staticmethod(lambda *a: None))
    else:
        monkeypatch.setattr(atropos_compat, "_turn_span_by_tokens", lambda *a: calls.append(a) or (0, 0))
    kind, tok = kind_tok
    tools = TOOLS if with_tools else None
    oracle = tokenize_for_trainer(_WithTools(tok, tools), messages, train_on_all_assistant_turns=True)
    tokens, masks = tokenize_conversation(tok, messages, tools=tools)
    assert tokens == list(oracle["tokens"])
    assert masks == list(oracle["masks"])
    assert not calls and real_build is not None  # the fast path handled every turn


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


def test_template_that_rewrites_history_is_counted_as_drift(tokenizer_path):
    """A Qwen3-like template shows reasoning only on the last assistant turn: earlier turns
    render differently inside the whole conversation. That is drift: counted, and never
    trains a token that is not the assistant's at that position."""
    from environments.atropos_compat import render_conversation

    tok = templated_tokenizer(tokenizer_path, "local")
    tok.chat_template = tok.chat_template.replace(
        "{% if message.get('reasoning_content') %}", "{% if message.get('reasoning_content') and loop.last %}"
    )
    rendered = render_conversation(tok, LONGER, tools=TOOLS)
    assert rendered.drift == 1  # the first assistant turn (the one with reasoning, not last)
    runs = [tok.decode(r, skip_special_tokens=False) for r in trained_runs(rendered.tokens, rendered.masks)]
    assert all("TOOL_OUTPUT_XYZ" not in r and "<|im_start|>" not in r for r in runs)
    assert runs[-1].startswith("ANSWER_BBB")


@pytest.mark.parametrize("setting", ["truncation", "padding"])
def test_a_backend_set_to_truncate_or_pad_gives_the_same_tokens(tokenizer_path, setting):
    """The fast path reads the rendering's tokens from the backend; one configured to
    truncate or pad (the tokenizer's own call turns both off) must not change them."""
    from environments.tokenizer import chat_token_ids

    tok = templated_tokenizer(tokenizer_path, "local")
    if setting == "truncation":
        tok.backend_tokenizer.enable_truncation(max_length=8)
    else:
        tok.backend_tokenizer.enable_padding(length=4096)
    tokens, masks = tokenize_conversation(tok, LONGER, tools=TOOLS)
    expected = chat_token_ids(templated_tokenizer(tokenizer_path, "local"), LONGER, tools=TOOLS)
    assert 8 < len(tokens) < 4096
    assert tokens == expected and len(masks) == len(tokens)


UNICODE = [
    {"role": "user", "content": "héllo ☃ 日本語 — naïve café 🙂"},
    {"role": "assistant", "content": "", "tool_calls": [_call("c1", "echo 'ünï ☃ 🙂' > ü.txt")]},
    {"role": "tool", "tool_call_id": "c1", "content": "wrote ü.txt\n\t  (3 bytes)"},
    {"role": "assistant", "content": "Fertig — ✓ 🙂"},
]


@pytest.mark.parametrize("parallelism", ["false", "true"])
@pytest.mark.parametrize("messages", [REPRO, LONGER, UNICODE], ids=["repro", "longer", "unicode"])
def test_token_boundaries_at_every_character(kind_tok, messages, parallelism, monkeypatch):
    """The fast path's boundary lookup, checked at every character of the rendering against
    an oracle built here from the plain encoding's offsets: the first token that starts at
    that character, or nothing when none does. Multi-byte text gives tokens that share a
    character (byte-level pieces), the case where a lookup could land on the wrong one."""
    from environments import atropos_compat

    monkeypatch.setenv("TOKENIZERS_PARALLELISM", parallelism)
    _kind, tok = kind_tok
    text = tok.apply_chat_template(messages, tools=TOOLS, tokenize=False)
    plain = tok.backend_tokenizer.encode(text, add_special_tokens=False)
    oracle: dict[int, int] = {len(text): len(plain.ids)}
    for index, (start, _end) in reversed(list(enumerate(plain.offsets))):
        oracle[start] = index  # reversed: the first token starting there wins
    fast = atropos_compat._TextBoundaries.build(tok, messages, TOOLS)
    assert fast is not None and fast.tokens == plain.ids
    found = {p: fast._end_of(text[:p]) for p in range(len(text) + 1)}
    assert found == {p: oracle.get(p) for p in range(len(text) + 1)}
    assert fast._end_of(text[:5] + "\x00") is None  # not a prefix of the rendering


def test_unicode_masks_equal_atroposlib_oracle(kind_tok):
    from atroposlib.utils.tokenize_for_trainer import tokenize_for_trainer

    _kind, tok = kind_tok
    oracle = tokenize_for_trainer(_WithTools(tok, TOOLS), UNICODE, train_on_all_assistant_turns=True)
    assert tokenize_conversation(tok, UNICODE, tools=TOOLS) == (list(oracle["tokens"]), list(oracle["masks"]))


def test_the_whole_rendering_is_reused_for_the_last_turn(kind_tok, monkeypatch):
    """Spans need two renderings per assistant turn; the last turn's end is the whole
    conversation, already rendered once: one rendering fewer, same tokens and masks."""
    from atroposlib.utils.tokenize_for_trainer import tokenize_for_trainer

    _kind, tok = kind_tok
    oracle = tokenize_for_trainer(_WithTools(tok, TOOLS), LONGER, train_on_all_assistant_turns=True)
    calls: list[int] = []
    real = tok.apply_chat_template
    monkeypatch.setattr(tok, "apply_chat_template", lambda chat, **kw: calls.append(len(chat)) or real(chat, **kw))
    assert tokenize_conversation(tok, LONGER, tools=TOOLS) == (list(oracle["tokens"]), list(oracle["masks"]))
    turns = sum(1 for m in LONGER if m["role"] == "assistant")
    assert LONGER[-1]["role"] == "assistant"
    assert len(calls) == 1 + 2 * turns - 1
    assert calls.count(len(LONGER)) == 1  # the whole conversation, rendered once
