"""Upstream module path ``environments.tool_call_parsers.glm45_parser``: an alias of ``glm``."""

from environments.tool_call_parsers.glm import Glm45ToolCallParser

__all__ = ["Glm45ToolCallParser"]
