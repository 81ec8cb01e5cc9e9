"""File access inside a sandbox workspace, for the file tools.

Two implementations of one small interface:

* ``HostFS`` (local, bwrap): the workspace is a host directory, so we read and
  write host files directly after ``sandbox.to_host_path`` (which resolves
  symlinks and refuses escapes). Fast and binary-exact. The workspace is
  sandbox-writable, so the actual open walks from the workspace root with no
  symlink followed (a path swapped for a link after the check fails), touches
  regular files only (a FIFO or device is refused, never blocks us) and checks
  the size before reading (``hostio``).
* ``ShellFS`` (docker): no host directory, so every operation is a shell
  command through ``sandbox.execute`` (base64 over stdin/stdout), guarded by a
  normalised-path check against the workspace (``realpath -m`` inside).

Paths handed around between the tools and the FS are *view* paths: absolute
paths as commands inside the sandbox see them.
"""

from __future__ import annotations

import base64
import io
import os
import posixpath
import shlex
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from environments.sandboxes.hostio import UnsafeFileError, lstat_kind, read_beneath, write_beneath
from environments.tools import sandbox_access

SKIP_DIRS = frozenset({".git", "node_modules", "__pycache__", ".venv", ".mypy_cache", ".pytest_cache"})
MAX_READ_BYTES = 50 * 1024 * 1024


class FileToolError(Exception):
    """A problem to report to the model as ``{"error": str(exc)}``."""


class OutsideWorkspaceError(FileToolError):
    """The path leads out of the workspace the file tools serve."""


@dataclass
class Stat:
    kind: str  # "file" | "dir" | "missing" | "other"
    size: int = 0


def _inside(path: str, root: str) -> bool:
    root = root.rstrip("/") or "/"
    return path == root or path.startswith(root + "/") or root == "/"


class HostFS:
    """Workspace backed by a host directory (local / bwrap sandboxes)."""

    def __init__(self, sandbox: Any) -> None:
        self.sandbox = sandbox
        self.workspace = posixpath.normpath(str(sandbox.workspace))
        self.host_root = Path(sandbox.host_workspace).resolve()
        self._cwd = posixpath.normpath(str(sandbox.cwd()))

    def outside(self, path: str) -> FileToolError:
        return OutsideWorkspaceError(f"path '{path}' is outside the sandbox workspace {self.workspace}")

    def resolve(self, path: str) -> str:
        escape = sandbox_access.path_escape_error()
        try:
            host = Path(self.sandbox.to_host_path(path)).resolve()
        except escape:
            raise self.outside(path) from None
        except (ValueError, TypeError) as exc:  # empty path, NUL byte...
            raise FileToolError(f"invalid path {path!r}: {exc}") from None
        # defence in depth: never trust a resolver we did not write
        if not host.is_relative_to(self.host_root):
            raise self.outside(path)
        rel = host.relative_to(self.host_root).as_posix()
        return posixpath.normpath(posixpath.join(self.workspace, rel)) if rel != "." else self.workspace

    def host(self, view: str) -> Path:
        rel = posixpath.relpath(view, self.workspace)
        return self.host_root if rel == "." else self.host_root / rel

    def display(self, view: str) -> str:
        if _inside(view, self._cwd) and view != self._cwd:
            return posixpath.relpath(view, self._cwd)
        return view

    def _rel(self, view: str) -> str:
        return posixpath.relpath(view, self.workspace)

    def stat(self, view: str) -> Stat:
        host = self.host(view)
        kind = lstat_kind(host)  # resolve() left no link in the path; one appearing now is "other"
        if kind == "file":
            try:
                return Stat("file", os.lstat(host).st_size)
            except OSError:
                return Stat("missing")
        return Stat(kind)

    def read(self, view: str, limit: int = MAX_READ_BYTES) -> bytes:
        try:
            return read_beneath(self.host_root, self._rel(view), limit)
        except UnsafeFileError as exc:
            raise FileToolError(f"refusing to read '{view}': {exc.strerror}") from None

    def write(self, view: str, data: bytes) -> bool:
        host = self.host(view)
        created = lstat_kind(host.parent) == "missing"
        try:
            write_beneath(self.host_root, self._rel(view), data)
        except UnsafeFileError as exc:
            raise FileToolError(f"refusing to write '{view}': {exc.strerror}") from None
        return created

    def walk(self, view: str, max_files: int, read: bool = True) -> Iterator[tuple[str, bytes | None]]:
        """(view path, content or None if unreadable/not read) for regular files under
        ``view``, not following symlinks that leave the workspace."""
        root = self.host(view)
        if lstat_kind(root) == "file":
            yield view, _safe_read(self.host_root, self._rel(view)) if read else None
            return
        count = 0
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
            for name in sorted(filenames):
                host = Path(dirpath) / name
                try:
                    real = host.resolve()
                except OSError:
                    continue
                if not real.is_relative_to(self.host_root) or lstat_kind(real) != "file":
                    continue  # symlink out of the workspace, device, FIFO, dangling link...
                count += 1
                if count > max_files:
                    return
                rel = host.relative_to(self.host_root).as_posix()
                content = _safe_read(self.host_root, real.relative_to(self.host_root).as_posix()) if read else None
                yield posixpath.join(self.workspace, rel), content

    def list_names(self, view_dir: str, max_files: int = 2000) -> list[str]:
        return [p for p, _ in _take(self._walk_names(view_dir), max_files)]

    def _walk_names(self, view_dir: str) -> Iterator[tuple[str, None]]:
        root = self.host(view_dir)
        if not root.is_dir():
            return
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
            for name in sorted(filenames):
                rel = (Path(dirpath) / name).relative_to(self.host_root).as_posix()
                yield posixpath.join(self.workspace, rel), None


