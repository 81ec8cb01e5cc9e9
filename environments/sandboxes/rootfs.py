"""A task's ``rootfs`` from an image tarball: OCI image layout or ``docker save`` output.

:func:`prepare_rootfs` turns the ``rootfs`` override into a directory bwrap binds
read-only as the machine's lower layer: a directory is used as it is; a tarball is
unpacked once per content hash (sha256 of the tarball's bytes) into a cache dir and
reused by every later sandbox of any task naming the same bytes.

An image is untrusted input (downloaded, built by anyone), so the unpacker is our own,
not ``tarfile.extractall``:

* every member name is normalised and must stay inside the root: absolute names, ``..``
  components, NUL bytes, and paths that pass *through* a symlink (a layer that plants
  ``etc -> /etc`` then writes ``etc/passwd``) are refused (:class:`RootfsError`, the
  image is rejected as a whole, nothing is left half-unpacked in the cache);
* every path is created with ``*at`` calls on directory fds opened ``O_NOFOLLOW``, so
  no symlink is ever followed on the host, whatever the layers did before;
* hard links must name a regular file already inside the root;
* device nodes and fifos are skipped (bwrap gives the machine its own ``/dev``);
  setuid/setgid bits are dropped and files are owned by the console's user (the cache
  is on the host: a setuid-root binary there would be a host privilege escalation);
* caps on the number of members and the bytes written (a layer is a gzip stream: its
  declared sizes are what it may expand to);
* layers are applied in manifest order with whiteouts: ``.wh.<name>`` removes ``<name>``
  of lower layers, ``.wh..wh..opq`` hides everything lower layers put in its directory.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import posixpath
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from environments.sandboxes.hostio import open_dirs_beneath

__all__ = ["RootfsError", "RootfsLimits", "prepare_rootfs", "unpack_image", "cache_dir_for"]

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
_COMPLETE = ".complete"  # written last: a cache entry without it is unfinished and redone
_MAX_JSON = 4 << 20  # manifest / index / config blobs we are willing to parse
_MAX_INDEX_DEPTH = 4  # nested OCI indexes


class RootfsError(ValueError):
    """The rootfs override cannot be used: names the file and what was wrong."""


@dataclass(frozen=True)
class RootfsLimits:
    max_bytes: int = 16 << 30  # bytes written by all layers together
    max_members: int = 2_000_000  # tar members in all layers together
    max_layers: int = 256


@dataclass
class _Budget:
    limits: RootfsLimits
    source: str
    bytes: int = 0
    members: int = 0
    skipped: list[str] = field(default_factory=list)

    def charge(self, nbytes: int) -> None:
        self.members += 1
        self.bytes += max(0, nbytes)
        if self.members > self.limits.max_members:
            raise RootfsError(f"{self.source}: more than {self.limits.max_members} members in its layers (cap)")
        if self.bytes > self.limits.max_bytes:
            raise RootfsError(f"{self.source}: its layers unpack to more than {self.limits.max_bytes} bytes (cap)")


# --------------------------------------------------------------------------- public entry points


def cache_dir_for(sandbox_root: Path) -> Path:
    """Where unpacked images live by default: beside the sandboxes, reused across runs."""
    return Path(sandbox_root) / ".rootfs-cache"


def prepare_rootfs(source: str, cache_dir: Path, limits: RootfsLimits | None = None) -> str:
    """The directory to use as the lower layer for the ``rootfs`` override ``source``."""
    if os.path.isdir(source):
        return source
    if not os.path.isfile(source):
        raise RootfsError(
            f"rootfs {source!r} is neither a directory nor a file; expected an unpacked image root, "
            "an OCI image layout tarball or a `docker save` tarball"
        )
    digest = _sha256_file(source)
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    entry = cache_dir / digest
    root = entry / "rootfs"
    if (entry / _COMPLETE).is_file():
        return str(root)
    with _locked(cache_dir / f".{digest}.lock"):  # one unpack per image, whoever asks at once
        if (entry / _COMPLETE).is_file():
            return str(root)
        if entry.exists():  # an earlier unpack died half way
            shutil.rmtree(entry)
        work = Path(tempfile.mkdtemp(prefix=f".unpack-{digest[:12]}-", dir=cache_dir))
        try:
            (work / "rootfs").mkdir(mode=0o755)
            unpack_image(source, work / "rootfs", limits)
            (work / _COMPLETE).write_text(digest + "\n")
            os.rename(work, entry)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
    return str(root)


def unpack_image(source: str, dest: Path, limits: RootfsLimits | None = None) -> None:
    """Apply the image's layers in order onto the empty directory ``dest``."""
    budget = _Budget(limits or RootfsLimits(), source)
    try:
        outer = tarfile.open(source, mode="r:*")
    except (tarfile.TarError, OSError) as exc:
        raise RootfsError(f"rootfs {source!r} is not a readable tar archive ({exc})") from exc
    with outer:
        layers = _layer_names(outer, source)
        if len(layers) > budget.limits.max_layers:
            raise RootfsError(f"{source}: {len(layers)} layers, more than {budget.limits.max_layers} (cap)")
        dirs: dict[str, int] = {}
        root_fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            for name in layers:
                blob = _member_file(outer, name, source)
                try:
                    layer = tarfile.open(fileobj=blob, mode="r|*")  # stream: gzip or plain
                except tarfile.TarError as exc:
                    raise RootfsError(f"{source}: layer {name!r} is not a (gzip) tar stream ({exc})") from exc
                with layer:
                    _apply_layer(layer, root_fd, dirs, budget, f"{source}: layer {name!r}")
            _restore_dir_modes(root_fd, dirs)
        finally:
            os.close(root_fd)


