"""A private Docker engine for `make test` (and `make demo` on the docker backend).

``python -m hermes_console.docker_engine run -- CMD...`` makes an engine answer, runs CMD
with ``DOCKER_HOST`` pointing at it, and stops the engine afterwards if this tool started
it and no other session still uses it. In order:

1. An engine that already answers (``DOCKER_HOST`` as given, or the default socket) is
   used as is and never stopped: it is the user's.
2. Otherwise, if ``dockerd`` is missing and we are root with apt: ``apt-get install docker.io``.
3. ``dockerd --bridge=none --iptables=false --ip-forward=false`` with its own data root
   (``.build/docker/data``, kept between runs so built images are cached), its own exec
   root, socket and pidfile (a short dir under /tmp): sandboxes need no network, and no
   host firewall or bridge is touched.

Concurrency: ``engine.lock`` (exclusive flock) serialises start and stop, so two sessions
never both start a dockerd; each session holds ``users.lock`` shared for its life, and the
one that finds no other holder at its end stops the daemon. When CMD ends (or we are
interrupted), every container of the private engine is removed and images not labelled
``hermes-console.keep=1`` are removed before dockerd is stopped.

When no engine can be had, CMD still runs, with ``HERMES_DOCKER_UNAVAILABLE`` saying why
(tests skip with that reason).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_STATE = REPO / ".build" / "docker"
DEFAULT_SOCKET = "/var/run/docker.sock"
UNAVAILABLE_VAR = "HERMES_DOCKER_UNAVAILABLE"
KEEP_LABEL = "hermes-console.keep"
START_TIMEOUT_S = 90.0  # a loaded 2-core box: containerd + dockerd can take a while
STOP_TIMEOUT_S = 30.0


class EngineError(RuntimeError):
    """No engine can be had here; the message says why (tests skip with it)."""


# --------------------------------------------------------------------------- pinging


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


def socket_path(host: str) -> str | None:
    """The socket file of a ``unix://`` DOCKER_HOST (None for tcp/ssh hosts)."""
    return host[len("unix://") :] if host.startswith("unix://") else None


def ping(host: str, timeout: float = 5.0) -> bool:
    """True when an engine answers ``GET /_ping`` at ``host``. Non-unix hosts are asked
    through the CLI (``docker info``)."""
    path = socket_path(host)
    if path is None:
        cli = shutil.which("docker")
        if cli is None:
            return False
        try:
            env = dict(os.environ, DOCKER_HOST=host)
            return subprocess.run([cli, "info"], capture_output=True, timeout=timeout + 10, env=env).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False
    if not os.path.exists(path):
        return False
    conn = _UnixHTTP(path, timeout)
    try:
        conn.request("GET", "/_ping")
        return conn.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


# --------------------------------------------------------------------------- layout


@dataclass(frozen=True)
class Layout:
    """Where the private engine keeps things. The exec root holds sockets: a short path."""

    state: Path

    @property
    def data_root(self) -> Path:
        return self.state / "data"

    @property
    def run_dir(self) -> Path:
        digest = hashlib.sha256(str(self.state.resolve()).encode()).hexdigest()[:10]
        return Path("/tmp") / f"hc-dockerd-{digest}"

    @property
    def sock(self) -> Path:
        return self.run_dir / "docker.sock"

    @property
    def host(self) -> str:
        return f"unix://{self.sock}"

    @property
    def pidfile(self) -> Path:
        return self.run_dir / "dockerd.pid"

    @property
    def log(self) -> Path:
        return self.state / "dockerd.log"

    def dockerd_argv(self, dockerd: str) -> list[str]:
        return [
            dockerd,
            "--bridge=none",
            "--iptables=false",
            "--ip-forward=false",
            "--ip-masq=false",
            "--data-root",
            str(self.data_root),
            "--exec-root",
            str(self.run_dir / "exec"),
            "--pidfile",
            str(self.pidfile),
            "--host",
            self.host,
            "--group",
            "root",
        ]


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def our_dockerd_pid(layout: Layout) -> int | None:
    """The pid of the dockerd this tool started (pidfile + its command line names our data
    root), or None: we never signal a process we cannot prove is ours."""
    pid = _read_pid(layout.pidfile)
    if pid is None:
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    if not cmdline or not cmdline[0].endswith(b"dockerd") or str(layout.data_root).encode() not in cmdline:
        return None
    return pid


