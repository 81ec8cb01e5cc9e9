"""Operator commands on sandboxes: thin, blocking wrappers over
``environments.sandboxes`` (the host runs them in a worker thread)."""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any


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


def run(task_id: str, command: str, timeout_s: float = 10.0) -> dict[str, Any]:
    from environments import sandboxes
    from environments.redact import redact

    _require(task_id)
    result = sandboxes.run_diagnostic(task_id, command, timeout=timeout_s)
    return {
        "output": redact(result.output),
        "exit_code": result.exit_code,
        "timed_out": result.timed_out,
        "duration_s": result.duration_s,
    }


def details(task_id: str) -> dict[str, Any]:
    """Info + process tree + cwd. Only looks up a sandbox that exists (never creates one)."""
    from environments import sandboxes

    info = _require(task_id)
    out: dict[str, Any] = asdict(info)
    now = time.time()
    out["idle_s"] = max(0.0, now - info.last_activity)
    out["age_s"] = max(0.0, now - info.created_at)
    out["expires_in_s"] = max(0.0, info.lifetime_s - out["idle_s"])
    out["process_tree"] = []
    out["cwd"] = None
    box = sandboxes.find_sandbox(task_id) if info.state != "closed" else None
    if box is not None:
        try:
            out["cwd"] = box.cwd()
            out["process_tree"] = [asdict(p) for p in box.process_tree()]
            out["limits"] = box.limits_summary() if hasattr(box, "limits_summary") else {}
            out["shell"] = box.shell_state() if hasattr(box, "shell_state") else {}
            live = box.live_output() if hasattr(box, "live_output") else None
            if live is not None:  # the running command's output so far, secrets masked like diagnostics
                from environments.redact import redact

                live["tail"] = redact(str(live.get("tail", "")))
                live["command"] = redact(str(live.get("command", "")))
            out["live_output"] = live
            from environments.task_overrides import get_task_env_overrides

            out["overrides"] = get_task_env_overrides(task_id)
        except Exception as exc:  # noqa: BLE001 - it may close under us
            out["error"] = f"{type(exc).__name__}: {exc}"
    return out
