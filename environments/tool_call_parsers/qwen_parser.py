"""Upstream module path ``environments.tool_call_parsers.qwen_parser``: an alias of ``hermes``."""

from environments.tool_call_parsers.hermes import QwenToolCallParser

__all__ = ["QwenToolCallParser"]