# --------------------------------------------------------------------------- install + start


def can_manage() -> str:
    """Why this machine cannot install/start an engine for us ("" when it can)."""
    if shutil.which("dockerd") is not None:
        return "" if os.geteuid() == 0 else "no Docker engine answered and dockerd needs root (not root here)"
    if os.geteuid() != 0:
        return "no Docker engine answered and docker.io cannot be installed (not root)"
    if shutil.which("apt-get") is None:
        return "no Docker engine answered and docker.io cannot be installed (no apt-get)"
    return ""


def apt_install(packages: list[str], quiet: bool = True) -> None:
    """``apt-get install`` (root + apt), waiting for a dpkg lock another installer holds;
    one ``apt-get update`` retry when the lists are stale. Raises EngineError on failure."""
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    base = ["apt-get", "-o", "DPkg::Lock::Timeout=300", "-y", "-qq"]
    out = subprocess.DEVNULL if quiet else None
    for attempt in range(2):
        if attempt:
            subprocess.run(base[:-2] + ["-qq", "update"], env=env, stdout=out, stderr=out, timeout=600)
        proc = subprocess.run(
            base + ["install", "--no-install-recommends", *packages],
            env=env,
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            timeout=900,
        )
        if proc.returncode == 0:
            return
    raise EngineError(f"`apt-get install {' '.join(packages)}` failed: {' '.join(proc.stderr.split())[-300:]}")


def ensure_dockerd() -> str:
    path = shutil.which("dockerd")
    if path is None:
        reason = can_manage()
        if reason:
            raise EngineError(reason)
        print("docker-engine: installing docker.io (once)…", file=sys.stderr)
        apt_install(["docker.io"])
        path = shutil.which("dockerd")
        if path is None:
            raise EngineError("docker.io was installed but `dockerd` is not on PATH")
    if os.geteuid() != 0:
        raise EngineError("no Docker engine answered and dockerd needs root (not root here)")
    return path


def start_dockerd(layout: Layout, timeout: float = START_TIMEOUT_S) -> int:
    """Start our dockerd (caller holds engine.lock) and wait for it to answer; its pid."""
    dockerd = ensure_dockerd()
    stale = our_dockerd_pid(layout)
    if stale is not None:  # ours, alive, not answering: a hung daemon from an earlier run
        _terminate(stale, STOP_TIMEOUT_S)
    layout.state.mkdir(parents=True, exist_ok=True)
    layout.run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    for leftover in (layout.sock, layout.pidfile):
        leftover.unlink(missing_ok=True)
    try:  # one earlier log kept: dockerd is chatty and the state dir lives long
        if layout.log.stat().st_size > 2 << 20:
            layout.log.replace(layout.log.with_suffix(".log.1"))
    except OSError:
        pass
    with open(layout.log, "ab") as log:
        proc = subprocess.Popen(
            layout.dockerd_argv(dockerd),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
        )
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if ping(layout.host, timeout=2.0):
            return proc.pid
        if proc.poll() is not None:
            raise EngineError(f"dockerd exited with {proc.returncode} at start; see {layout.log}: {_tail(layout.log)}")
        time.sleep(0.2)
    _terminate(proc.pid, STOP_TIMEOUT_S)
    raise EngineError(f"dockerd did not answer within {timeout:g}s; see {layout.log}: {_tail(layout.log)}")


