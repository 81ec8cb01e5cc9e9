"""Upstream module path ``environments.tool_call_parsers.hermes_parser``: an alias of ``hermes``."""

from environments.tool_call_parsers.hermes import HermesToolCallParser

__all__ = ["HermesToolCallParser"]
