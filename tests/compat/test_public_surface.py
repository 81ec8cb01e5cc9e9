"""The original layer's public surface (hermes-agent's ``environments/``, as released): names,
signatures and return types an env written for hermes-agent's ``environments/`` uses."""

from __future__ import annotations

import importlib
import inspect
import json
import uuid

import pytest
from openai.types.chat import ChatCompletionMessageToolCall

from environments.sandboxes import cleanup_vm
from environments.tool_context import ToolContext


@pytest.fixture
def ctx():
    context = ToolContext(f"compat-{uuid.uuid4().hex[:8]}")
    yield context
    cleanup_vm(context.task_id)


# ------------------------------------------------------------------ ToolContext


def test_call_tool_has_the_upstream_parameter_names():
    params = list(inspect.signature(ToolContext.call_tool).parameters)
    assert params[:3] == ["self", "tool_name", "arguments"]


def test_call_tool_with_upstream_keywords_returns_the_raw_json_string(ctx):
    raw = ctx.call_tool(tool_name="terminal", arguments={"command": "echo kw"})
    assert isinstance(raw, str) and json.loads(raw)["output"] == "kw\n"
    raw = ctx.call_tool("terminal", arguments={"command": "echo mixed"})
    assert json.loads(raw)["output"] == "mixed\n"


async def test_async_twin_takes_the_same_keywords(ctx):
    raw = await ctx.a_call_tool(tool_name="terminal", arguments={"command": "echo a"})
    assert json.loads(raw)["output"] == "a\n"


# ------------------------------------------------------------------ parsers

UPSTREAM_PARSER_MODULES = {
    # old module path -> (class name, registered name)
    "hermes_parser": ("HermesToolCallParser", "hermes"),
    "qwen_parser": ("QwenToolCallParser", "qwen"),
    "longcat_parser": ("LongcatToolCallParser", "longcat"),
    "mistral_parser": ("MistralToolCallParser", "mistral"),
    "llama_parser": ("LlamaToolCallParser", "llama3_json"),
    "deepseek_v3_parser": ("DeepSeekV3ToolCallParser", "deepseek_v3"),
    "deepseek_v3_1_parser": ("DeepSeekV31ToolCallParser", "deepseek_v3_1"),
    "kimi_k2_parser": ("KimiK2ToolCallParser", "kimi_k2"),
    "glm45_parser": ("Glm45ToolCallParser", "glm45"),
    "glm47_parser": ("Glm47ToolCallParser", "glm47"),
    "qwen3_coder_parser": ("Qwen3CoderToolCallParser", "qwen3_coder"),
}


@pytest.mark.parametrize("module", sorted(UPSTREAM_PARSER_MODULES))
def test_old_parser_module_paths_import_the_registered_class(module):
    from environments.tool_call_parsers import PARSER_REGISTRY, ToolCallParser

    class_name, registered = UPSTREAM_PARSER_MODULES[module]
    mod = importlib.import_module(f"environments.tool_call_parsers.{module}")
    cls = getattr(mod, class_name)
    assert issubclass(cls, ToolCallParser)
    assert PARSER_REGISTRY[registered] is cls
    # the package exports the class under the upstream name too
    assert getattr(importlib.import_module("environments.tool_call_parsers"), class_name) is cls


def test_parse_returns_openai_tool_call_objects_that_are_also_dict_accessible():
    from environments.tool_call_parsers import get_parser

    content, calls = get_parser("hermes").parse(
        'thinking aloud\n<tool_call>{"name": "terminal", "arguments": {"command": "ls"}}</tool_call>'
    )
    assert content == "thinking aloud"
    assert calls is not None and len(calls) == 1
    call = calls[0]
    assert isinstance(call, ChatCompletionMessageToolCall)
    assert call.type == "function" and call.function.name == "terminal"
    assert json.loads(call.function.arguments) == {"command": "ls"}
    # our own callers (and env code following the upstream skill's "tool calls are dicts") index them
    assert call["function"]["name"] == "terminal" and call.get("id") == call.id
    assert call == {
        "id": call.id,
        "type": "function",
        "function": {"name": "terminal", "arguments": call.function.arguments},
    }
    # and it validates as the openai model the upstream type hints name
    ChatCompletionMessageToolCall.model_validate(call.model_dump())


def test_upstream_style_parser_with_only_parse_can_be_instantiated_and_registered():
    from environments.tool_call_parsers import ToolCallParser, get_parser, register_parser
    from environments.tool_call_parsers.registry import PARSER_REGISTRY

    name = f"compat-only-parse-{uuid.uuid4().hex[:6]}"

    @register_parser(name)
    class OnlyParse(ToolCallParser):
        def parse(self, text):
            if not text.startswith("CALL "):
                return text, None
            return None, [
                ChatCompletionMessageToolCall(
                    id="call_1", type="function", function={"name": text[5:].strip(), "arguments": "{}"}
                )
            ]

    try:
        parser = get_parser(name)
        assert parser.parse("CALL todo")[1][0].function.name == "todo"
        assert parser.parse("hello") == ("hello", None)
    finally:
        PARSER_REGISTRY.pop(name, None)


def test_a_parser_implementing_nothing_is_refused_with_the_reason():
    from environments.tool_call_parsers import ToolCallParser

    class Nothing(ToolCallParser):
        pass

    with pytest.raises(TypeError, match="parse"):
        Nothing()


def test_re_executing_an_env_module_re_registers_its_parser():
    # An env file defining a parser, imported twice (a reload, or two loaders), must not fail.
    import types

    from environments.tool_call_parsers.registry import PARSER_REGISTRY

    name = f"compat-reload-{uuid.uuid4().hex[:6]}"
    source = (
        "from environments.tool_call_parsers import ToolCallParser, register_parser\n"
        f"@register_parser({name!r})\n"
        "class P(ToolCallParser):\n"
        "    def parse(self, text):\n"
        "        return text, None\n"
    )
    try:
        first, second = types.ModuleType("compat_reload_mod"), types.ModuleType("compat_reload_mod")
        exec(compile(source, "compat_reload_mod.py", "exec"), first.__dict__)
        exec(compile(source, "compat_reload_mod.py", "exec"), second.__dict__)
        assert PARSER_REGISTRY[name] is second.P
    finally:
        PARSER_REGISTRY.pop(name, None)


def test_call_tool_keeps_our_earlier_keywords_and_refuses_both_spellings(ctx):
    assert json.loads(ctx.call_tool(name="terminal", args={"command": "echo old"}))["output"] == "old\n"
    with pytest.raises(TypeError, match="both 'tool_name' and 'name'"):
        ctx.call_tool("terminal", {"command": "true"}, name="terminal")
    with pytest.raises(TypeError, match="missing the tool name"):
        ctx.call_tool(arguments={"command": "true"})