def _take(it: Iterator[Any], n: int) -> Iterator[Any]:
    for i, item in enumerate(it):
        if i >= n:
            return
        yield item


def _safe_read(root: Path, rel: str) -> bytes | None:
    """Content of a regular file under root (None: too big, not regular, vanished)."""
    try:
        return read_beneath(root, rel, MAX_READ_BYTES)
    except OSError:
        return None


class ShellFS:
    """Workspace only reachable through commands (docker sandboxes)."""

    TIMEOUT = 60.0

    def __init__(self, sandbox: Any, *, isolated: bool = False) -> None:
        self.sandbox = sandbox
        self.workspace = posixpath.normpath(str(sandbox.workspace))
        self._cwd = posixpath.normpath(str(sandbox.cwd()))
        self.isolated = isolated  # reward code: the verifier runner, not the agent's shell

    def _run(self, script: str, stdin_data: str | None = None) -> tuple[str, int]:
        result = sandbox_access.execute(
            self.sandbox, script, self.TIMEOUT, stdin_data=stdin_data, isolated=self.isolated
        )
        return result.output or "", int(result.exit_code)

    def outside(self, path: str) -> FileToolError:
        return OutsideWorkspaceError(f"path '{path}' is outside the sandbox workspace {self.workspace}")

    def resolve(self, path: str) -> str:
        if not isinstance(path, str) or not path.strip() or "\0" in path:
            raise FileToolError(f"invalid path {path!r}: expected a non-empty file path inside the workspace")
        given = path
        if path == "~" or path.startswith("~/"):
            path = self.workspace + path[1:]  # $HOME is the workspace
        joined = posixpath.normpath(posixpath.join(self._cwd, path))
        if not _inside(joined, self.workspace):
            raise self.outside(given)
        # symlinks inside the container could still lead out of the workspace
        out, code = self._run(f"realpath -m -- {shlex.quote(joined)}")
        real = out.strip().splitlines()[-1] if code == 0 and out.strip() else joined
        if not _inside(posixpath.normpath(real), self.workspace):
            raise self.outside(given)
        return posixpath.normpath(real)

    def display(self, view: str) -> str:
        if _inside(view, self._cwd) and view != self._cwd:
            return posixpath.relpath(view, self._cwd)
        return view

    def stat(self, view: str) -> Stat:
        q = shlex.quote(view)
        out, _ = self._run(
            f"if [ -d {q} ]; then echo __DIR; elif [ -f {q} ]; then echo __SIZE=$(stat -c %s {q}); "
            f"elif [ -e {q} ]; then echo __OTHER; else echo __MISSING; fi"
        )
        if "__DIR" in out:
            return Stat("dir")
        if "__SIZE=" in out:
            return Stat("file", int(out.split("__SIZE=", 1)[1].split()[0] or 0))
        if "__OTHER" in out:
            return Stat("other")
        return Stat("missing")

    def read(self, view: str, limit: int = MAX_READ_BYTES) -> bytes:
        try:
            return shell_read_bytes(self.sandbox, view, self.TIMEOUT, limit=limit, isolated=self.isolated)
        except OSError as exc:
            raise FileToolError(f"could not read '{view}': {exc}") from None

    def write(self, view: str, data: bytes) -> bool:
        q, parent = shlex.quote(view), shlex.quote(posixpath.dirname(view))
        script = (
            f"if [ -e {q} ] && [ ! -f {q} ] || [ -L {q} ]; then echo __NOTREGULAR; exit 1; fi; "
            f"c=0; [ -d {parent} ] || c=1; mkdir -p {parent} && base64 -d > {q} && echo __CREATED=$c"
        )
        out, code = self._run(script, stdin_data=base64.b64encode(data).decode("ascii"))
        if "__NOTREGULAR" in out:
            raise FileToolError(f"refusing to write '{view}': it is not a regular file (FIFO, device, socket or link)")
        if code != 0 or "__CREATED=" not in out:
            raise FileToolError(f"could not write '{view}': {out.strip()[:300]}")
        return "__CREATED=1" in out

    def walk(self, view: str, max_files: int, read: bool = True) -> Iterator[tuple[str, bytes | None]]:
        """One tar of the tree over base64, unpacked in memory (symlinks skipped)."""
        st = self.stat(view)
        if st.kind == "file":
            yield view, self.read(view)
            return
        excludes = " ".join(f"--exclude={shlex.quote(d)}" for d in sorted(SKIP_DIRS))
        out, code = self._run(f"tar -C {shlex.quote(view)} {excludes} -cf - . 2>/dev/null | base64")
        try:
            archive = tarfile.open(fileobj=io.BytesIO(base64.b64decode(out)))
        except (tarfile.TarError, ValueError):
            raise FileToolError(f"could not list '{view}' in the sandbox (exit {code})") from None
        count = 0
        for member in sorted(archive.getmembers(), key=lambda m: m.name):
            if not member.isfile():
                continue
            count += 1
            if count > max_files:
                return
            name = posixpath.normpath(member.name)
            fh = archive.extractfile(member)
            yield posixpath.join(view, name), fh.read() if fh else None

    def list_names(self, view_dir: str, max_files: int = 2000) -> list[str]:
        out, code = self._run(
            f"find {shlex.quote(view_dir)} -maxdepth 4 -type f 2>/dev/null | head -n {int(max_files)}"
        )
        return [line for line in out.splitlines() if line.startswith("/")] if code == 0 else []


