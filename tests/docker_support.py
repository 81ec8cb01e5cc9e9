"""What the docker tests need from the engine `make test` prepares (hermes_console/docker_engine.py).

``ENGINE_REASON`` is "" when an engine answers, else why not (the reason the private
engine could not be had, e.g. "not root"); tests skip with it. ``sandbox_image()`` is the
base sandbox image (built and cached by the engine wrapper), or a skip naming why not.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest


def _engine_reason() -> str:
    docker = shutil.which("docker")
    if docker is None:
        return os.environ.get("HERMES_DOCKER_UNAVAILABLE") or "the docker CLI is not installed"
    try:
        proc = subprocess.run([docker, "info"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`docker info` failed: {exc}"
    if proc.returncode == 0:
        return ""
    given = os.environ.get("HERMES_DOCKER_UNAVAILABLE")
    return given or "no Docker engine answered `docker info` (run the tests via `make test` to start one)"


ENGINE_REASON = _engine_reason()
needs_engine = pytest.mark.skipif(bool(ENGINE_REASON), reason=ENGINE_REASON or "engine present")


def sandbox_image() -> str:
    """The base sandbox image (bash, coreutils, python3), or skip saying why there is none."""
    if ENGINE_REASON:
        pytest.skip(ENGINE_REASON)
    tag = os.environ.get("HERMES_SANDBOX_IMAGE")
    if tag:
        return tag
    from hermes_console import images

    tag = images.base_tag()
    if images.image_exists(tag):
        return tag
    build_error = os.environ.get("HERMES_SANDBOX_IMAGE_ERROR")
    if build_error:  # an engine answered and `make test` tried to build the image: that failure is ours
        pytest.fail(f"the sandbox base image could not be built: {build_error}")
    pytest.skip("the sandbox base image is not built (`hermes-console images build base`, or run via `make test`)")
    return ""


_REAL_HOST = os.environ.get("DOCKER_HOST")  # the engine as the session found it (tests may relay it)


def docker(*args: str, timeout: float = 60.0, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if _REAL_HOST:
        env["DOCKER_HOST"] = _REAL_HOST
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=check, env=env)


def managed_containers() -> list[str]:
    """Every container this tool labelled, running or not."""
    out = docker("ps", "-aq", "--filter", "label=hermes-console.managed=1").stdout
    return out.split()


def base_rootfs() -> Path:
    """The base image as a rootfs directory (``docker export``), exported once per image id
    and kept under .build/docker/rootfs (a bwrap rootfs, and the start of task images)."""
    import fcntl
    import tempfile
    from pathlib import Path

    from hermes_console import images
    from hermes_console.docker_engine import DEFAULT_STATE

    image = sandbox_image()
    image_id = docker("image", "inspect", "--format", "{{.Id}}", image).stdout.strip().split(":")[-1][:16]
    cache = DEFAULT_STATE / "rootfs"
    cache.mkdir(parents=True, exist_ok=True)
    final = cache / image_id
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not final.is_dir():
            for stale in cache.iterdir():  # an older base image's export
                if stale.is_dir():
                    shutil.rmtree(stale, ignore_errors=True)
            work = Path(tempfile.mkdtemp(prefix=".export-", dir=cache))
            images.export_rootfs(image, work / "root")
            (work / "root").rename(final)
            shutil.rmtree(work, ignore_errors=True)
    return final


def task_image(files: dict, tag: str, tmp: Path) -> str:
    """A task image built from a rootfs: the base rootfs (hard-linked copy) plus ``files``
    (absolute path -> text), ``docker import``-ed as ``tag`` (not labelled to keep)."""
    from hermes_console import images

    root = tmp / "task-rootfs"
    subprocess.run(["cp", "-al", str(base_rootfs()), str(root)], check=True, timeout=120)
    for bulk in ("usr/share/doc", "usr/share/man", "usr/share/locale", "usr/share/info"):
        shutil.rmtree(root / bulk, ignore_errors=True)  # links only: the cache keeps its copy; a smaller import
    for path, text in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            target.unlink()  # a hard link into the cache: never write through it
        target.write_text(text)
    images.import_rootfs(root, tag, kind="task", keep=False)
    shutil.rmtree(root, ignore_errors=True)
    return tag


def DockerBox(task_id: str, settings, **kwargs):
    """A real DockerSandbox on the base image (skips, with the reason, where there is none)."""
    from environments.sandboxes.docker import DockerSandbox

    return DockerSandbox(task_id, settings.model_copy(update={"docker_image": sandbox_image()}), **kwargs)


class EngineProxy:
    """A unix-socket relay in front of the engine: stopping it is, to every docker client
    using it, the engine going away mid-stream (exec streams cut, new calls refused);
    starting it again is the engine coming back. The real engine is never touched."""

    def __init__(self, path: Path, upstream: str) -> None:
        import threading

        self.path, self.upstream = path, upstream
        self._lock = threading.Lock()
        self._conns: list = []
        self._server = None

    @property
    def host(self) -> str:
        return f"unix://{self.path}"

    def start(self) -> None:
        import socket
        import threading

        self.path.unlink(missing_ok=True)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(self.path))
        server.listen(64)
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True, name="engine-proxy-accept").start()

    def _accept(self, server) -> None:
        import socket
        import threading

        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                up.connect(self.upstream)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, up]
            for a, b in ((client, up), (up, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True, name="engine-proxy-pump").start()

    @staticmethod
    def _pump(src, dst) -> None:
        import socket

        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def stop(self) -> None:
        import socket

        if self._server is not None:
            self._server.close()
            self._server = None
        self.path.unlink(missing_ok=True)
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()


def engine_socket() -> str:
    """The engine's unix socket path (DOCKER_HOST or the default), or skip."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        pytest.skip(f"the engine is not on a unix socket ({host})")
    return host[len("unix://") :]
