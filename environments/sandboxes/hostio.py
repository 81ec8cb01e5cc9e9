"""Host-side file I/O on paths a sandbox can write to.

A sandbox may replace any file it can write with a symlink (to a host file), a FIFO
(blocks an open forever), a device (/dev/zero: endless data) or a huge sparse file.
Every host access to such a path goes through here: no symlink is followed, only
regular files are read or written, opens never block, and reads are size-capped.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path

PathLike = str | Path

_NOFOLLOW = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class UnsafeFileError(OSError):
    """A sandbox-writable path is not a plain regular file within bounds."""


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISLNK(mode):
        return "a symlink"
    return "not a regular file"


def _open(path: PathLike, flags: int, mode: int = 0o600, dir_fd: int | None = None) -> int:
    try:
        return os.open(path, flags | _NOFOLLOW, mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeFileError(errno.ELOOP, f"{path} is a symlink; refusing to follow it") from None
        if exc.errno == errno.ENXIO:  # O_WRONLY|O_NONBLOCK on a FIFO without reader
            raise UnsafeFileError(errno.ENXIO, f"{path} is a FIFO or socket, not a regular file") from None
        raise


def _check_regular(fd: int, path: PathLike, limit: int | None = None) -> os.stat_result:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeFileError(errno.EINVAL, f"{path} is {_kind(st.st_mode)}, not a regular file")
    if limit is not None and st.st_size > limit:
        raise UnsafeFileError(errno.EFBIG, f"{path} is {st.st_size} bytes, over the {limit}-byte limit")
    return st


def _read_fd(fd: int, limit: int, path: PathLike) -> bytes:
    os.set_blocking(fd, True)  # a regular file: blocking reads are fine and simpler
    chunks = []
    total = 0
    while True:
        chunk = os.read(fd, min(1 << 20, limit + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:  # grew after fstat
            raise UnsafeFileError(errno.EFBIG, f"{path} is over the {limit}-byte limit")
    return b"".join(chunks)


def read_regular(path: PathLike, limit: int, *, dir_fd: int | None = None) -> bytes:
    """Bytes of a regular file, at most ``limit``; no symlink followed, never blocks."""
    fd = _open(path, os.O_RDONLY, dir_fd=dir_fd)
    try:
        _check_regular(fd, path, limit)
        return _read_fd(fd, limit, path)
    finally:
        os.close(fd)


def write_new(path: PathLike, data: bytes, mode: int = 0o600) -> None:
    """Create ``path`` (must not exist: no symlink or file planted there is reused)."""
    fd = _open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        _write_all(fd, data)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


# ----------------------------------------------------------------- beneath a root


def _split(rel: str) -> list[str]:
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise UnsafeFileError(errno.EINVAL, f"relative path {rel!r} contains '..'")
    return parts


def _not_a_plain_dir(name: str, exc: OSError) -> Exception:
    return UnsafeFileError(exc.errno or errno.ELOOP, f"{name!r} on the way to the file is not a plain directory")


def open_dirs_beneath(
    start_fd: int, names: Sequence[str], create: bool, refuse: Callable[[str, OSError], Exception] = _not_a_plain_dir
) -> int:
    """A new fd on ``start_fd``/``names...``, walked one directory at a time without following
    any symlink: a component that is a link or a file (or is swapped for one mid-walk) fails
    with ELOOP/ENOTDIR, raised as ``refuse(name, error)``. Missing directories are made when
    ``create``. ``start_fd`` stays open and is the caller's."""
    fd = os.dup(start_fd)
    try:
        for name in names:
            if create:
                try:
                    os.mkdir(name, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
            try:
                nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise refuse(name, exc) from None
                raise
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def _open_parent(root: PathLike, parts: list[str], create: bool) -> int:
    """fd of the directory holding ``parts[-1]``, walking from ``root`` without following any symlink."""
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return open_dirs_beneath(root_fd, parts[:-1], create)
    finally:
        os.close(root_fd)


def read_beneath(root: PathLike, rel: str, limit: int) -> bytes:
    """Read ``root/rel`` (a regular file, at most ``limit`` bytes) with no symlink followed."""
    parts = _split(rel)
    if not parts:
        raise UnsafeFileError(errno.EISDIR, f"{root} is a directory, not a regular file")
    dfd = _open_parent(root, parts, create=False)
    try:
        return read_regular(parts[-1], limit, dir_fd=dfd)
    finally:
        os.close(dfd)


def write_beneath(root: PathLike, rel: str, data: bytes, *, make_parents: bool = True) -> None:
    """Write ``root/rel``: parents created as real dirs, no symlink followed, only a regular
    file (or a new one) written, and a FIFO never blocks us."""
    parts = _split(rel)
    if not parts:
        raise UnsafeFileError(errno.EISDIR, f"{root} is a directory, not a regular file")
    dfd = _open_parent(root, parts, create=make_parents)
    try:
        fd = _open(parts[-1], os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=dfd)
        try:
            _check_regular(fd, f"{root}/{rel}")
            os.set_blocking(fd, True)
            os.ftruncate(fd, 0)
            _write_all(fd, data)
        finally:
            os.close(fd)
    finally:
        os.close(dfd)


def lstat_kind(path: PathLike) -> str:
    """ "file" | "dir" | "missing" | "other" (symlinks count as other), never following."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "missing"
    except NotADirectoryError:
        return "missing"
    if stat.S_ISREG(st.st_mode):
        return "file"
    if stat.S_ISDIR(st.st_mode):
        return "dir"
    return "other"
