"""Map a path the model gave (inside the sandbox's view) to the host file behind it.

Symlinks are followed the way the sandbox would follow them: an absolute link target
is read in the sandbox's view (``/workspace/x`` inside bwrap), not on the host. The
final, fully resolved path must stay inside the workspace, otherwise PathEscapeError.
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections import deque
from collections.abc import Callable
from pathlib import Path

from environments.sandboxes.records import PathEscapeError

_MAX_LINKS = 40  # same bound as the kernel's ELOOP


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def resolve_to_host(path: str, *, cwd: str, home: str, view_root: str, host_root: Path) -> Path:
    """Resolve ``path`` (relative to ``cwd``, or absolute in the view) to a host path.

    ``view_root`` is the workspace as the sandbox sees it, ``host_root`` the directory
    backing it (identical strings for the local backend).
    """
    if not isinstance(path, str):
        raise TypeError(f"path must be a str, got {type(path).__name__}")
    if not path.strip():
        raise ValueError("path is empty; expected a file path inside the workspace")
    if "\0" in path:
        raise ValueError(f"path {path!r} contains a NUL byte")
    if path == "~" or path.startswith("~/"):
        path = home + path[1:]
    view_path = path if path.startswith("/") else posixpath.join(cwd, path)
    host_root_str = str(host_root)

    def to_host(view: str) -> str | None:
        if not _under(view, view_root):
            return None  # outside the mapped area: we cannot (and need not) look at it
        return host_root_str + view[len(view_root.rstrip("/")) :]

    resolved = _follow(view_path, to_host)
    if not _under(resolved, view_root):
        raise PathEscapeError(f"path {path!r} resolves to {resolved}, which is outside the workspace {view_root}")
    host = to_host(resolved)
    assert host is not None
    return Path(host)


def _follow(view_path: str, to_host: Callable[[str], str | None]) -> str:
    queue = deque(view_path.split("/"))
    resolved = "/"
    links = 0
    while queue:
        part = queue.popleft()
        if part in ("", "."):
            continue
        if part == "..":
            resolved = posixpath.dirname(resolved)
            continue
        candidate = posixpath.join(resolved, part)
        host = to_host(candidate)
        if host is not None:
            try:
                st = os.lstat(host)
            except OSError:
                st = None  # does not exist (yet): keep going lexically
            if st is not None and stat.S_ISLNK(st.st_mode):
                links += 1
                if links > _MAX_LINKS:
                    raise PathEscapeError(f"too many levels of symbolic links resolving {view_path!r}")
                target = os.readlink(host)
                if target.startswith("/"):
                    resolved = "/"
                queue.extendleft(reversed(target.split("/")))
                continue
        resolved = candidate
    return resolved
