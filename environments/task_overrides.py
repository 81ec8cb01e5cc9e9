"""Per-task sandbox overrides: what an env asks for one task's sandbox (image, cwd, ...).

The original layer kept these in ``tools.terminal_tool`` (``register_task_env_overrides``
/ ``clear_task_env_overrides``); benchmark envs register them before a task's rollout
and clear them after. This module is the one place they are stored. The sandboxes
read them with :func:`get_task_env_overrides` when creating the sandbox of a task id.

Keys the original layer used (others are kept as given, for forward compatibility):

* ``docker_image``, ``modal_image``, ``singularity_image``, ``daytona_image``: the image
  of the task's container;
* ``cwd``: the working directory inside the sandbox (TB2 uses ``/app``);
* ``rootfs``: a directory holding an unpacked image root, or an OCI image layout /
  ``docker save`` tarball (unpacked once per content hash, environments/sandboxes/rootfs.py),
  used by bwrap as the read-only lower layer of the task's machine (see factory.py).

Overrides are read when the task's sandbox is created: clear them (and ``cleanup_vm``)
between tasks that reuse a task id.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

KNOWN_KEYS = frozenset({"docker_image", "modal_image", "singularity_image", "daytona_image", "cwd", "rootfs"})

_lock = threading.Lock()
_overrides: dict[str, dict[str, Any]] = {}


def _check_task_id(task_id: Any, where: str) -> str:
    if not isinstance(task_id, str) or not task_id:
        raise ValueError(f"{where}: task_id must be a non-empty string, got {task_id!r}")
    return task_id


def register_task_env_overrides(task_id: str, overrides: Mapping[str, Any]) -> None:
    """Set the overrides of ``task_id`` (replacing earlier ones); a copy is stored."""
    _check_task_id(task_id, "register_task_env_overrides")
    if not isinstance(overrides, Mapping):
        raise TypeError(
            f"register_task_env_overrides: overrides must be a mapping like {{'docker_image': ..., 'cwd': ...}}, "
            f"got {type(overrides).__name__}"
        )
    bad = [k for k in overrides if not isinstance(k, str)]
    if bad:
        raise TypeError(f"register_task_env_overrides: override keys must be strings, got {bad!r}")
    with _lock:
        _overrides[task_id] = dict(overrides)


def clear_task_env_overrides(task_id: str) -> None:
    """Forget the overrides of ``task_id`` (no error if there were none)."""
    with _lock:
        _overrides.pop(task_id, None)


def get_task_env_overrides(task_id: str | None) -> dict[str, Any]:
    """The overrides registered for ``task_id`` (a copy), or ``{}``.

    This is the lookup for sandbox creation: call it with the task id the sandbox is for."""
    if task_id is None:
        return {}
    with _lock:
        return dict(_overrides.get(task_id, {}))


def list_task_env_overrides() -> dict[str, dict[str, Any]]:
    """Every registered task's overrides (copies), for inspection."""
    with _lock:
        return {task_id: dict(values) for task_id, values in _overrides.items()}
