"""Sandbox images without a registry: ``hermes-console images build|list|rm|export``.

* ``base``: Debian minbase + python3 + procps (bash, coreutils, util-linux come with
  minbase), made with ``debootstrap`` from the Debian mirror apt already uses, then
  ``docker import``-ed. The docker backend's sandbox image.
* ``busybox``: a rootfs holding the host's static busybox (``busybox-static``); imports in
  about a second. Enough for engine checks; it has no bash, so no sandbox shell.
* a task image from a rootfs directory or a tarball (``docker import``), and back:
  ``export`` turns an image into a rootfs directory (``docker export``) that the bwrap
  backend takes as a task's ``rootfs`` override.

Built images are tagged by a hash of their inputs (``hermes-sandbox:<hash>``), so a
rebuild with the same inputs is a no-op, and labelled ``hermes-console.image=<kind>``
plus ``hermes-console.keep=1`` (the private test engine keeps them between runs).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO, TextIO

LABEL_KIND = "hermes-console.image"
KEEP_LABEL = "hermes-console.keep"
RECIPE_VERSION = 1  # bump when a recipe changes in a way its inputs do not show
ENV_VARS = {"base": "HERMES_SANDBOX_IMAGE", "busybox": "HERMES_BUSYBOX_IMAGE"}
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BASE_PACKAGES = ("python3", "procps")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
BUILD_TIMEOUT_S = 900.0
# what a rootfs needs no copy of in an image (apt's download cache and package lists)
_TRIM = ("var/cache/apt/archives", "var/lib/apt/lists")


class ImageError(RuntimeError):
    """An image could not be built, imported, exported or found; the message says why."""


# --------------------------------------------------------------------------- docker CLI


def _docker_cli() -> str:
    cli = shutil.which("docker")
    if cli is None:
        raise ImageError("the `docker` CLI was not found on PATH; install Docker (docker.io)")
    return cli


def _env(docker_host: str | None) -> dict[str, str]:
    env = dict(os.environ)
    if docker_host:
        env["DOCKER_HOST"] = docker_host
    return env


def docker(
    *args: str, docker_host: str | None = None, timeout: float = 120.0, stdin: int | IO[bytes] | None = None
) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            [_docker_cli(), *args], capture_output=True, text=True, timeout=timeout, env=_env(docker_host), stdin=stdin
        )
    except subprocess.TimeoutExpired:
        raise ImageError(f"`docker {' '.join(args[:2])}` did not finish within {timeout:g}s") from None


def _checked(proc: subprocess.CompletedProcess, what: str) -> str:
    if proc.returncode != 0:
        raise ImageError(f"{what} failed: {' '.join((proc.stderr or proc.stdout).split())[:400]}")
    return proc.stdout


def image_exists(tag: str, docker_host: str | None = None) -> bool:
    return docker("image", "inspect", "--format", "{{.Id}}", tag, docker_host=docker_host, timeout=30).returncode == 0


def _changes(kind: str, extra: dict[str, str] | None = None) -> list[str]:
    labels = {LABEL_KIND: kind, KEEP_LABEL: "1", **(extra or {})}
    out = [f"ENV PATH={SANDBOX_PATH}"]
    for key, value in labels.items():
        out.append(f"LABEL {key}={json.dumps(value)}")
    return out


def import_rootfs(
    source: Path,
    tag: str,
    *,
    kind: str = "task",
    docker_host: str | None = None,
    labels: dict[str, str] | None = None,
    keep: bool = True,
) -> str:
    """``docker import`` a rootfs directory or a tarball (.tar, .tar.gz, ...) as ``tag``."""
    source = Path(source)
    changes = _changes(kind, labels)
    if not keep:
        changes = [c for c in changes if not c.startswith(f"LABEL {KEEP_LABEL}=")]
    flags = [arg for change in changes for arg in ("--change", change)]
    if source.is_dir():
        if not (source / "bin").exists() and not (source / "usr").is_dir():
            raise ImageError(f"{source} does not look like a root filesystem (no bin/ or usr/ inside)")
        tar = subprocess.Popen(["tar", "-C", str(source), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
        try:
            proc = docker(
                "import", *flags, "-", tag, docker_host=docker_host, timeout=BUILD_TIMEOUT_S, stdin=tar.stdout
            )
        finally:
            assert tar.stdout is not None
            tar.stdout.close()
            tar.wait(timeout=60)
        if tar.returncode != 0:
            raise ImageError(f"tar of {source} failed with exit {tar.returncode}")
    elif source.is_file():
        proc = docker("import", *flags, str(source), tag, docker_host=docker_host, timeout=BUILD_TIMEOUT_S)
    else:
        raise ImageError(f"{source}: expected a rootfs directory or a tarball, found nothing there")
    _checked(proc, f"docker import of {source} as {tag}")
    return tag


def export_rootfs(image: str, dest: Path, docker_host: str | None = None) -> Path:
    """An image's filesystem as a directory (``docker create`` + ``docker export``): usable
    as a bwrap ``rootfs`` override. ``dest`` must be missing or empty."""
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise ImageError(f"{dest} is not empty; expected a new or empty directory to export into")
    dest.mkdir(parents=True, exist_ok=True)
    cid = _checked(
        docker("create", "--network", "none", image, "true", docker_host=docker_host), f"docker create {image}"
    ).strip()
    try:
        exp = subprocess.Popen([_docker_cli(), "export", cid], stdout=subprocess.PIPE, env=_env(docker_host))
        assert exp.stdout is not None
        try:
            untar = subprocess.run(
                ["tar", "-C", str(dest), "-x", "--numeric-owner"],
                stdin=exp.stdout,
                capture_output=True,
                timeout=BUILD_TIMEOUT_S,
            )
        finally:
            exp.stdout.close()
            exp.wait(timeout=60)
        if exp.returncode != 0 or untar.returncode != 0:
            raise ImageError(f"docker export {image} into {dest} failed: {untar.stderr.decode(errors='replace')[:300]}")
    finally:
        docker("rm", "-f", cid, docker_host=docker_host)
    return dest


# --------------------------------------------------------------------------- recipes


def _digest(recipe: dict[str, object]) -> str:
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def apt_mirror(sources: list[Path] | None = None) -> str:
    """The Debian mirror apt already uses (first non-security ``debian`` URI), or deb.debian.org."""
    paths = (
        sources
        if sources is not None
        else [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    )
    for path in paths:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        for uri in re.findall(r"(?:^deb\s+(?:\[[^\]]*\]\s+)?|^URIs:\s*)(\S+)", text, re.MULTILINE):
            if re.search(r"/debian/?$", uri) and "security" not in uri:
                return uri.rstrip("/")
    return DEFAULT_MIRROR


def debian_suite() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("VERSION_CODENAME=") and line.split("=", 1)[1].strip('"'):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return "bookworm"


def base_recipe() -> dict[str, object]:
    return {
        "kind": "base",
        "suite": debian_suite(),
        "variant": "minbase",
        "include": list(BASE_PACKAGES),
        "version": RECIPE_VERSION,
    }


def base_tag() -> str:
    return f"hermes-sandbox:{_digest(base_recipe())}"


def _busybox_binary() -> Path:
    for candidate in ("/bin/busybox", "/usr/bin/busybox"):
        if os.path.isfile(candidate):
            return Path(candidate)
    raise ImageError("no busybox binary; install it with `apt-get install busybox-static`")


def busybox_tag() -> str:
    digest = hashlib.sha256(_busybox_binary().read_bytes()).hexdigest()
    return f"hermes-busybox:{_digest({'kind': 'busybox', 'busybox': digest, 'version': RECIPE_VERSION})}"


def _need_tool(tool: str, package: str, log: TextIO | None) -> None:
    if shutil.which(tool) is not None or os.path.isfile(f"/bin/{tool}"):
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise ImageError(f"`{tool}` is missing; install the {package} package (needs root + apt here)")
    from hermes_console.docker_engine import EngineError, apt_install

    if log:
        print(f"images: installing {package}…", file=log)
    try:
        apt_install([package])
    except EngineError as exc:
        raise ImageError(str(exc)) from None


def _work_dir() -> Path:
    # on the same disk as the engine's data root when we have one (a rootfs is ~250 MB)
    base = Path(os.environ.get("HERMES_IMAGES_TMP", tempfile.gettempdir()))
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="hermes-image-", dir=base))


def build_busybox(docker_host: str | None = None, log: TextIO | None = None) -> str:
    _need_tool("busybox", "busybox-static", log)
    tag = busybox_tag()
    if image_exists(tag, docker_host):
        return tag
    work = _work_dir()
    try:
        root = work / "rootfs"
        for sub in ("bin", "etc", "tmp", "workspace"):
            (root / sub).mkdir(parents=True)
        shutil.copy2(_busybox_binary(), root / "bin" / "busybox")
        applets = subprocess.run(
            [str(root / "bin" / "busybox"), "--list"], capture_output=True, text=True, timeout=30
        ).stdout.split()
        for name in applets:
            if name != "busybox" and "/" not in name:
                os.symlink("busybox", root / "bin" / name)
        (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
        (root / "etc" / "group").write_text("root:x:0:\n")
        return import_rootfs(root, tag, kind="busybox", docker_host=docker_host)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def build_base(docker_host: str | None = None, log: TextIO | None = None) -> str:
    """The sandbox base image (cached by recipe): debootstrap, trim, docker import."""
    tag = base_tag()
    if image_exists(tag, docker_host):
        return tag
    _need_tool("debootstrap", "debootstrap", log)
    if os.geteuid() != 0:
        raise ImageError("debootstrap needs root to build the base image (not root here)")
    recipe = base_recipe()
    mirror = apt_mirror()
    if log:
        print(f"images: building {tag} (debootstrap {recipe['suite']} from {mirror}, about a minute, once)…", file=log)
    work = _work_dir()
    try:
        root = work / "rootfs"
        argv = [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(BASE_PACKAGES)}",
            str(recipe["suite"]),
            str(root),
            mirror,
        ]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise ImageError(f"debootstrap did not finish within {BUILD_TIMEOUT_S:g}s") from None
        if proc.returncode != 0:
            detail = " ".join((proc.stderr + proc.stdout).split())[-400:]
            raise ImageError(f"debootstrap {recipe['suite']} from {mirror} failed: {detail}")
        for sub in _TRIM:
            shutil.rmtree(root / sub, ignore_errors=True)
            (root / sub).mkdir(parents=True, exist_ok=True)
        for junk in (root / "var" / "cache" / "apt").glob("*.bin"):
            junk.unlink()
        (root / "workspace").mkdir(exist_ok=True)
        return import_rootfs(
            root,
            tag,
            kind="base",
            docker_host=docker_host,
            labels={"hermes-console.recipe": json.dumps(recipe, sort_keys=True)},
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


BUILDERS = {"base": build_base, "busybox": build_busybox}


def ensure(kind: str, docker_host: str | None = None, log: TextIO | None = None) -> str:
    if kind not in BUILDERS:
        raise ImageError(f"unknown image kind {kind!r}; expected one of {', '.join(BUILDERS)}")
    return BUILDERS[kind](docker_host=docker_host, log=log)


def list_images(docker_host: str | None = None) -> list[dict[str, str]]:
    out = _checked(
        docker(
            "images",
            "--filter",
            f"label={LABEL_KIND}",
            "--format",
            "{{.Repository}}:{{.Tag}}\t{{.ID}}\t{{.Size}}\t{{.CreatedSince}}",
            docker_host=docker_host,
        ),
        "docker images",
    )
    rows = []
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) == 4:
            tag, image_id, size, created = parts
            kind = docker(
                "image",
                "inspect",
                "--format",
                '{{index .Config.Labels "%s"}}' % LABEL_KIND,
                tag,
                docker_host=docker_host,
                timeout=30,
            ).stdout.strip()
            rows.append({"tag": tag, "id": image_id, "size": size, "created": created, "kind": kind})
    return rows


def remove_images(tags: list[str], docker_host: str | None = None) -> None:
    _checked(docker("rmi", *tags, docker_host=docker_host), f"docker rmi {' '.join(tags)}")


# --------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hermes-console images", description="sandbox images without a registry")
    sub = p.add_subparsers(dest="action", required=True)
    b = sub.add_parser("build", help="build the base image, or a task image from a rootfs dir / tarball")
    b.add_argument("kind", nargs="?", default="base", choices=("base", "busybox", "task"))
    b.add_argument("--from", dest="source", type=Path, help="task: a rootfs directory or a tarball to import")
    b.add_argument("--tag", help="task: the image name (default task-<hash of the source path>)")
    sub.add_parser("list", help="images built here (labelled hermes-console.image)")
    r = sub.add_parser("rm", help="remove images")
    r.add_argument("tags", nargs="+")
    e = sub.add_parser("export", help="an image's filesystem as a rootfs directory (for bwrap's rootfs)")
    e.add_argument("image")
    e.add_argument("dest", type=Path)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.action == "build":
            if args.kind == "task":
                if args.source is None:
                    print("hermes-console images: build task needs --from DIR_OR_TARBALL", file=sys.stderr)
                    return 2
                tag = args.tag or f"task-{hashlib.sha256(str(args.source.resolve()).encode()).hexdigest()[:12]}"
                print(import_rootfs(args.source, tag))
            else:
                print(ensure(args.kind, log=sys.stderr))
        elif args.action == "list":
            for row in list_images():
                print(f"{row['tag']}\t{row['kind']}\t{row['size']}\t{row['created']}")
        elif args.action == "rm":
            remove_images(args.tags)
        elif args.action == "export":
            print(export_rootfs(args.image, args.dest))
    except ImageError as exc:
        print(f"hermes-console images: {exc}", file=sys.stderr)
        return 1
    return 0
