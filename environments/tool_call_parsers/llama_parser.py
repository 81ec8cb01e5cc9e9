"""Upstream module path ``environments.tool_call_parsers.llama_parser``: an alias of ``llama``."""

from environments.tool_call_parsers.llama import LlamaToolCallParser

__all__ = ["LlamaToolCallParser"]
