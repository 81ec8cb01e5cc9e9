"""Turns validated requests into response bodies (no HTTP here).

Both phases share one path: the policy picks an :class:`Action` per choice,
content faults may spoil it, and the action is rendered to model text and
token ids with the shared tokenizer. Phase 1 returns the structured message;
Phase 2 (``/generate``) returns the ids with deterministic logprobs.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from typing import Any

from hermes_console.sim.actions import Action
from hermes_console.sim.chatml import parse_chatml
from hermes_console.sim.config import SimConfig
from hermes_console.sim.faults import FaultInjector, apply_content_fault
from hermes_console.sim.policy import ScriptedPolicy, message_text, offered_tool_names
from hermes_console.sim.rng import digest, rng
from hermes_console.sim.stats import SimStats
from hermes_console.sim.tokens import SimTokenizer
from hermes_console.sim.toolfmt import format_tool_calls
from hermes_console.sim.wire import (
    ChatCompletionRequest,
    CompletionRequest,
    SGLangGenerateRequest,
    VLLMGenerateRequest,
)

_MSG_OVERHEAD = 4  # <|im_start|>, role, newline, <|im_end|> per message, roughly
_FILLER = (
    "The",
    " answer",
    " depends",
    " on",
    " the",
    " input",
    ".",
    " Let",
    " me",
    " check",
    " the",
    " files",
    " first",
    ",",
    " then",
    " write",
    " the",
    " result",
    ".",
)


@dataclass
class Generated:
    action: Action
    ids: list[int]  # output token ids; ends with eos unless truncated
    truncated: bool
    fault: str | None = None


@dataclass
class Result:
    body: Any
    prompt_tokens: int
    completion_tokens: int  # summed over choices
    longest: int  # longest choice, drives the tokens/s latency


@dataclass
class RequestKey:
    """Identity of one arrival of a request: body hash + how many times it came before."""

    body: bytes
    occurrence: int

    @property
    def tag(self) -> str:
        # Stable per arrival; ids are built from it without hashing again.
        return f"{self.body.hex()[:16]}{self.occurrence:04x}"


class Engine:
    def __init__(self, config: SimConfig, tok: SimTokenizer, faults: FaultInjector, stats: SimStats) -> None:
        self.config = config
        self.tok = tok
        self.faults = faults
        self.stats = stats
        self.policy = ScriptedPolicy(seed=config.seed, solve_rate=config.solve_rate)
        self._tools_count: dict[tuple[tuple[str, int, int], ...], int] = {}

    # ------------------------------------------------------------------ shared core

    def _samples(self, n: int, temperature: float | None, req_seed: int | None, key: RequestKey) -> list[int]:
        if temperature == 0:
            return [0] * n  # greedy: every choice (and every retry) is the same
        base = (req_seed + 1) * 7919 if req_seed is not None else key.occurrence
        return [base * 1024 + i for i in range(n)]

    def _generate(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        n: int,
        temperature: float | None,
        max_tokens: int | None,
        req_seed: int | None,
        key: RequestKey,
    ) -> list[Generated]:
        offered = offered_tool_names(tools)
        limit = max_tokens or self.config.default_max_tokens
        out = []
        for i, sample in enumerate(self._samples(n, temperature, req_seed, key)):
            action = self.policy.respond(messages, tools, sample=sample, offered=offered)
            fault = self.faults.content_fault(key.body, key.occurrence, i)
            if fault:
                self.stats.fault(fault)
                action = apply_content_fault(fault, action, offered, key.body, key.occurrence, i)
            ids = self.tok.encode(self.render(action)) + [self.tok.eos_id]
            truncated = len(ids) > limit
            out.append(Generated(action, ids[:limit] if truncated else ids, truncated, fault))
        return out

    def render(self, action: Action) -> str:
        """The assistant turn as model text (what Phase 2 returns as tokens)."""
        text = f"<think>{action.reasoning}</think>\n" if action.reasoning else ""
        if action.tool_calls:
            calls = [{"name": c.name, "arguments": c.arguments} for c in action.tool_calls]
            return text + format_tool_calls(action.content, calls, self.config.tool_call_format)
        return text + (action.content or "")

    def _logprobs(self, ids: list[int], key: RequestKey, choice: int) -> list[float]:
        r = rng(self.config.seed, "logprobs", key.body, key.occurrence, choice)
        eos = self.tok.eos_id
        # Mostly confident tokens with an occasional unsure one, always < 0.
        return [-0.002 if t == eos else -round(r.expovariate(4.0) + 1e-4, 6) for t in ids]

    def _call_id(self, key: RequestKey, choice: int, idx: int) -> str:
        return f"call_{key.tag}{choice:02x}{idx:02x}"

    def _tools_tokens(self, tools: list[dict[str, Any]]) -> int:
        # Clients resend the same schemas every turn; key the count on a cheap
        # fingerprint instead of serialising them per request.
        fp = tuple(
            (str(f.get("name")), len(f.get("description") or ""), len(f.get("parameters") or ()))
            for f in (t.get("function") or {} for t in tools)
        )
        n = self._tools_count.get(fp)
        if n is None:
            n = self.tok.count(json.dumps(tools))
            if len(self._tools_count) > 1024:
                self._tools_count.clear()
            self._tools_count[fp] = n
        return n

    def _prompt_tokens(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
        total = self._tools_tokens(tools) if tools else 0
        for m in messages:
            total += _MSG_OVERHEAD + self.tok.count(message_text(m.get("content")))
            if m.get("reasoning_content"):
                total += self.tok.count(m["reasoning_content"])
            for tc in m.get("tool_calls") or ():
                fn = tc.get("function") or {}
                args = fn.get("arguments", "")
                total += 8 + self.tok.count(args if isinstance(args, str) else json.dumps(args))
        return total

    # ------------------------------------------------------------------ Phase 1: OpenAI

    def chat(self, req: ChatCompletionRequest, data: dict[str, Any], key: RequestKey, empty: bool) -> Result:
        # ``data`` is the validated JSON: reading it beats dumping the models back to dicts.
        messages: list[dict[str, Any]] = data["messages"]
        tools: list[dict[str, Any]] | None = data.get("tools") or None
        if req.tool_choice == "none":
            tools = None  # the model must not call tools
        max_tokens = req.max_completion_tokens or req.max_tokens
        prompt_tokens = self._prompt_tokens(messages, tools)
        gens = [] if empty else self._generate(messages, tools, req.n, req.temperature, max_tokens, req.seed, key)
        choices = [self._chat_choice(g, i, key) for i, g in enumerate(gens)]
        completion_tokens = sum(len(g.ids) for g in gens)
        body = {
            "id": "chatcmpl-" + key.tag,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": req.model,
            "choices": choices,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
        return Result(body, prompt_tokens, completion_tokens, max((len(g.ids) for g in gens), default=0))

    def _chat_choice(self, g: Generated, index: int, key: RequestKey) -> dict[str, Any]:
        a = g.action
        msg: dict[str, Any] = {"role": "assistant", "content": a.content}
        if g.truncated:
            # Cut mid-reply: the partial text is all there is, no structured calls.
            text = self.tok.decode(g.ids)
            reasoning = None
            if text.startswith("<think>"):
                reasoning, _, text = text[len("<think>") :].partition("</think>")
                text = text.lstrip("\n")
            msg["content"] = text or None
            if reasoning:
                msg["reasoning_content"] = reasoning
            return {"index": index, "message": msg, "finish_reason": "length", "logprobs": None}
        if a.reasoning:
            msg["reasoning_content"] = a.reasoning
        if a.tool_calls:
            msg["tool_calls"] = [
                {
                    "id": self._call_id(key, index, j),
                    "type": "function",
                    "function": {
                        "name": c.name,
                        "arguments": c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments),
                    },
                }
                for j, c in enumerate(a.tool_calls)
            ]
        finish = "tool_calls" if a.tool_calls else "stop"
        return {"index": index, "message": msg, "finish_reason": finish, "logprobs": None}

    def completion(self, req: CompletionRequest, data: dict[str, Any], key: RequestKey, empty: bool) -> Result:
        prompts = self._completion_prompts(req.prompt)
        choices: list[dict[str, Any]] = []
        prompt_tokens = completion_tokens = longest = 0
        for p_idx, prompt in enumerate(prompts):
            prompt_tokens += self.tok.count(prompt)
            if empty:
                continue
            if "<|im_start|>assistant\n" in prompt[-40:]:
                # A chat-templated prompt: answer like the chat endpoint would, as text.
                messages, tools = parse_chatml(prompt, self.config.tool_call_format)
                gens = self._generate(messages, tools or None, req.n, req.temperature, req.max_tokens, req.seed, key)
                texts = [(self.tok.decode([t for t in g.ids if t != self.tok.eos_id]), g) for g in gens]
            else:
                texts = [self._filler(req.max_tokens or 16, key, i) for i in range(req.n)]
            for i, (text, g) in enumerate(texts):
                completion_tokens += len(g.ids)
                longest = max(longest, len(g.ids))
                choice: dict[str, Any] = {
                    "index": p_idx * req.n + i,
                    "text": (prompt + text) if req.echo else text,
                    "finish_reason": "length" if g.truncated else "stop",
                    "logprobs": None,
                }
                if req.logprobs is not None:
                    lps = self._logprobs(g.ids, key, i)
                    choice["logprobs"] = {
                        "tokens": [self.tok.token_text(t) for t in g.ids],
                        "token_logprobs": lps,
                        "top_logprobs": None,
                        "text_offset": None,
                    }
                choices.append(choice)
        body = {
            "id": "cmpl-" + key.tag,
            "object": "text_completion",
            "created": int(time.time()),
            "model": req.model,
            "choices": choices,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
        return Result(body, prompt_tokens, completion_tokens, longest)

    def _completion_prompts(self, prompt: Any) -> list[str]:
        if isinstance(prompt, str):
            return [prompt]
        if prompt and isinstance(prompt[0], int):
            return [self.tok.decode(prompt)]
        if prompt and isinstance(prompt[0], list):
            return [self.tok.decode(p) for p in prompt]
        return list(prompt) or [""]

    def _filler(self, max_tokens: int, key: RequestKey, i: int) -> tuple[str, Generated]:
        r = rng(self.config.seed, "filler", key.body, key.occurrence, i)
        words = [_FILLER[(r.randrange(len(_FILLER)) + j) % len(_FILLER)] for j in range(r.randint(4, 24))]
        text = "".join(words)
        ids = self.tok.encode(text)
        truncated = len(ids) > max_tokens
        if truncated:
            ids = ids[:max_tokens]
            text = self.tok.decode(ids)
        return text, Generated(Action(content=text), ids, truncated)

    # ------------------------------------------------------------------ Phase 2: /generate

    def _phase2(
        self,
        prompt_ids: list[int],
        n: int,
        temperature: float | None,
        max_tokens: int | None,
        key: RequestKey,
        empty: bool,
    ) -> list[Generated]:
        if empty:
            return []
        messages, tools = parse_chatml(self.tok.decode(prompt_ids), self.config.tool_call_format)
        return self._generate(messages, tools or None, n, temperature, max_tokens, None, key)

    def vllm_generate(self, req: VLLMGenerateRequest, data: dict[str, Any], key: RequestKey, empty: bool) -> Result:
        prompt_ids = req.prompt.prompt_token_ids if not isinstance(req.prompt, str) else self.tok.encode(req.prompt)
        gens = self._phase2(prompt_ids, req.n, req.temperature, req.max_tokens, key, empty)
        body: dict[str, Any] = {
            "text": [self.tok.decode(g.ids) for g in gens],
            "token_ids": [g.ids for g in gens],
            "logprobs": [
                [[{str(t): lp}] for t, lp in zip(g.ids, self._logprobs(g.ids, key, i))] for i, g in enumerate(gens)
            ],
            "finish_reasons": ["length" if g.truncated else "stop" for g in gens],
        }
        if req.prompt_logprobs is not None:
            body["prompt_logprobs"] = self._prompt_logprobs(prompt_ids, max(1, req.prompt_logprobs), key)
        completion = sum(len(g.ids) for g in gens)
        return Result(body, len(prompt_ids), completion, max((len(g.ids) for g in gens), default=0))

    def _prompt_logprobs(self, ids: list[int], k: int, key: RequestKey) -> list[dict[str, float] | None]:
        # vLLM's shape: None for the first position, then {token_id: logprob} with the actual token first.
        r = random.Random(digest(self.config.seed, "prompt_lp", key.body).hex())
        out: list[dict[str, float] | None] = [None]
        for t in ids[1:]:
            lp = -round(r.expovariate(1.5) + 1e-4, 6)
            entry = {str(t): lp}
            for j in range(1, k):
                entry.setdefault(str((t + j * 37) % self.tok.vocab_size), round(lp - 0.5 * j - r.random(), 6))
            out.append(entry)
        return out

    def sglang_generate(self, req: SGLangGenerateRequest, data: dict[str, Any], key: RequestKey, empty: bool) -> Result:
        sp = req.sampling_params
        prompt_ids = req.input_ids if req.input_ids is not None else self.tok.encode(req.text or "")
        gens = self._phase2(prompt_ids, sp.n, sp.temperature, sp.max_new_tokens, key, empty)
        results = []
        for i, g in enumerate(gens):
            finish: dict[str, Any] = (
                {"type": "length", "length": len(g.ids)}
                if g.truncated
                else {"type": "stop", "matched": self.tok.eos_id}
            )
            meta: dict[str, Any] = {
                "id": f"{key.tag}{i:02x}",
                "finish_reason": finish,
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": len(g.ids),
                "cached_tokens": 0,
            }
            if req.return_logprob:
                lps = self._logprobs(g.ids, key, i)
                meta["output_token_logprobs"] = [
                    [lp, t, self.tok.token_text(t) if req.return_text_in_logprobs else None]
                    for t, lp in zip(g.ids, lps)
                ]
            results.append({"text": self.tok.decode(g.ids), "output_ids": g.ids, "meta_info": meta})
        body: Any = results[0] if sp.n == 1 and len(results) == 1 else results
        completion = sum(len(g.ids) for g in gens)
        return Result(body, len(prompt_ids), completion, max((len(g.ids) for g in gens), default=0))
