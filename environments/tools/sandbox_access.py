"""The one place tools reach the sandbox layer.

Imported lazily so the tool registry (schemas, toolsets, coercion) works even
where ``environments.sandboxes`` cannot be imported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def get_sandbox(task_id: str | None) -> Any:
    from environments.sandboxes import get_sandbox as _get

    return _get(task_id)


def default_timeout() -> float:
    """The sandbox settings' command timeout (TERMINAL_TIMEOUT)."""
    from environments.sandboxes import current_settings

    return float(current_settings().timeout)


def path_escape_error() -> type[Exception]:
    from environments.sandboxes import PathEscapeError

    return PathEscapeError


def cleanup_vm(task_id: str) -> None:
    from environments.sandboxes import cleanup_vm as _cleanup

    _cleanup(task_id)


def stop_vm(task_id: str) -> Callable[[], None]:
    """Stop the sandbox's processes now; returns the rest of its cleanup (see registry.stop_vm)."""
    from environments.sandboxes import stop_vm as _stop

    return _stop(task_id)