# --------------------------------------------------------------------------- the image's manifest


def _read_json(outer: tarfile.TarFile, name: str, source: str) -> object:
    blob = _member_file(outer, name, source)
    data = blob.read(_MAX_JSON + 1)
    if len(data) > _MAX_JSON:
        raise RootfsError(f"{source}: {name} is larger than {_MAX_JSON} bytes")
    try:
        return json.loads(data)
    except ValueError as exc:
        raise RootfsError(f"{source}: {name} is not valid JSON ({exc})") from exc


def _member_file(outer: tarfile.TarFile, name: str, source: str) -> IO[bytes]:
    """A regular member of the outer archive, by its (normalised) name; never extracted."""
    wanted = _normalise(name)
    if wanted is None:
        raise RootfsError(f"{source}: the manifest names {name!r}, which is not a relative path inside the archive")
    for member in outer.getmembers():
        if _normalise(member.name) == wanted:
            if not member.isfile():
                raise RootfsError(f"{source}: {name!r} is not a regular file in the archive")
            fh = outer.extractfile(member)
            assert fh is not None
            return fh
    raise RootfsError(f"{source}: the manifest names {name!r}, which is not in the archive")


def _layer_names(outer: tarfile.TarFile, source: str) -> list[str]:
    names = {_normalise(m.name) for m in outer.getmembers()}
    if "manifest.json" in names:  # docker save (also written by newer docker beside the OCI layout)
        manifest = _read_json(outer, "manifest.json", source)
        if not isinstance(manifest, list) or not manifest or not isinstance(manifest[0], dict):
            raise RootfsError(f"{source}: manifest.json is not a list of images")
        if len(manifest) > 1:
            raise RootfsError(f"{source}: holds {len(manifest)} images; expected one (docker save one image)")
        layers = manifest[0].get("Layers")
        if not isinstance(layers, list) or not all(isinstance(x, str) for x in layers):
            raise RootfsError(f"{source}: manifest.json has no list of Layers")
        return layers
    if "index.json" in names:  # OCI image layout
        return _oci_layers(outer, source)
    raise RootfsError(
        f"{source}: neither manifest.json (docker save) nor index.json (OCI image layout) found; "
        "expected an image tarball or an unpacked rootfs directory"
    )


def _blob_path(descriptor: object, source: str) -> tuple[str, str]:
    if not isinstance(descriptor, dict) or not isinstance(descriptor.get("digest"), str):
        raise RootfsError(f"{source}: an OCI descriptor without a digest: {str(descriptor)[:200]!r}")
    algo, _, hexdigest = descriptor["digest"].partition(":")
    if algo != "sha256" or not hexdigest or not all(c in "0123456789abcdef" for c in hexdigest):
        raise RootfsError(f"{source}: unsupported digest {descriptor['digest'][:100]!r}; expected sha256:<hex>")
    return f"blobs/sha256/{hexdigest}", str(descriptor.get("mediaType", ""))


