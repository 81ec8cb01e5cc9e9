"""Parser registry: names, fresh instances, clear errors, stackable registration (behaviour 20)."""

from __future__ import annotations

import pytest

from environments.tool_call_parsers import (
    PARSER_REGISTRY,
    ToolCallParser,
    get_parser,
    list_parsers,
    register_parser,
)
from environments.tool_call_parsers.base import Extraction
from environments.tool_call_parsers.hermes import HermesToolCallParser
from environments.tool_call_parsers.llama import LlamaToolCallParser

EXPECTED = {
    "hermes",
    "qwen",
    "longcat",
    "mistral",
    "llama3_json",
    "llama4_json",
    "deepseek_v3",
    "deepseek_v3_1",
    "deepseek_v31",
    "kimi_k2",
    "glm45",
    "glm47",
    "qwen3_coder",
}


def test_every_expected_name_is_registered_and_listed_sorted() -> None:
    assert EXPECTED <= set(PARSER_REGISTRY)
    assert list_parsers() == sorted(PARSER_REGISTRY)


def test_aliases_share_a_class() -> None:
    assert PARSER_REGISTRY["hermes"] is HermesToolCallParser
    # qwen has its own class, as upstream (QwenToolCallParser), reading the hermes format
    assert issubclass(PARSER_REGISTRY["qwen"], HermesToolCallParser)
    assert PARSER_REGISTRY["llama4_json"] is PARSER_REGISTRY["llama3_json"] is LlamaToolCallParser
    assert PARSER_REGISTRY["deepseek_v31"] is PARSER_REGISTRY["deepseek_v3_1"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_get_parser_returns_a_new_instance_each_time(name: str) -> None:
    first, second = get_parser(name), get_parser(name)
    assert isinstance(first, PARSER_REGISTRY[name])
    assert isinstance(first, ToolCallParser)
    assert first is not second
    # Instances carry last_errors; sharing one would leak errors between rollouts.
    first.last_errors.append("x")
    assert second.last_errors == []


def test_unknown_name_lists_available_parsers() -> None:
    with pytest.raises(KeyError) as info:
        get_parser("no_such_model")
    message = info.value.args[0]
    assert message.startswith("Tool call parser 'no_such_model' not found. Available parsers: [")
    assert "'hermes'" in message and "'qwen3_coder'" in message


def test_register_parser_is_stackable_and_rejects_conflicts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("environments.tool_call_parsers.registry.PARSER_REGISTRY", dict(PARSER_REGISTRY))
    from environments.tool_call_parsers import registry

    @register_parser("test_alias_b")
    @register_parser("test_alias_a")
    class EchoParser(ToolCallParser):
        def _extract(self, text: str, start: int) -> Extraction:
            return Extraction()

        def format_tool_calls(self, content, calls) -> str:  # type: ignore[no-untyped-def]
            return content or ""

    assert registry.PARSER_REGISTRY["test_alias_a"] is registry.PARSER_REGISTRY["test_alias_b"] is EchoParser
    assert EchoParser.name == "test_alias_a"
    assert isinstance(registry.get_parser("test_alias_b"), EchoParser)
    assert "test_alias_a" not in PARSER_REGISTRY  # the real registry is untouched

    with pytest.raises(ValueError, match="already registered to EchoParser"):
        register_parser("test_alias_a")(HermesToolCallParser)
    with pytest.raises(TypeError, match="needs a ToolCallParser subclass"):
        register_parser("test_alias_c")(dict)  # type: ignore[type-var]
    with pytest.raises(ValueError, match="non-empty string"):
        register_parser("")
