"""LongCat: the Hermes JSON payload inside ``<longcat_tool_call>`` tags.

Upstream fell back to ``(text, None)`` when an entry had no name; here it is skipped
and reported like every other malformed call (see ``base``).
"""

from __future__ import annotations

from environments.tool_call_parsers.hermes import HermesToolCallParser
from environments.tool_call_parsers.registry import register_parser


@register_parser("longcat")
class LongcatToolCallParser(HermesToolCallParser):
    name = "longcat"
    open_tag = "<longcat_tool_call>"
    close_tag = "</longcat_tool_call>"
    markers = ("<longcat_tool_call>",)
