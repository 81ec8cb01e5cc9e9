"""Upstream module path ``environments.tool_call_parsers.kimi_k2_parser``: an alias of ``kimi_k2``."""

from environments.tool_call_parsers.kimi_k2 import KimiK2ToolCallParser

__all__ = ["KimiK2ToolCallParser"]
