"""Client-side tool-call parsers: raw model text → OpenAI-style tool calls, and back.

Used in Phase 2 (the trainer sees raw text) and by the agent loop's fallback when a
Phase 1 server returns ``<tool_call>`` text without structured calls. Importing this
package registers every parser; look them up with ``get_parser(name)``.

Each ``parse`` returns ``(content, calls)``; calls are ``ToolCall`` objects: openai
``ChatCompletionMessageToolCall`` (``call.function.name``) that also read like the dict
``{"id", "type": "function", "function": {"name", "arguments": JSON str}}``. The
original layer's module paths (``hermes_parser``, ``qwen_parser``, ...) are aliases. Payloads
that look like calls but cannot be used are dropped and described in the parser's
``last_errors`` (the valid calls beside them are kept). See ``base`` for the contract.
"""

from __future__ import annotations

from environments.tool_call_parsers.base import ParseResult, ToolCall, ToolCallFunction, ToolCallParser

# Importing the family modules registers them (the decorators run at import).
from environments.tool_call_parsers.deepseek import DeepSeekV3ToolCallParser, DeepSeekV31ToolCallParser
from environments.tool_call_parsers.glm import Glm45ToolCallParser, Glm47ToolCallParser
from environments.tool_call_parsers.hermes import HermesToolCallParser, QwenToolCallParser
from environments.tool_call_parsers.kimi_k2 import KimiK2ToolCallParser
from environments.tool_call_parsers.llama import LlamaToolCallParser
from environments.tool_call_parsers.longcat import LongcatToolCallParser
from environments.tool_call_parsers.mistral import MistralToolCallParser
from environments.tool_call_parsers.qwen3_coder import Qwen3CoderToolCallParser
from environments.tool_call_parsers.registry import PARSER_REGISTRY, get_parser, list_parsers, register_parser

__all__ = [
    "PARSER_REGISTRY",
    "ParseResult",
    "ToolCall",
    "ToolCallFunction",
    "ToolCallParser",
    "get_parser",
    "list_parsers",
    "register_parser",
    "DeepSeekV3ToolCallParser",
    "DeepSeekV31ToolCallParser",
    "Glm45ToolCallParser",
    "Glm47ToolCallParser",
    "HermesToolCallParser",
    "KimiK2ToolCallParser",
    "LlamaToolCallParser",
    "LongcatToolCallParser",
    "MistralToolCallParser",
    "Qwen3CoderToolCallParser",
    "QwenToolCallParser",
]