def _oci_layers(outer: tarfile.TarFile, source: str) -> list[str]:
    doc = _read_json(outer, "index.json", source)
    for _ in range(_MAX_INDEX_DEPTH):
        manifests = doc.get("manifests") if isinstance(doc, dict) else None
        if isinstance(doc, dict) and isinstance(doc.get("layers"), list):
            break  # an image manifest
        if not isinstance(manifests, list) or not manifests:
            raise RootfsError(f"{source}: an OCI index without manifests")
        if len(manifests) > 1:
            raise RootfsError(f"{source}: the OCI index lists {len(manifests)} images; expected one")
        path, _media = _blob_path(manifests[0], source)
        doc = _read_json(outer, path, source)
    else:
        raise RootfsError(f"{source}: OCI indexes nested deeper than {_MAX_INDEX_DEPTH}")
    layers = []
    for desc in doc["layers"]:
        path, media = _blob_path(desc, source)
        if "zstd" in media:
            raise RootfsError(
                f"{source}: layer {path} is zstd-compressed ({media}); only tar and tar+gzip are supported"
            )
        layers.append(path)
    return layers


# --------------------------------------------------------------------------- one layer


def _normalise(name: str) -> str | None:
    """``a/./b/`` -> ``a/b``; None for names that leave the root (absolute, ``..``, NUL)."""
    if not name or "\0" in name or name.startswith("/"):
        return None
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        return None
    return "/".join(parts)


def _open_parent(root_fd: int, rel: str, create: bool, what: str) -> int:
    """An fd on the directory holding ``rel``, walked one component at a time with
    O_NOFOLLOW: a symlink anywhere on the way is refused, never followed."""

    def refuse(comp: str, exc: OSError) -> Exception:
        return RootfsError(f"{what}: {rel!r} goes through {comp!r}, a symlink or file (refused)")

    # a parent missing from the layer is made, as tar does
    return open_dirs_beneath(root_fd, rel.split("/")[:-1], create, refuse)


def _remove_at(parent_fd: int, name: str) -> None:
    """Remove ``name`` in ``parent_fd`` whatever it is, never following a symlink."""
    try:
        st = os.lstat(name, dir_fd=parent_fd)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=parent_fd)  # fd-based on Linux: does not follow links inside
    else:
        os.unlink(name, dir_fd=parent_fd)


def _apply_layer(layer: tarfile.TarFile, root_fd: int, dirs: dict[str, int], budget: _Budget, what: str) -> None:
    written: set[str] = set()
    for member in _members(layer):
        rel = _normalise(member.name)
        if rel is None:
            raise RootfsError(f"{what}: member {member.name[:200]!r} leaves the root (absolute or '..'); refused")
        if rel == "":
            continue  # "./": the root itself
        budget.charge(member.size if member.isfile() else 0)
        base = posixpath.basename(rel)
        parent = posixpath.dirname(rel)
        if base == OPAQUE:
            _opaque(root_fd, parent, written, what)
            continue
        if base.startswith(WHITEOUT):
            victim = posixpath.join(parent, base[len(WHITEOUT) :]) if parent else base[len(WHITEOUT) :]
            if _normalise(victim) in (None, "") or base[len(WHITEOUT) :] in ("", ".", ".."):
                raise RootfsError(f"{what}: whiteout {member.name[:200]!r} names no entry; refused")
            pfd = _open_parent_or_none(root_fd, victim, what)
            if pfd is not None:
                try:
                    _remove_at(pfd, posixpath.basename(victim))
                finally:
                    os.close(pfd)
            continue
        _write_member(layer, member, root_fd, rel, dirs, what)
        written.add(rel)


