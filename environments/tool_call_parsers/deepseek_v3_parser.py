"""Upstream module path ``environments.tool_call_parsers.deepseek_v3_parser``: an alias of ``deepseek``."""

from environments.tool_call_parsers.deepseek import DeepSeekV3ToolCallParser

__all__ = ["DeepSeekV3ToolCallParser"]
