"""bwrap backend: one bubblewrap machine per sandbox (see shell.py for the protocol).

One bwrap, one pid namespace for the sandbox's life: background processes live until
cleanup. The root is bwrap's writable tmpfs, so writes anywhere outside the read-only
system mounts (/usr, /bin, /lib*, /etc; or a task's ``rootfs`` directory as that
read-only lower layer) persist for the machine's life (``/tests``, ``/opt``, ``/logs``)
and vanish at cleanup (bounded by the sandbox's memory cgroup where there is one; bwrap
0.8 cannot size the root tmpfs). A size-capped persistent /tmp, the task's workspace
read-write at /workspace, no network (unless settings.network), /etc/shadow masked, a
minimal environment. The state dir is bound at /run/hermes-state (sandbox-writable; the
host no longer reads anything from it). Limits: the shared cgroup/rlimits of base.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

from environments.sandboxes.base import MARKER_VAR, BashSessionSandbox, SandboxUnavailable, _slug
from environments.sandboxes.settings import SandboxSettings

VIEW_WORKSPACE = "/workspace"
VIEW_STATE = "/run/hermes-state"
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
INSTALL_HINT = "install it with `apt-get install bubblewrap` (Debian/Ubuntu) or use terminal_backend=local|docker"

# Top-level dirs that are symlinks into /usr on merged-/usr systems, or real dirs elsewhere.
_SYSTEM_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# Files under the read-only /etc the agent has no business reading.
_MASKED_FILES = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-")


def _system_binds(root: str = "/", *, trust_links: bool = True) -> list[str]:
    """Read-only system dirs from ``root`` (the host, or a task's rootfs directory).

    The sandbox's own root is a writable tmpfs (writes anywhere else persist for the
    machine's life), so ``/bin`` and friends are read-only *mounts*, never symlinks: a
    symlink on the tmpfs root could be replaced by the model (``rm /bin; mkdir /bin``) and
    change what ``#!/bin/bash`` runs for the reward code; a mount point cannot be removed.

    ``trust_links``: a rootfs directory is operator configuration and its top-level links
    are followed on the host; a rootfs unpacked from an image tarball is not (an image
    with ``usr -> /`` would bind the host's whole root), so its links resolve inside it.
    """
    root = os.path.realpath(root)

    def find(name: str) -> str | None:
        host = os.path.join(root, name)
        if trust_links or root == "/":
            return os.path.realpath(host) if os.path.isdir(host) else None  # follows merged-/usr links
        return _resolve_in_root(root, name)

    usr = find("usr")
    if usr is None:
        raise SandboxUnavailable(f"bwrap backend: rootfs {root!r} has no usr/ directory inside it")
    args = ["--ro-bind", usr, "/usr"]
    for name in _SYSTEM_DIRS:
        host = find(name)
        if host is not None:
            args += ["--ro-bind", host, f"/{name}"]
    if root != "/":  # a task image: its other top-level dirs (e.g. /app, /opt) read-only too
        for name in sorted(os.listdir(root)):
            host = os.path.join(root, name)
            if name in _SYSTEM_DIRS or name in _ROOTFS_SKIP or os.path.islink(host) or not os.path.isdir(host):
                continue
            args += ["--ro-bind", host, f"/{name}"]
    etc = find("etc")
    args += ["--ro-bind", etc or "/etc", "/etc"]
    for path in _MASKED_FILES:
        if os.path.lexists(os.path.join(etc or "/etc", os.path.basename(path))):
            args += ["--ro-bind", "/dev/null", path]
    return args


def _resolve_in_root(root: str, name: str, hops: int = 8) -> str | None:
    """``root/name`` with symlinks resolved as if ``root`` were ``/`` (never leaving it);
    None when it is no directory there, or the chain is too long."""
    rel = name
    for _ in range(hops):
        path = os.path.normpath(os.path.join(root, rel))
        if path != root and not path.startswith(root + os.sep):
            return None
        if os.path.islink(path):
            target = os.readlink(path)
            base = os.path.dirname(os.path.relpath(path, root))
            rel = target.lstrip("/") if target.startswith("/") else os.path.join(base, target)
            if os.path.normpath(os.path.join("/", rel)) != os.path.join("/", os.path.normpath(rel)):
                return None  # climbs above the root with '..'
            continue
        # no link at the end: accept only when no component on the way is one either
        return path if os.path.isdir(path) and os.path.realpath(path) == path else None
    return None


# rootfs dirs the sandbox gets fresh (or not at all)
_ROOTFS_SKIP = frozenset({"usr", "etc", "proc", "dev", "sys", "tmp", "run", "workspace"})


def build_bwrap_argv(
    *,
    bwrap: str,
    host_workspace: str,
    host_state: str,
    network: bool,
    env: dict[str, str],
    command: Sequence[str],
    system_binds: list[str] | None = None,
    tmp_size_mb: int | None = None,
    chdir: str = VIEW_WORKSPACE,
) -> list[str]:
    """The full bwrap command line (pure: the only host lookup is ``_system_binds``)."""
    argv = [bwrap]
    argv += _system_binds() if system_binds is None else system_binds
    if tmp_size_mb is not None:  # RAM-backed: unbounded, one sandbox could fill the host's memory
        argv += ["--size", str(tmp_size_mb * 1024 * 1024)]
    argv += ["--tmpfs", "/tmp", "--proc", "/proc", "--dev", "/dev"]
    argv += ["--bind", host_workspace, VIEW_WORKSPACE, "--bind", host_state, VIEW_STATE]
    argv += ["--unshare-all"]
    if network:
        argv += ["--share-net", "--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf"]
    # bwrap started by root keeps every capability inside unless told: CAP_SYS_ADMIN would let
    # the model `umount /bin` or `mount -o remount,rw /usr` (the host's /usr) and swap bash.
    argv += ["--cap-drop", "ALL"]
    argv += ["--hostname", "hermes-sandbox", "--die-with-parent", "--new-session"]
    argv += ["--clearenv"]
    for name, value in env.items():
        argv += ["--setenv", name, value]
    argv += ["--chdir", chdir, "--"]
    argv += list(command)
    return argv


def sandbox_env(sandbox_id: str) -> dict[str, str]:
    return {
        "PATH": SANDBOX_PATH,
        "HOME": VIEW_WORKSPACE,
        "PWD": VIEW_WORKSPACE,
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "PAGER": "cat",
        "GIT_PAGER": "cat",
        "GIT_TERMINAL_PROMPT": "0",
        "TMPDIR": "/tmp",
        MARKER_VAR: sandbox_id,
    }


_probe_lock = threading.Lock()
_probe_ok: dict[bool, bool] = {}


def check_bwrap(network: bool, bwrap: str | None = None) -> str:
    """Return the bwrap path, or raise SandboxUnavailable saying how to get a working one.
    The start-up probe runs once per process (per network mode)."""
    path = bwrap or shutil.which("bwrap")
    if path is None:
        raise SandboxUnavailable(f"bwrap backend: `bwrap` (bubblewrap) was not found on PATH; {INSTALL_HINT}")
    with _probe_lock:
        if _probe_ok.get(network):
            return path
        with tempfile.TemporaryDirectory(prefix="hermes-bwrap-probe-") as tmp:
            ws, st = os.path.join(tmp, "ws"), os.path.join(tmp, "st")
            os.mkdir(ws)
            os.mkdir(st)
            argv = build_bwrap_argv(
                bwrap=path,
                host_workspace=ws,
                host_state=st,
                network=network,
                env=sandbox_env("probe"),
                command=["true"],
            )
            try:
                proc = subprocess.run(argv, capture_output=True, text=True, timeout=15)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise SandboxUnavailable(f"bwrap backend: bwrap failed to start ({exc}); {INSTALL_HINT}") from exc
        if proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).strip()[:500]
            raise SandboxUnavailable(
                f"bwrap backend: bwrap failed to start a sandbox (exit {proc.returncode}: {detail}); "
                "it needs unprivileged user namespaces or root; "
                f"{INSTALL_HINT}"
            )
        _probe_ok[network] = True
    return path


class BwrapSandbox(BashSessionSandbox):
    backend = "bwrap"

    def __init__(
        self,
        task_id: str,
        settings: SandboxSettings | None = None,
        *,
        bwrap: str | None = None,
        rootfs: str | None = None,
        cwd: str | None = None,
        rootfs_trusted: bool = True,
    ) -> None:
        settings = settings or SandboxSettings()
        if rootfs is not None and not (os.path.isdir(rootfs) and os.path.lexists(os.path.join(rootfs, "usr"))):
            raise SandboxUnavailable(
                f"bwrap backend: rootfs override {rootfs!r} is not a directory with a usr/ inside; "
                "expected an unpacked image root (e.g. from `docker export`), an OCI image layout "
                "tarball or a `docker save` tarball"
            )
        self._rootfs = rootfs
        self._system = _system_binds(rootfs, trust_links=rootfs_trusted) if rootfs else _system_binds()
        self._bwrap = check_bwrap(settings.network, bwrap)
        self._network = settings.network
        root = Path(settings.root)
        try:
            root.mkdir(parents=True, exist_ok=True)
            host_ws = Path(os.path.realpath(tempfile.mkdtemp(prefix=f"{_slug(task_id)}-", dir=root)))
            state = Path(tempfile.mkdtemp(prefix=f".state-{host_ws.name}-", dir=root))
        except OSError as exc:
            raise SandboxUnavailable(
                f"bwrap backend: cannot create a workspace under {root} ({exc}); "
                "set sandbox_root / TERMINAL_SANDBOX_ROOT to a writable directory"
            ) from exc
        super().__init__(
            task_id,
            workspace=VIEW_WORKSPACE,
            host_workspace=host_ws,
            state_host_dir=state,
            state_view_dir=VIEW_STATE,
            kill_grace=settings.kill_grace,
            output_limit=settings.output_limit_bytes,
            limits=settings,
        )
        self._tmp_size_mb = settings.tmp_size_mb
        self._inner_env = sandbox_env(self.sandbox_id)
        # bwrap itself carries the marker too, so /proc scans find the host-side process.
        self._host_env = {"PATH": os.environ.get("PATH", SANDBOX_PATH), "LANG": "C.UTF-8", MARKER_VAR: self.sandbox_id}
        self.start()
        if cwd:
            self.set_initial_cwd(cwd)

    def _argv(self, script: str) -> list[str]:
        assert self.host_workspace is not None
        return build_bwrap_argv(
            bwrap=self._bwrap,
            host_workspace=str(self.host_workspace),
            host_state=str(self._state_host),
            network=self._network,
            env=self._inner_env,
            command=["bash", "--noprofile", "--norc", "-c", script, "hermes-init"],
            system_binds=self._system,
            tmp_size_mb=self._tmp_size_mb,
        )

    def _env(self) -> dict[str, str]:
        return self._host_env

    def _cgroup_inescapable(self) -> bool:
        # no /sys inside the machine and every capability dropped: no way to write any
        # cgroup.procs; and the pid namespace dies with its init anyway
        return True

    def _spawn_error(self, exc: OSError) -> Exception:
        return SandboxUnavailable(f"bwrap backend: cannot run {self._bwrap} ({exc}); {INSTALL_HINT}")
