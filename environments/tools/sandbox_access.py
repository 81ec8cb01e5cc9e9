"""The one place tools reach the sandbox layer.

Imported lazily so the tool registry (schemas, toolsets, coercion) works even
where ``environments.sandboxes`` cannot be imported.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

# Set while reward code (ToolContext) calls the tools: see reward_side().
_REWARD_SIDE: ContextVar[bool] = ContextVar("hermes_reward_side", default=False)


def get_sandbox(task_id: str | None) -> Any:
    from environments.sandboxes import get_sandbox as _get

    return _get(task_id)


def execute(
    sandbox: Any, command: str, timeout: float, *, stdin_data: str | None = None, isolated: bool = False
) -> Any:
    """``sandbox.execute`` in the agent's shell, or in the verifier runner (``isolated``: reward
    code), passing only the keywords in use (a sandbox stand-in without a verifier runner is
    called the way it understands)."""
    kwargs: dict[str, Any] = {}
    if stdin_data is not None:
        kwargs["stdin_data"] = stdin_data
    if isolated:
        kwargs["isolated"] = True
    return sandbox.execute(command, timeout, **kwargs)


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


@contextlib.contextmanager
def reward_side() -> Iterator[None]:
    """Tool calls made inside run as reward code (``ToolContext``): their commands in the
    sandbox's verifier runner, never in the agent's shell (where the model's functions, aliases,
    PATH and exports live: its ``cat`` or ``base64`` would decide what the reward reads), and
    only after what the agent left running is stopped (as the first verifier command does)."""
    token = _REWARD_SIDE.set(True)
    try:
        yield
    finally:
        _REWARD_SIDE.reset(token)


def on_reward_side() -> bool:
    return _REWARD_SIDE.get()


def before_verification(sandbox: Any) -> None:
    """Stop the agent's leftover processes before reward code touches the sandbox without a
    command (a host-side file read): a loop the model left could be rewriting the file."""
    stop = getattr(sandbox, "before_verification", None)
    if stop is not None:
        stop()
