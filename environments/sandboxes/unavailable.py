"""Backends upstream supported that hermes-console deliberately does not run."""

from __future__ import annotations

from environments.sandboxes.records import SandboxUnavailable
from environments.sandboxes.settings import RUNNABLE_BACKENDS, UNAVAILABLE_BACKENDS

_WHY = {
    "modal": "it needs Modal cloud credentials and the network",
    "daytona": "it needs a Daytona account and the network",
    "ssh": "it runs commands on a remote host",
    "singularity": "it needs Singularity/Apptainer images",
    "vercel_sandbox": "it needs a Vercel account and the network",
}


def unavailable_backend(name: str) -> SandboxUnavailable:
    """The error to raise for a known-but-unsupported backend name."""
    if name not in UNAVAILABLE_BACKENDS:
        raise ValueError(f"{name!r} is not one of the unavailable backends {', '.join(UNAVAILABLE_BACKENDS)}")
    return SandboxUnavailable(
        f"terminal backend {name!r} is not available in hermes-console ({_WHY[name]}); "
        f"use {', '.join(RUNNABLE_BACKENDS[:-1])} or {RUNNABLE_BACKENDS[-1]} (TERMINAL_ENV=local|bwrap|docker)"
    )
