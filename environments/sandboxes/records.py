"""Plain records and errors shared by every backend (re-exported by base.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ExecResult:
    output: str  # stdout+stderr merged (raw; the terminal tool strips ANSI/truncates)
    exit_code: int  # 124 on timeout, 130 if killed by the operator
    timed_out: bool = False
    duration_s: float = 0.0


@dataclass
class ProcessInfo:
    pid: int
    ppid: int
    command: str  # redacted, truncated
    state: str  # /proc state letter: R, S, D, Z, T...
    elapsed_s: float


class PathEscapeError(ValueError):
    """A path resolves outside the sandbox workspace."""


class SandboxUnavailable(RuntimeError):
    """A backend cannot run here (missing tool, no engine, unsupported backend)."""


class SandboxClosedError(RuntimeError):
    """The sandbox was cleaned up (reaped, killed, closed); get a fresh one."""
