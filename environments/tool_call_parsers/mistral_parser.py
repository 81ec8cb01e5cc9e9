"""Upstream module path ``environments.tool_call_parsers.mistral_parser``: an alias of ``mistral``."""

from environments.tool_call_parsers.mistral import MistralToolCallParser

__all__ = ["MistralToolCallParser"]
