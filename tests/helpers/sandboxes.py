"""Sandbox stand-ins shared by the tool and security tests, and a real local sandbox."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from environments import sandboxes as sb
from tests.helpers.waits import wait_for


def local_sandbox(tmp_path: Path, task_id: str) -> Iterator[sb.ManagedSandbox]:
    """A real local sandbox for ``task_id`` under ``tmp_path`` (a fixture body: ``yield from``);
    the registry is shut down and its configuration reset afterwards."""
    sb.reset_configuration()
    sb.configure(backend="local", sandbox_root=tmp_path / "root", kill_grace=0.3)
    try:
        yield sb.get_sandbox(task_id)
    finally:
        sb.shutdown()
        sb.reset_configuration()


def command_in_flight(task_id: str, command: str, timeout: float) -> tuple[threading.Thread, list[Any]]:
    """Start ``command`` in the sandbox of ``task_id`` on a thread and wait until the registry
    shows it running; returns the thread and the list its result lands in."""
    box = sb.get_sandbox(task_id)
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(box.execute(command, timeout)))
    thread.start()
    assert wait_for(lambda: sb.get_sandbox_info(task_id).state == "running")
    return thread, result


class ShellOnly:
    """A real sandbox that pretends to have no host view (like docker): file tools must
    go through the shell."""

    host_workspace: Path | None = None

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.task_id, self.backend, self.workspace = inner.task_id, "docker", inner.workspace

    def execute(self, command: str, timeout: float, *, stdin_data: str | None = None) -> Any:
        return self._inner.execute(command, timeout, stdin_data=stdin_data)

    def cwd(self) -> str:
        return str(self._inner.cwd())

    def to_host_path(self, path: str) -> Path:
        raise NotImplementedError("no host view")
