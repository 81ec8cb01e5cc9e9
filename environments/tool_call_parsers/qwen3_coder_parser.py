"""Upstream module path ``environments.tool_call_parsers.qwen3_coder_parser``: an alias of ``qwen3_coder``."""

from environments.tool_call_parsers.qwen3_coder import Qwen3CoderToolCallParser

__all__ = ["Qwen3CoderToolCallParser"]