def _members(layer: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    while True:
        try:
            member = layer.next()
        except tarfile.TarError as exc:
            raise RootfsError(f"a layer is a damaged tar stream ({exc})") from exc
        if member is None:
            return
        yield member


def _open_parent_or_none(root_fd: int, rel: str, what: str) -> int | None:
    try:
        return _open_parent(root_fd, rel, create=False, what=what)
    except FileNotFoundError:
        return None  # whiteout of something no lower layer had


def _opaque(root_fd: int, rel_dir: str, written: set[str], what: str) -> None:
    """Hide what lower layers put in ``rel_dir``: remove every entry this layer did not write."""
    fd = _open_dir(root_fd, rel_dir, what)
    if fd is None:
        return
    try:
        _prune(fd, rel_dir, written)
    finally:
        os.close(fd)


def _open_dir(root_fd: int, rel_dir: str, what: str) -> int | None:
    if not rel_dir:
        return os.dup(root_fd)
    try:
        pfd = _open_parent(root_fd, rel_dir + "/x", create=False, what=what)
    except FileNotFoundError:
        return None
    return pfd


def _prune(fd: int, rel_dir: str, written: set[str]) -> None:
    for name in os.listdir(fd):
        rel = f"{rel_dir}/{name}" if rel_dir else name
        if rel not in written:
            _remove_at(fd, name)
            continue
        st = os.lstat(name, dir_fd=fd)
        if stat.S_ISDIR(st.st_mode):  # written by this layer: only its lower-layer children go
            sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            try:
                _prune(sub, rel, written)
            finally:
                os.close(sub)


def _write_member(
    layer: tarfile.TarFile, member: tarfile.TarInfo, root_fd: int, rel: str, dirs: dict[str, int], what: str
) -> None:
    mode = member.mode & 0o1777  # no setuid/setgid on the host
    if not (member.isdir() or member.isfile() or member.issym() or member.islnk()):
        return  # device node, fifo: the machine gets its own /dev
    pfd = _open_parent(root_fd, rel, create=True, what=what)
    name = posixpath.basename(rel)
    try:
        if member.isdir():
            try:
                st = os.lstat(name, dir_fd=pfd)
                if not stat.S_ISDIR(st.st_mode):
                    _remove_at(pfd, name)
                    raise FileNotFoundError
            except FileNotFoundError:
                os.mkdir(name, 0o700, dir_fd=pfd)
            dirs[rel] = mode  # applied at the end: a read-only dir must still take its children
            return
        _remove_at(pfd, name)  # a later layer replaces the entry (never writes through it)
        if member.issym():
            if "\0" in member.linkname:
                raise RootfsError(f"{what}: symlink {rel!r} has a NUL in its target")
            os.symlink(member.linkname, name, dir_fd=pfd)  # interpreted inside the machine only
        elif member.islnk():
            _hardlink(root_fd, pfd, name, member.linkname, rel, what)
        else:
            _copy_file(layer, member, pfd, name, mode, what)
    finally:
        os.close(pfd)


def _hardlink(root_fd: int, pfd: int, name: str, target: str, rel: str, what: str) -> None:
    trel = _normalise(target)
    if not trel:
        raise RootfsError(f"{what}: hard link {rel!r} -> {target[:200]!r} leaves the root; refused")
    try:
        tfd = _open_parent(root_fd, trel, create=False, what=what)
    except FileNotFoundError as exc:
        raise RootfsError(f"{what}: hard link {rel!r} -> {target!r}: no such file in the image") from exc
    try:
        st = os.lstat(posixpath.basename(trel), dir_fd=tfd)
        if not stat.S_ISREG(st.st_mode):
            raise RootfsError(f"{what}: hard link {rel!r} -> {target!r} is not to a regular file; refused")
        os.link(posixpath.basename(trel), name, src_dir_fd=tfd, dst_dir_fd=pfd, follow_symlinks=False)
    except FileNotFoundError as exc:
        raise RootfsError(f"{what}: hard link {rel!r} -> {target!r}: no such file in the image") from exc
    finally:
        os.close(tfd)


def _copy_file(layer: tarfile.TarFile, member: tarfile.TarInfo, pfd: int, name: str, mode: int, what: str) -> None:
    src = layer.extractfile(member)
    if src is None:
        raise RootfsError(f"{what}: cannot read {member.name!r}")
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=pfd)
    try:
        left = member.size
        while left > 0:
            chunk = src.read(min(left, 1 << 20))
            if not chunk:
                raise RootfsError(f"{what}: {member.name!r} is truncated")
            os.write(fd, chunk)
            left -= len(chunk)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def _restore_dir_modes(root_fd: int, dirs: dict[str, int]) -> None:
    for rel in sorted(dirs, key=lambda r: r.count("/"), reverse=True):  # deepest first
        try:  # the dir itself opened O_NOFOLLOW: a later layer may have replaced it by a symlink
            fd = _open_parent(root_fd, rel + "/x", create=False, what="rootfs")
        except (OSError, RootfsError):
            continue  # removed or replaced by a later layer
        try:
            os.fchmod(fd, dirs[rel] | 0o700)  # the owner keeps rwx: the cache must stay removable
        finally:
            os.close(fd)


# --------------------------------------------------------------------------- helpers


def _sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class _locked:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._fd = -1

    def __enter__(self) -> None:
        self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
