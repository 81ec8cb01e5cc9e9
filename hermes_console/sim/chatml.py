"""Recover a conversation from a ChatML prompt (the Phase 2 ``/generate`` path).

The prompt arrives as token ids rendered with ``environments.tokenizer.CHAT_TEMPLATE``;
the simulator decodes them and reads back system/tools, user, assistant (with
tool calls in text) and tool messages so the same policy can answer.
"""

from __future__ import annotations

import json
import re
from typing import Any

from hermes_console.sim.toolfmt import parse_tool_calls

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
_TOOLS_RE = re.compile(r"<tools>\n?(.*?)</tools>", re.DOTALL)
_THINK_RE = re.compile(r"<think>(.*?)</think>\n?", re.DOTALL)
_TOOLS_PREAMBLE = "You can call functions."


def parse_chatml(text: str, parser_name: str = "hermes") -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Return (messages, tools) in OpenAI shape. Unknown roles pass through as text."""
    messages: list[dict[str, Any]] = []
    tools: list[dict[str, Any]] = []
    for chunk in text.split(IM_START)[1:]:
        role, _, body = chunk.partition("\n")
        role = role.strip()
        if IM_END not in body:
            continue  # the open generation prompt (or a truncated tail)
        body = body.split(IM_END, 1)[0]
        if role == "system":
            m = _TOOLS_RE.search(body)
            if m:
                tools.extend(_read_tools(m.group(1)))
                body = body[: body.find(_TOOLS_PREAMBLE)] if _TOOLS_PREAMBLE in body else body[: m.start()]
            messages.append({"role": "system", "content": body.strip()})
        elif role == "assistant":
            reasoning = None
            t = _THINK_RE.search(body)
            if t:
                reasoning = t.group(1)
                body = body[: t.start()] + body[t.end() :]
            content, calls = parse_tool_calls(body, parser_name)
            msg: dict[str, Any] = {"role": "assistant", "content": content}
            if reasoning:
                msg["reasoning_content"] = reasoning
            if calls:
                msg["tool_calls"] = [
                    {
                        "id": f"call_{i}",
                        "type": "function",
                        "function": {
                            "name": c["name"],
                            "arguments": c["arguments"]
                            if isinstance(c["arguments"], str)
                            else json.dumps(c["arguments"]),
                        },
                    }
                    for i, c in enumerate(calls)
                ]
            messages.append(msg)
        else:
            messages.append({"role": role, "content": body})
    return messages, tools


def _read_tools(block: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for line in block.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out
