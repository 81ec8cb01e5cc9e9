"""An env written against the original layer's public surface (see test_public_surface.py), using
every upstream name an env author reaches for: keyword ``call_tool``, ``tc.function.name``
on parser results, a custom parser implementing only ``parse``, the old parser module
paths, and hermes-agent's own modules (``tools.terminal_tool`` overrides, ``model_tools``,
``toolsets``, ``toolset_distributions``, ``tools.*``).

What it saw is appended as JSON lines to ``$COMPAT_REPORT`` (if set), so tests can check
each name did what the contract says.
"""

import json
import os
import re
import uuid

from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from openai.types.chat import ChatCompletionMessageToolCall

from environments import HermesAgentBaseEnv, HermesAgentEnvConfig, ToolContext
from environments.agent_loop import AgentResult, HermesAgentLoop, ToolError  # noqa: F401 - upstream names
from environments.tool_call_parsers import ToolCallParser, get_parser, list_parsers, register_parser
from environments.tool_call_parsers.hermes_parser import HermesToolCallParser
from environments.tool_call_parsers.qwen_parser import QwenToolCallParser
from model_tools import get_tool_definitions, handle_function_call
from tools.budget_config import BudgetConfig
from tools.terminal_tool import (  # noqa: F401
    cleanup_all_environments,
    cleanup_vm,
    clear_task_env_overrides,
    get_active_env,
    register_task_env_overrides,
)
from tools.todo_tool import TodoStore, todo_tool
from tools.tool_result_storage import maybe_persist_tool_result
from toolset_distributions import get_distribution, sample_toolsets_from_distribution
from toolsets import resolve_toolset, validate_toolset

PARSER_NAME = "compat_upstream_xml"
_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)


@register_parser(PARSER_NAME)
class UpstreamStyleParser(ToolCallParser):
    """Written the upstream way: only ``parse``, real openai tool call objects."""

    parsed_calls = 0

    def parse(self, text):
        matches = list(_CALL.finditer(text or ""))
        if not matches:
            return text, None
        calls = []
        for m in matches:
            obj = json.loads(m.group(1))
            calls.append(
                ChatCompletionMessageToolCall(
                    id=f"call_{uuid.uuid4().hex[:8]}",
                    type="function",
                    function={"name": obj["name"], "arguments": json.dumps(obj.get("arguments", {}))},
                )
            )
        type(self).parsed_calls += len(calls)
        _report({"parser_calls": [tc.function.name for tc in calls]})
        content = text[: matches[0].start()].strip()
        return content or None, calls


TASKS = [
    {
        "prompt": "Create a file named greeting.txt containing exactly: hello world",
        "path": "greeting.txt",
        "expected": "hello world",
    },
    {"prompt": "Create a file named result.txt containing only the number 42.", "path": "result.txt", "expected": "42"},
]


def _report(record):
    path = os.getenv("COMPAT_REPORT")
    if path:
        with open(path, "a") as fh:
            fh.write(json.dumps(record) + "\n")


class UpstreamNamesEnv(HermesAgentBaseEnv):
    name = "compat-upstream-names"
    env_config_cls = HermesAgentEnvConfig

    @classmethod
    def config_init(cls):
        config = HermesAgentEnvConfig(
            enabled_toolsets=["terminal", "file"],
            max_agent_turns=6,
            group_size=2,
            total_steps=2,
            ensure_scores_are_not_same=False,
            use_wandb=False,
            terminal_backend="local",
            tool_call_parser=PARSER_NAME,
        )
        servers = [
            APIServerConfig(
                base_url=os.getenv("COMPAT_BASE_URL", "http://127.0.0.1:9001/v1"),
                model_name="hermes-sim",
                api_key="x",
                server_type=os.getenv("COMPAT_SERVER_TYPE", "vllm"),
                health_check=False,
            )
        ]
        return config, servers

    async def setup(self):
        self.iter = 0
        # Parser results: openai objects, read the upstream way.
        sample = '<tool_call>{"name": "terminal", "arguments": {"command": "ls"}}</tool_call>'
        _, qwen_calls = QwenToolCallParser().parse(sample)
        _, hermes_calls = get_parser("hermes").parse(sample)
        schemas = get_tool_definitions(enabled_toolsets=["terminal", "file"], quiet_mode=True)
        todo = json.loads(
            todo_tool(todos=[{"id": "1", "content": "solve", "status": "in_progress"}], store=TodoStore())
        )
        _report(
            {
                "setup": True,
                "qwen": [tc.function.name for tc in qwen_calls],
                "qwen_is_openai": all(isinstance(tc, ChatCompletionMessageToolCall) for tc in qwen_calls),
                "hermes_class": type(get_parser("hermes")).__name__ == HermesToolCallParser.__name__,
                "parser_listed": PARSER_NAME in list_parsers(),
                "schemas": sorted(s["function"]["name"] for s in schemas),
                "toolset_terminal": resolve_toolset("terminal"),
                "valid_file": validate_toolset("file"),
                "distribution": get_distribution("terminal_only") is not None,
                "sampled": sorted(sample_toolsets_from_distribution("terminal_only")),
                "todo_total": todo["summary"]["total"],
                "budget": BudgetConfig().preview_size,
            }
        )

    async def get_next_item(self):
        item = TASKS[self.iter % len(TASKS)]
        self.iter += 1
        return item

    def format_prompt(self, item):
        return item["prompt"]

    async def compute_reward(self, item, result: AgentResult, ctx: ToolContext):
        # Upstream benchmark envs register per-task overrides, then clear them.
        register_task_env_overrides(ctx.task_id, {"docker_image": "compat/image:1", "cwd": "/app"})
        try:
            from environments.task_overrides import get_task_env_overrides

            overrides = get_task_env_overrides(ctx.task_id)
        finally:
            clear_task_env_overrides(ctx.task_id)
        raw = ctx.call_tool(tool_name="terminal", arguments={"command": f"cat {item['path']}"})
        out = json.loads(raw)
        direct = json.loads(handle_function_call("terminal", {"command": "echo direct"}, task_id=ctx.task_id))
        stored = maybe_persist_tool_result("x" * 10, "terminal", "call_compat", ctx.task_id, BudgetConfig())
        tool_names = [
            tc["function"]["name"]
            for m in result.messages
            if m.get("role") == "assistant"
            for tc in m.get("tool_calls") or []
        ]
        _report(
            {
                "reward": True,
                "overrides": overrides,
                "active_env": get_active_env(ctx.task_id) is not None,
                "raw_is_str": isinstance(raw, str),
                "direct": direct.get("output"),
                "stored": stored,
                "tool_names": tool_names,
            }
        )
        return 1.0 if out.get("exit_code") == 0 and out.get("output", "").strip() == item["expected"] else 0.0

    async def evaluate(self, *args, **kwargs):
        return None


if __name__ == "__main__":
    UpstreamNamesEnv.cli()
