"""Upstream module path ``environments.tool_call_parsers.deepseek_v3_1_parser``: an alias of ``deepseek``."""

from environments.tool_call_parsers.deepseek import DeepSeekV31ToolCallParser

__all__ = ["DeepSeekV31ToolCallParser"]
