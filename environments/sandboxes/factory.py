"""Backend name -> sandbox instance, with the task's per-task overrides applied.

Overrides come from :mod:`environments.task_overrides` (upstream's
``register_task_env_overrides``): ``cwd`` (every backend; local maps it under its
workspace), ``rootfs`` (bwrap: an unpacked image directory, or an OCI / ``docker save`` tarball
unpacked once into a cache (rootfs.py), as the read-only lower layer), ``docker_image`` (docker). ``modal_image`` & co. name images for backends we do
not run; they are ignored (a rootfs or docker image is what we can use).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from environments.sandboxes.base import BashSessionSandbox
from environments.sandboxes.settings import KNOWN_BACKENDS, UNAVAILABLE_BACKENDS, SandboxSettings
from environments.sandboxes.unavailable import unavailable_backend
from environments.task_overrides import get_task_env_overrides

_log = logging.getLogger(__name__)


def _text(overrides: dict[str, Any], key: str) -> Any:
    value = overrides.get(key)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ValueError(f"task override {key!r} must be a non-empty string, got {value!r}")
    return value.strip() if isinstance(value, str) else None


def create_sandbox(task_id: str, settings: SandboxSettings) -> BashSessionSandbox:
    name = settings.backend
    overrides = get_task_env_overrides(task_id)
    cwd = _text(overrides, "cwd")
    if cwd is not None and not cwd.startswith("/"):
        raise ValueError(f"task override 'cwd' must be an absolute path like '/app', got {cwd!r}")
    if name == "local":
        from environments.sandboxes.local import LocalSandbox

        return LocalSandbox(task_id, settings, cwd=cwd)
    if name == "bwrap":
        from environments.sandboxes.bwrap import BwrapSandbox

        rootfs = _text(overrides, "rootfs")
        if rootfs is not None and os.path.isfile(rootfs):  # an image tarball: unpacked once per content hash
            from environments.sandboxes.rootfs import cache_dir_for, prepare_rootfs

            unpacked = prepare_rootfs(rootfs, cache_dir_for(settings.root))
            return BwrapSandbox(task_id, settings, rootfs=unpacked, cwd=cwd, rootfs_trusted=False)
        return BwrapSandbox(task_id, settings, rootfs=rootfs, cwd=cwd)
    if name == "docker":
        from environments.sandboxes.docker import DockerSandbox

        image = _text(overrides, "docker_image")
        if image is not None:
            settings = settings.model_copy(update={"docker_image": image})
        return DockerSandbox(task_id, settings, cwd=cwd)
    if name in UNAVAILABLE_BACKENDS:
        raise unavailable_backend(name)
    raise ValueError(f"unknown terminal backend {name!r}; expected one of {', '.join(KNOWN_BACKENDS)}")
