"""Sandboxes: where the agent's terminal and file tools run (local, bwrap, docker).

Use the registry functions below; backends are created by ``get_sandbox`` according
to ``current_settings().backend`` (TERMINAL_ENV or ``configure(backend=...)``).
"""

from environments.sandboxes.base import (
    BashSessionSandbox,
    ExecResult,
    PathEscapeError,
    ProcessInfo,
    Sandbox,
    SandboxClosedError,
    SandboxUnavailable,
)
from environments.sandboxes.registry import (
    CommandRecord,
    ManagedSandbox,
    SandboxInfo,
    add_close_listener,
    cleanup_all_environments,
    cleanup_vm,
    extend_command_timeout,
    extend_lifetime,
    find_sandbox,
    get_sandbox,
    get_sandbox_info,
    kill_sandbox,
    list_sandboxes,
    reap_idle,
    remove_close_listener,
    run_diagnostic,
    shutdown,
    stop_vm,
)
from environments.sandboxes.settings import SandboxSettings, configure, current_settings, reset_configuration
from environments.sandboxes.stale import sweep_stale

__all__ = [
    # contract
    "get_sandbox",
    "cleanup_vm",
    "cleanup_all_environments",
    "list_sandboxes",
    "get_sandbox_info",
    "find_sandbox",
    "kill_sandbox",
    "extend_command_timeout",
    "extend_lifetime",
    "run_diagnostic",
    "configure",
    "current_settings",
    "SandboxSettings",
    "SandboxInfo",
    "CommandRecord",
    "ExecResult",
    "ProcessInfo",
    "PathEscapeError",
    "Sandbox",
    # lifecycle and extras
    "shutdown",
    "reap_idle",
    "stop_vm",
    "reset_configuration",
    "sweep_stale",
    "add_close_listener",
    "remove_close_listener",
    "ManagedSandbox",
    "BashSessionSandbox",
    "SandboxUnavailable",
    "SandboxClosedError",
]
