"""What :class:`~hermes_console.runtime.api.RuntimeAPI` commands resolve with: one model per thing.

These shapes also cross the ``--listen`` wire (``POST /control/<command>`` answers), so they are
pydantic models: the listener dumps them to the JSON it always sent (:func:`to_wire`), and an
attached console parses that JSON back into the same models (``Model.model_validate``). Extra keys
from a newer host are ignored; a missing required key is an error naming the field.

Process and command rows reuse the sandbox layer's own records (:class:`ProcessInfo`,
:class:`CommandRecord`), so a process is a ``ProcessInfo`` from the sandbox to the screen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

from environments.sandboxes.records import ProcessInfo
from environments.sandboxes.registry import CommandRecord

__all__ = [
    "CommandRecord",
    "ControlReply",
    "DiagnosticResult",
    "EvalMetrics",
    "LiveOutput",
    "ProcessInfo",
    "RuntimeDiagnostics",
    "SandboxDetails",
    "ShellState",
    "to_wire",
]

EvalMetrics: TypeAlias = dict[str, object]
"""An evaluation's metrics as the env logged them (``eval/...`` name → value); the env picks the names."""


class _Payload(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class LiveOutput(_Payload):
    """The sandbox's running command and its output so far (secrets masked)."""

    command: str
    running_s: float
    bytes: int
    tail: str = ""


class ShellState(_Payload):
    """The persistent machine's shell (empty for a backend without one)."""

    shell_pid: int | None = None
    shell_uptime_s: float = 0.0
    shell_restarts: int = 0
    machine_restarts: int = 0
    busy: bool = False
    agent_processes_stopped: int = 0


class SandboxDetails(_Payload):
    """``sandbox_details``: the registry's info on one sandbox, plus what only a live one can tell
    (process tree, cwd, limits, shell, the running command's output). The live part stays at its
    default when the sandbox is closed; ``error`` says why it is missing when reading it failed."""

    # the registry's SandboxInfo
    task_id: str
    backend: str
    workspace: str
    state: str  # "idle" | "running" | "closed"
    created_at: float
    last_activity: float
    lifetime_s: float
    running_command: str | None = None
    running_since: float | None = None
    running_timeout_s: float | None = None
    recent_commands: list[CommandRecord] = Field(default_factory=list)  # newest last
    # derived at the time of the request
    idle_s: float = 0.0
    age_s: float = 0.0
    expires_in_s: float = 0.0
    # a live sandbox only
    cwd: str | None = None
    process_tree: list[ProcessInfo] = Field(default_factory=list)
    limits: dict[str, str] = Field(default_factory=dict)  # label → how it is enforced, as shown
    shell: ShellState = Field(default_factory=ShellState)
    live_output: LiveOutput | None = None
    overrides: dict[str, Any] = Field(default_factory=dict)  # the task's register_task_env_overrides(...)
    error: str | None = None


class DiagnosticResult(_Payload):
    """``run_in_sandbox``: an operator's diagnostic command (output secrets masked)."""

    output: str
    exit_code: int
    timed_out: bool = False
    duration_s: float


class ControlReply(_Payload):
    """The listener's answer to ``POST /control/<command>``: ``{"ok": true, "result": ...}`` or
    ``{"ok": false, "error": "..."}``. ``result`` is the command's payload as JSON."""

    ok: bool
    result: Any = None
    error: str | None = None


@dataclass(frozen=True)
class RuntimeDiagnostics:
    """``RuntimeHost.diagnostics()`` (leak checks, debugging): not a RuntimeAPI command, not on the wire."""

    tasks: list[str]  # names of the runtime loop's live tasks
    threads: list[str]  # names of the live threads
    in_flight: int
    phase: int
    get_next_item_calls: int


def to_wire(value: object) -> object:
    """A command's result as the JSON-ready value the listener sends (models as the dict they always
    were: only the fields that were set, so the wire shape did not change when they became models)."""
    if isinstance(value, BaseModel):
        return value.model_dump(exclude_unset=True)
    return value
