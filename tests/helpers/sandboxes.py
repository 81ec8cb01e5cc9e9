"""Sandbox stand-ins shared by the tool and security tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any


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
