"""The Hermes agent layer for Atropos (atroposlib 0.4.0), maintained here.

The top-level names re-exported below are the seed contract. They are
imported lazily so ``environments.tool_call_parsers`` and the tools work
without atroposlib being importable (and without paying its ~3 s import).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AgentResult",
    "HermesAgentLoop",
    "ToolContext",
    "ToolError",
    "HermesAgentBaseEnv",
    "HermesAgentEnvConfig",
]

_LAZY = {
    "AgentResult": "environments.agent_loop",
    "HermesAgentLoop": "environments.agent_loop",
    "ToolError": "environments.agent_loop",
    "ToolContext": "environments.tool_context",
    "HermesAgentBaseEnv": "environments.hermes_base_env",
    "HermesAgentEnvConfig": "environments.hermes_base_env",
}


# hermes-agent's top-level modules (tools.terminal_tool, model_tools, toolsets, ...) for envs
# written for the original layer, when nothing else provides them; see upstream_imports.
from environments import upstream_imports as _upstream_imports  # noqa: E402

_upstream_imports.install()


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'environments' has no attribute {name!r}")
    import importlib

    module = importlib.import_module(module_name)
    return getattr(module, name)
