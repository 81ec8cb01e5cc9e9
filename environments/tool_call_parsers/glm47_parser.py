"""Upstream module path ``environments.tool_call_parsers.glm47_parser``: an alias of ``glm``."""

from environments.tool_call_parsers.glm import Glm47ToolCallParser

__all__ = ["Glm47ToolCallParser"]
