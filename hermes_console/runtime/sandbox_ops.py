"""Operator commands on sandboxes: thin, blocking wrappers over
``environments.sandboxes`` (the host runs them in a worker thread)."""

from __future__ import annotations

import time
from dataclasses import fields
from typing import Any

from hermes_console.runtime.payloads import DiagnosticResult, SandboxDetails


def _require(task_id: str) -> Any:
    from environments import sandboxes

    info = sandboxes.get_sandbox_info(task_id)
    if info is None:
        # One short line for a toast: the usual cause is a sandbox that closed a moment ago.
        live = len(sandboxes.list_sandboxes())
        raise KeyError(f"sandbox {task_id[:12]} is closed (or never existed); {live} sandbox(es) live")
    return info


def kill(task_id: str) -> bool:
    from environments import sandboxes

    _require(task_id)
    return bool(sandboxes.kill_sandbox(task_id))


def extend(task_id: str, seconds: float) -> float:
    from environments import sandboxes

    _require(task_id)
    return float(sandboxes.extend_lifetime(task_id, seconds))


def extend_command(task_id: str, seconds: float) -> float:
    """More time for the running command (not the idle lifetime); returns its new timeout."""
    from environments import sandboxes

    _require(task_id)
    return float(sandboxes.extend_command_timeout(task_id, seconds))


def run(task_id: str, command: str, timeout_s: float = 10.0) -> DiagnosticResult:
    from environments import sandboxes
    from environments.redact import redact

    _require(task_id)
    result = sandboxes.run_diagnostic(task_id, command, timeout=timeout_s)
    return DiagnosticResult(
        output=redact(result.output),
        exit_code=result.exit_code,
        timed_out=result.timed_out,
        duration_s=result.duration_s,
    )


def details(task_id: str) -> SandboxDetails:
    """Info + process tree + cwd. Only looks up a sandbox that exists (never creates one)."""
    from environments import sandboxes

    info = _require(task_id)
    now = time.time()
    idle_s = max(0.0, now - info.last_activity)
    # Only the fields set here go on the wire (exclude_unset): the live part only for a live sandbox.
    out: dict[str, Any] = {f.name: getattr(info, f.name) for f in fields(info)}
    out.update(idle_s=idle_s, age_s=max(0.0, now - info.created_at), expires_in_s=max(0.0, info.lifetime_s - idle_s))
    out.update(process_tree=[], cwd=None)
    box = sandboxes.find_sandbox(task_id) if info.state != "closed" else None
    if box is not None:
        try:
            _live_details(task_id, box, out)
        except Exception as exc:  # noqa: BLE001 - it may close under us
            out["error"] = f"{type(exc).__name__}: {exc}"
    return SandboxDetails.model_validate(out)


def _live_details(task_id: str, box: Any, out: dict[str, Any]) -> None:
    """What only a live sandbox can tell (cwd, processes, limits, shell, the running command),
    into ``out`` one by one: what was read before a failure is kept."""
    from environments.redact import redact
    from environments.task_overrides import get_task_env_overrides

    out["cwd"] = box.cwd()
    out["process_tree"] = list(box.process_tree())
    out["limits"] = box.limits_summary() if hasattr(box, "limits_summary") else {}
    out["shell"] = box.shell_state() if hasattr(box, "shell_state") else {}
    live = box.live_output() if hasattr(box, "live_output") else None
    if live is not None:  # the running command's output so far, secrets masked like diagnostics
        live = {**live, "tail": redact(str(live.get("tail", ""))), "command": redact(str(live.get("command", "")))}
    out["live_output"] = live
    out["overrides"] = get_task_env_overrides(task_id)