def _tail(path: Path, limit: int = 400) -> str:
    try:
        return " ".join(path.read_bytes()[-limit:].decode(errors="replace").split())
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours is gone for our purposes
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _terminate(pid: int, timeout: float) -> None:
    """SIGTERM (dockerd stops its containers and containerd), then SIGKILL if it hangs."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        end = time.monotonic() + wait
        while time.monotonic() < end:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            if not _alive(pid):
                return
            time.sleep(0.1)


def _docker(host: str, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    cli = shutil.which("docker") or "docker"
    return subprocess.run(
        [cli, *args], capture_output=True, text=True, timeout=timeout, env=dict(os.environ, DOCKER_HOST=host)
    )


def clean_private_engine(host: str) -> None:
    """Before stopping our own engine: every container goes, so do images we did not
    label to keep (test images) and any network someone created. Best effort."""
    try:
        ids = _docker(host, "ps", "-aq").stdout.split()
        if ids:
            _docker(host, "rm", "-f", *ids, timeout=120)
        listing = _docker(host, "images", "--format", "{{.ID}}\t{{.Repository}}:{{.Tag}}").stdout
        keep = set(_docker(host, "images", "-q", "--filter", f"label={KEEP_LABEL}=1").stdout.split())
        drop = sorted(
            {line.split("\t")[0] for line in listing.splitlines() if line and line.split("\t")[0] not in keep}
        )
        if drop:
            _docker(host, "rmi", "-f", *drop, timeout=120)
        _docker(host, "network", "prune", "-f")
    except (OSError, subprocess.TimeoutExpired):
        pass


# --------------------------------------------------------------------------- a session


@contextmanager
def _flock(path: Path, mode: int) -> Iterator[int]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, mode)
        yield fd
    finally:
        os.close(fd)


@dataclass
class Engine:
    host: str | None  # DOCKER_HOST to use, or None
    reason: str = ""  # why there is none
    started: bool = False  # this session started dockerd (informational)
    private: bool = False  # the engine is this tool's (stopped by the last session)


def _existing_engine() -> str | None:
    given = os.environ.get("DOCKER_HOST")
    if given:
        return given if ping(given) else None
    default = f"unix://{DEFAULT_SOCKET}"
    return default if ping(default) else None


@contextmanager
def engine_session(state: Path = DEFAULT_STATE) -> Iterator[Engine]:
    """Make an engine answer for the body; stop our private one after the last user."""
    layout = Layout(state)
    layout.state.mkdir(parents=True, exist_ok=True)
    user_fd = os.open(layout.state / "users.lock", os.O_RDWR | os.O_CREAT, 0o600)
    engine = Engine(host=None)
    try:
        with _flock(layout.state / "engine.lock", fcntl.LOCK_EX):
            fcntl.flock(user_fd, fcntl.LOCK_SH)  # under engine.lock: a stopper cannot miss us
            existing = _existing_engine()
            if existing is not None and not (existing == layout.host):
                engine = Engine(host=existing)
            elif ping(layout.host):
                engine = Engine(host=layout.host, private=True)
            else:
                try:
                    start_dockerd(layout)
                    engine = Engine(host=layout.host, started=True, private=True)
                except (EngineError, OSError, subprocess.SubprocessError) as exc:
                    engine = Engine(host=None, reason=str(exc))
        yield engine
    finally:
        fcntl.flock(user_fd, fcntl.LOCK_UN)
        if engine.private:
            with _flock(layout.state / "engine.lock", fcntl.LOCK_EX):
                try:
                    fcntl.flock(user_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    last = True
                except BlockingIOError:
                    last = False  # another session still runs tests against it: it stops it
                if last:
                    stop_private_engine(layout)
        os.close(user_fd)


def stop_private_engine(layout: Layout) -> bool:
    """Clean and stop the dockerd this tool started (found by its pidfile). True if one ran."""
    pid = our_dockerd_pid(layout)
    if pid is None:
        return False
    if ping(layout.host, timeout=5.0):
        clean_private_engine(layout.host)
    _terminate(pid, STOP_TIMEOUT_S)
    if not _alive(pid):  # its sockets and state dirs go with it (a busy mount point just stays)
        end = time.monotonic() + 5.0  # its containerd may still be tidying up in there
        while layout.run_dir.exists() and time.monotonic() < end:
            shutil.rmtree(layout.run_dir, ignore_errors=True)
            if layout.run_dir.exists():
                time.sleep(0.2)
    return True


def run(
    cmd: list[str], state: Path = DEFAULT_STATE, prepare: list[str] | None = None, default_image: bool = False
) -> int:
    """Run ``cmd`` with an engine (or the reason there is none) in its environment.
    ``prepare``: image kinds to build first (cached), see hermes_console.images;
    ``default_image``: the base image becomes TERMINAL_DOCKER_IMAGE unless one is set."""
    with engine_session(state) as engine:
        env = dict(os.environ)
        if engine.host is not None:
            env["DOCKER_HOST"] = engine.host
            env.pop(UNAVAILABLE_VAR, None)
            with _flock(state / "images.lock", fcntl.LOCK_EX):  # one build at a time; the next finds it cached
                env.update(_prepare_images(engine.host, prepare or []))
            if default_image and "HERMES_SANDBOX_IMAGE" in env:
                env.setdefault("TERMINAL_DOCKER_IMAGE", env["HERMES_SANDBOX_IMAGE"])
        else:
            env[UNAVAILABLE_VAR] = engine.reason
            print(f"docker-engine: docker tests will be skipped: {engine.reason}", file=sys.stderr)
        return _run_child(cmd, env)


def _prepare_images(host: str, kinds: list[str]) -> dict[str, str]:
    """Build (or find cached) images; their tags (or why not) go to the child's env."""
    if not kinds:
        return {}
    from hermes_console import images

    out: dict[str, str] = {}
    for kind in kinds:
        var = images.ENV_VARS[kind]
        try:
            out[var] = images.ensure(kind, docker_host=host, log=sys.stderr)
        except images.ImageError as exc:
            out[var + "_ERROR"] = str(exc)
            print(
                f"docker-engine: image {kind!r} not built ({exc}); tests that need it will be skipped", file=sys.stderr
            )
    return out


