"""Backend name -> sandbox instance."""

from __future__ import annotations

from environments.sandboxes.base import BashSessionSandbox
from environments.sandboxes.settings import KNOWN_BACKENDS, UNAVAILABLE_BACKENDS, SandboxSettings
from environments.sandboxes.unavailable import unavailable_backend


def create_sandbox(task_id: str, settings: SandboxSettings) -> BashSessionSandbox:
    name = settings.backend
    if name == "local":
        from environments.sandboxes.local import LocalSandbox

        return LocalSandbox(task_id, settings)
    if name == "bwrap":
        from environments.sandboxes.bwrap import BwrapSandbox

        return BwrapSandbox(task_id, settings)
    if name == "docker":
        from environments.sandboxes.docker import DockerSandbox

        return DockerSandbox(task_id, settings)
    if name in UNAVAILABLE_BACKENDS:
        raise unavailable_backend(name)
    raise ValueError(f"unknown terminal backend {name!r}; expected one of {', '.join(KNOWN_BACKENDS)}")
