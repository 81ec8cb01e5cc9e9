"""Embedded inference simulator: OpenAI chat (tool_calls), vLLM/SGLang ``/generate``,
``/health``, ``/stats``; a scripted agent policy; injectable faults.

Never imports Textual (import-linter contract).
"""

from hermes_console.sim.actions import Action, SimToolCall
from hermes_console.sim.config import FAULT_KINDS, LatencyConfig, SimConfig
from hermes_console.sim.policy import ScriptedPolicy
from hermes_console.sim.server import SimServer

__all__ = ["FAULT_KINDS", "Action", "LatencyConfig", "ScriptedPolicy", "SimConfig", "SimServer", "SimToolCall"]
