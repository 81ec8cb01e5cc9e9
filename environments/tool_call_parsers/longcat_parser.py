"""Upstream module path ``environments.tool_call_parsers.longcat_parser``: an alias of ``longcat``."""

from environments.tool_call_parsers.longcat import LongcatToolCallParser

__all__ = ["LongcatToolCallParser"]