# Raw bytes per command: its base64 (4/3 larger) stays well under the sandbox's
# 1 MB output capture, which would otherwise cut the middle out.
SHELL_READ_CHUNK = 480_000


def shell_read_bytes(
    sandbox: Any, path: str, timeout: float = 60.0, *, limit: int = MAX_READ_BYTES, isolated: bool = False
) -> bytes:
    """Exact bytes of a file inside the sandbox, through commands only, in chunks.
    Raises FileNotFoundError / OSError with the shell's message; a file over ``limit``
    bytes is refused before any of it is read. ``isolated``: in the verifier runner, for
    reward code -- the agent's shell keeps the model's functions (a ``tail`` or ``base64``
    of its own would decide what is read)."""
    q = shlex.quote(path)

    def run(command: str) -> Any:
        return sandbox_access.execute(sandbox, command, timeout, isolated=isolated)

    result = run(f"if [ -f {q} ]; then echo __SIZE=$(wc -c < {q}); else echo __NOFILE; fi")
    out = result.output or ""
    if "__SIZE=" not in out:
        raise FileNotFoundError(f"no such file: {path}")
    size = int(out.split("__SIZE=", 1)[1].split()[0])
    if size > limit:
        raise OSError(f"{path} is {size} bytes, over the {limit}-byte read limit")
    data = bytearray()
    while len(data) < size:
        n = min(SHELL_READ_CHUNK, size - len(data))
        chunk = run(f"tail -c +{len(data) + 1} {q} | head -c {n} | base64")
        if chunk.exit_code != 0:
            raise OSError(f"reading {path} failed (exit {chunk.exit_code}): {(chunk.output or '').strip()[:300]}")
        try:
            piece = base64.b64decode(chunk.output or "")
        except ValueError as exc:
            raise OSError(f"reading {path}: undecodable output ({exc})") from None
        if not piece:
            break  # the file shrank while we read it
        data += piece
    return bytes(data)


def open_fs(task_id: str | None) -> HostFS | ShellFS:
    """The workspace of ``task_id``'s sandbox, as the caller may touch it: reward code
    (``sandbox_access.reward_side``) after the agent's leftovers are stopped, and through
    the verifier runner where files are reached by commands."""
    sandbox = sandbox_access.get_sandbox(task_id)
    reward = sandbox_access.on_reward_side()
    if reward:
        sandbox_access.before_verification(sandbox)
    if getattr(sandbox, "host_workspace", None) is not None:
        return HostFS(sandbox)
    return ShellFS(sandbox, isolated=reward)
