"""Sandbox settings: env vars (TERMINAL_*) overlaid by explicit ``configure()`` calls.

The environment is re-read on every ``current_settings()`` call (as upstream did), so a
test or a launcher can change ``TERMINAL_*`` at runtime; explicit overrides always win.
"""

from __future__ import annotations

import math
import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

# Backends we run, and backends upstream had that we deliberately do not.
RUNNABLE_BACKENDS = ("local", "bwrap", "docker")
UNAVAILABLE_BACKENDS = ("modal", "daytona", "ssh", "singularity", "vercel_sandbox")
KNOWN_BACKENDS = RUNNABLE_BACKENDS + UNAVAILABLE_BACKENDS

DEFAULT_DOCKER_IMAGE = "nikolaik/python-nodejs:python3.11-nodejs20"


def default_sandbox_root() -> Path:
    return Path(tempfile.gettempdir()) / "hermes-sandboxes"


class SandboxSettings(BaseModel):
    """Everything a backend and the registry need to create and police sandboxes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: str = "local"
    timeout: float = Field(180.0, gt=0, description="default per-command timeout (s) for callers")
    lifetime: float = Field(300.0, gt=0, description="idle seconds before the reaper closes a sandbox")
    network: bool = False
    docker_image: str = DEFAULT_DOCKER_IMAGE
    docker_read_only: bool = Field(False, description="docker: read-only image root (writes: workspace, tmpfs only)")
    cpu: float = Field(1.0, gt=0, description="CPUs per sandbox (cgroup CFS quota / docker --cpus)")
    memory_mb: int = Field(5120, gt=0, description="memory per sandbox (cgroup; address space per process without one)")
    pids_limit: int = Field(256, gt=0, description="processes per sandbox (pids cgroup / docker --pids-limit)")
    cpu_time_s: int = Field(3600, gt=0, description="CPU seconds per process (RLIMIT_CPU)")
    file_size_mb: int = Field(4096, gt=0, description="largest file a sandbox process may write (RLIMIT_FSIZE)")
    tmp_size_mb: int = Field(512, gt=0, description="size of the sandbox's private /tmp (bwrap, docker tmpfs)")
    workspace_size_mb: int = Field(2048, gt=0, description="size of the whole workspace (a sized tmpfs; needs root)")
    env_passthrough: tuple[str, ...] = Field(
        (), description="extra host environment variable names the local backend passes through (allow-list)"
    )
    sandbox_root: Path | None = None  # None -> <tempdir>/hermes-sandboxes
    reaper_interval: float | None = Field(None, gt=0)  # None -> min(5, lifetime / 4)
    kill_grace: float = Field(0.5, ge=0, description="SIGTERM -> SIGKILL grace on timeout (s)")
    output_limit_bytes: int = Field(1_000_000, ge=1024, description="captured output cap (head + tail)")
    recent_commands: int = Field(50, ge=1, description="command records kept per sandbox")
    verifier_stops_agent: bool = Field(
        True,
        description="before reward code (ToolContext) first runs a command in a sandbox, kill the processes the "
        "agent left running there (same uid: a lingering process could rewrite the verifier's files); "
        "False for tasks whose tests talk to a service the agent started",
    )

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, value: str) -> str:
        name = value.strip().lower()
        if name in UNAVAILABLE_BACKENDS:  # refused when the config is read, not at the first tool call
            from environments.sandboxes.unavailable import unavailable_backend

            raise ValueError(str(unavailable_backend(name)))
        if name not in KNOWN_BACKENDS:
            raise ValueError(f"unknown terminal backend {value!r}; expected one of {', '.join(KNOWN_BACKENDS)}")
        return name

    @field_validator("timeout", "lifetime", "cpu", "kill_grace", "reaper_interval")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError(f"expected a finite number, got {value!r}")
        return value

    @field_validator("docker_image")
    @classmethod
    def _image(cls, value: str) -> str:
        if not value.strip() or any(c.isspace() for c in value.strip()):
            raise ValueError(f"expected a docker image reference like 'python:3.11-slim', got {value!r}")
        return value.strip()

    @property
    def root(self) -> Path:
        return self.sandbox_root or default_sandbox_root()

    @property
    def effective_reaper_interval(self) -> float:
        if self.reaper_interval is not None:
            return self.reaper_interval
        return max(0.05, min(5.0, self.lifetime / 4))


# ----------------------------------------------------------------- env vars


def _positive_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise ValueError
    return value


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _bool(text: str) -> bool:
    low = text.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ValueError


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise ValueError
    return value


# env var -> (settings field, parser, what we expected)
_ENV_VARS: dict[str, tuple[str, Callable[[str], Any], str]] = {
    "TERMINAL_ENV": ("backend", lambda s: s.strip(), f"one of {', '.join(KNOWN_BACKENDS)}"),
    "TERMINAL_TIMEOUT": ("timeout", _positive_float, "a positive number of seconds"),
    "TERMINAL_LIFETIME_SECONDS": ("lifetime", _positive_float, "a positive number of seconds"),
    "TERMINAL_NETWORK": ("network", _bool, "a boolean (1/0, true/false, yes/no, on/off)"),
    "TERMINAL_VERIFIER_STOPS_AGENT": ("verifier_stops_agent", _bool, "a boolean (1/0, true/false, yes/no, on/off)"),
    "TERMINAL_DOCKER_IMAGE": ("docker_image", lambda s: s, "a docker image reference"),
    "TERMINAL_DOCKER_READ_ONLY": ("docker_read_only", _bool, "a boolean (1/0, true/false, yes/no, on/off)"),
    "TERMINAL_CONTAINER_CPU": ("cpu", _positive_float, "a positive number of CPUs"),
    "TERMINAL_CONTAINER_MEMORY": ("memory_mb", _positive_int, "a positive integer number of MB"),
    "TERMINAL_PIDS_LIMIT": ("pids_limit", _positive_int, "a positive integer"),
    "TERMINAL_CPU_TIME": ("cpu_time_s", _positive_int, "a positive integer number of CPU seconds"),
    "TERMINAL_FILE_SIZE_MB": ("file_size_mb", _positive_int, "a positive integer number of MB"),
    "TERMINAL_TMP_SIZE_MB": ("tmp_size_mb", _positive_int, "a positive integer number of MB"),
    "TERMINAL_WORKSPACE_SIZE_MB": ("workspace_size_mb", _positive_int, "a positive integer number of MB"),
    "TERMINAL_ENV_PASSTHROUGH": (
        "env_passthrough",
        lambda s: tuple(n for n in s.replace(",", " ").split() if n),
        "a comma-separated list of environment variable names",
    ),
    "TERMINAL_SANDBOX_ROOT": ("sandbox_root", lambda s: Path(s), "a directory path"),
}


def settings_from_env(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """Parse the TERMINAL_* variables that are set; raise ValueError naming a bad one."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for var, (field_name, parse, expected) in _ENV_VARS.items():
        raw = env.get(var)
        if raw is None:
            continue
        try:
            parsed = parse(raw)
            SandboxSettings(**{field_name: parsed})  # field-level validation (e.g. backend names)
        except (ValueError, ValidationError):
            raise ValueError(f"environment variable {var}={raw!r} is malformed: expected {expected}") from None
        values[field_name] = parsed
    return values


# ----------------------------------------------------------------- overrides

_overrides: dict[str, Any] = {}
_overrides_lock = threading.Lock()


def configure(**overrides: Any) -> SandboxSettings:
    """Set explicit settings that win over env vars. ``name=None`` drops an override."""
    unknown = sorted(set(overrides) - set(SandboxSettings.model_fields))
    if unknown:
        raise ValueError(
            f"unknown sandbox setting(s) {', '.join(unknown)}; expected any of {', '.join(SandboxSettings.model_fields)}"
        )
    with _overrides_lock:
        merged = dict(_overrides)
        for key, value in overrides.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        try:
            SandboxSettings(**merged)  # validate before storing anything
        except ValidationError as exc:
            raise ValueError(f"invalid sandbox settings: {exc}") from None
        _overrides.clear()
        _overrides.update(merged)
    return current_settings()


def reset_configuration() -> None:
    """Forget every ``configure()`` override (tests, console restart)."""
    with _overrides_lock:
        _overrides.clear()


def current_settings() -> SandboxSettings:
    values = settings_from_env()
    with _overrides_lock:
        values.update(_overrides)
    return SandboxSettings(**values)
