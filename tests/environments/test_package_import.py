"""`import environments` stands alone: no console, no Textual, no atroposlib until asked."""

from __future__ import annotations

import subprocess
import sys


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return out.stdout.strip()


def test_import_environments_pulls_in_neither_console_nor_textual_nor_atroposlib() -> None:
    loaded = _run(
        "import sys, environments, environments.tool_call_parsers, environments.tools, environments.sandboxes;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('hermes_console', 'textual', 'atroposlib')))"
    )
    assert loaded == "[]"


def test_seed_names_resolve_lazily() -> None:
    names = _run(
        "import environments as e;"
        "print(e.HermesAgentBaseEnv.__name__, e.HermesAgentEnvConfig.__name__, e.HermesAgentLoop.__name__,"
        " e.AgentResult.__name__, e.ToolContext.__name__, e.ToolError.__name__)"
    )
    assert names == "HermesAgentBaseEnv HermesAgentEnvConfig HermesAgentLoop AgentResult ToolContext ToolError"