def _run_child(cmd: list[str], env: dict[str, str]) -> int:
    """Run the child; SIGINT/SIGTERM are passed on (the child stops, then we clean up)."""
    proc = subprocess.Popen(cmd, env=env)
    previous = {}

    def forward(signum, _frame):
        try:
            proc.send_signal(signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        previous[sig] = signal.signal(sig, forward)
    try:
        while True:
            try:
                return proc.wait()
            except KeyboardInterrupt:
                continue
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hermes_console.docker_engine",
        description="run a command with a Docker engine (started and stopped here if needed)",
    )
    parser.add_argument("--state", type=Path, default=DEFAULT_STATE, help="state dir (default .build/docker)")
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run CMD with DOCKER_HOST set (or HERMES_DOCKER_UNAVAILABLE saying why)")
    r.add_argument(
        "--image",
        action="append",
        default=[],
        choices=("base", "busybox"),
        help="build this image first (cached by content); repeatable",
    )
    r.add_argument(
        "--default-image", action="store_true", help="use the base image as TERMINAL_DOCKER_IMAGE unless that is set"
    )
    r.add_argument("cmd", nargs=argparse.REMAINDER)
    sub.add_parser("stop", help="stop the private engine if it runs (cleaning it first)")
    sub.add_parser("status", help="say which engine answers")
    args = parser.parse_args(argv)
    if args.command == "run":
        cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        if not cmd:
            parser.error("run: expected a command after --")
        return run(cmd, args.state, args.image, args.default_image)
    layout = Layout(args.state)
    if args.command == "stop":
        with _flock(layout.state / "engine.lock", fcntl.LOCK_EX):
            print("stopped" if stop_private_engine(layout) else "no private engine was running")
        return 0
    existing = _existing_engine()
    private = ping(layout.host)
    print(
        f"engine: {existing or (layout.host if private else 'none')}"
        + (" (private)" if private else "")
        + ("" if existing or private else f" ({can_manage() or 'startable'})")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
