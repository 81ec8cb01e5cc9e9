"""docker backend: one long-lived container per task; its persistent shell via one ``docker exec -i``.

The container runs ``sleep infinity`` under ``--init`` with every capability dropped
except the three file-ownership ones, no new privileges, a pids limit, CPU/memory caps
(no swap beyond the memory cap) and no network unless asked. Containers are labelled
(task, "managed", owner host:pid:start); the first sandbox of a process removes
containers whose owner process is gone (a crash left them), like ``stale.py`` does for dirs. The workspace and the session state dir are host dirs
bind-mounted at /workspace and /run/hermes-state. ``host_workspace`` stays None
(contract): with a remote or rootless engine the host dir is not the container's view.
"""

from __future__ import annotations

import atexit
import os
import select
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from environments.redact import redact, truncate
from environments.sandboxes import procfs, quota
from environments.sandboxes.base import (
    MARKER_VAR,
    BashSessionSandbox,
    ProcessInfo,
    SandboxUnavailable,
    _Channel,
    _slug,
)
from environments.sandboxes.capture import BoundedOutput
from environments.sandboxes.settings import SandboxSettings
from environments.sandboxes.stale import discard_owner

VIEW_WORKSPACE = "/workspace"
VIEW_STATE = "/run/hermes-state"
LABEL = "hermes-console.task"
LABEL_MANAGED = "hermes-console.managed"  # every container this tool starts: what the sweep lists
LABEL_OWNER = "hermes-console.owner"  # "<hostname>:<pid>:<start ticks>" of the process that started it
_FALLBACK = "use terminal_backend=local|bwrap"
_sweep_lock = threading.Lock()
_swept_engines: set[str] = set()


def owner_label(pid: int | None = None) -> str:
    """Who started a container: host, pid and the pid's start time (pids get reused)."""
    pid = os.getpid() if pid is None else pid
    st = procfs.read_stat(pid)
    return f"{socket.gethostname()}:{pid}:{st.start_ticks if st is not None else -1}"


def container_name(task_id: str, suffix: str | None = None) -> str:
    """``hermes-<first 8 of the task slug>-<hex>``: readable in ``docker ps``, unique."""
    return f"hermes-{_slug(task_id, 8)}-{suffix or uuid.uuid4().hex[:8]}"


def build_run_argv(
    *,
    docker: str,
    name: str,
    image: str,
    task_id: str,
    host_workspace: str,
    host_state: str,
    network: bool,
    cpu: float,
    memory_mb: int,
    pids_limit: int,
    env: dict[str, str],
    owner: str = "",
    tmp_size_mb: int = 512,
    read_only: bool = False,
    cpu_time_s: int | None = None,
    file_size_mb: int | None = None,
) -> list[str]:
    argv = [docker, "run", "-d", "--init", "--name", name]
    argv += ["--cap-drop", "ALL", "--cap-add", "DAC_OVERRIDE", "--cap-add", "CHOWN", "--cap-add", "FOWNER"]
    argv += ["--security-opt", "no-new-privileges"]
    # --memory-swap = --memory: the limit is a real limit, not a hint to start swapping
    argv += [
        "--pids-limit",
        str(pids_limit),
        "--cpus",
        f"{cpu:g}",
        "--memory",
        f"{memory_mb}m",
        "--memory-swap",
        f"{memory_mb}m",
    ]
    if not network:
        argv += ["--network", "none"]
    # per-process rlimits, as bwrap/local set them (soft < hard: SIGXCPU first, a recognisable exit)
    if cpu_time_s is not None:
        argv += ["--ulimit", f"cpu={int(cpu_time_s)}:{int(cpu_time_s) + 5}"]
    if file_size_mb is not None:
        argv += ["--ulimit", f"fsize={int(file_size_mb) << 20}"]
    argv += ["--tmpfs", f"/tmp:rw,nosuid,size={int(tmp_size_mb)}m"]
    if read_only:  # the image's root read-only: writes go to the workspace and these tmpfs only
        argv += ["--read-only"]
        for path in ("/run", "/var/tmp"):
            argv += ["--tmpfs", f"{path}:rw,nosuid,size={int(tmp_size_mb)}m"]
    argv += ["-v", f"{host_workspace}:{VIEW_WORKSPACE}", "-v", f"{host_state}:{VIEW_STATE}"]
    argv += ["-w", VIEW_WORKSPACE]
    for key, value in env.items():
        argv += ["-e", f"{key}={value}"]
    argv += ["--label", f"{LABEL}={task_id}", "--label", f"{LABEL_MANAGED}=1"]
    if owner:
        argv += ["--label", f"{LABEL_OWNER}={owner}"]
    argv += [image, "sleep", "infinity"]
    return argv


# --------------------------------------------------------------------------- orphan sweep


def build_sweep_list_argv(*, docker: str) -> list[str]:
    """Every container (running or not) this tool labelled, with its owner label."""
    return [
        docker,
        "ps",
        "-a",
        "--no-trunc",
        "--filter",
        f"label={LABEL_MANAGED}=1",
        "--format",
        '{{.ID}}\t{{.Label "%s"}}' % LABEL_OWNER,
    ]


def build_remove_argv(*, docker: str, container_ids: list[str]) -> list[str]:
    return [docker, "rm", "-f", *container_ids]


def parse_sweep_listing(text: str) -> list[tuple[str, str]]:
    rows = []
    for line in text.splitlines():
        cid, _, owner = line.strip().partition("\t")
        if cid:
            rows.append((cid, owner.strip()))
    return rows


def _owner_gone(owner: str, host: str) -> bool:
    """True only for an owner on *this* host whose process is gone (or is a reused pid)."""
    parts = owner.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != host:
        return False  # unknown shape, or another machine sharing the engine: not ours to judge
    try:
        pid, ticks = int(parts[1]), int(parts[2])
    except ValueError:
        return False
    st = procfs.read_stat(pid)
    return st is None or st.state in ("Z", "X") or st.start_ticks != ticks


def orphaned(rows: list[tuple[str, str]], host: str | None = None) -> list[str]:
    host = socket.gethostname() if host is None else host
    return [cid for cid, owner in rows if _owner_gone(owner, host)]


def sweep_orphans(docker: str, timeout: float = 60.0) -> list[str]:
    """Remove containers left by a crashed earlier process of this tool. Returns their ids.
    Never raises: a failed sweep must not stop a new sandbox from starting."""
    try:
        listing = subprocess.run(build_sweep_list_argv(docker=docker), capture_output=True, text=True, timeout=timeout)
        if listing.returncode != 0:
            return []
        victims = orphaned(parse_sweep_listing(listing.stdout))
        if victims:
            subprocess.run(
                build_remove_argv(docker=docker, container_ids=victims), capture_output=True, timeout=timeout
            )
        return victims
    except (OSError, subprocess.TimeoutExpired):
        return []


def sweep_once(docker: str) -> None:
    """The startup sweep: once per process and engine, before the first container."""
    with _sweep_lock:
        if docker in _swept_engines:
            return
        _swept_engines.add(docker)
    sweep_orphans(docker)


# Containers whose `docker rm` failed (the engine was away during cleanup): retried when a
# sandbox next starts on that engine, and at exit; the startup sweep of a later process
# takes any still left (their owner is gone by then).
_pending_lock = threading.Lock()
_pending_removal: dict[str, set[str]] = {}


def _remember_for_removal(docker: str, container: str) -> None:
    with _pending_lock:
        _pending_removal.setdefault(docker, set()).add(container)


def retry_removals(docker: str, timeout: float = 60.0) -> list[str]:
    """Remove containers an earlier cleanup could not; returns the ones removed now."""
    with _pending_lock:
        names = sorted(_pending_removal.get(docker, ()))
    if not names:
        return []
    try:
        proc = subprocess.run(
            build_remove_argv(docker=docker, container_ids=names), capture_output=True, text=True, timeout=timeout
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    gone = [
        n for n in names if proc.returncode == 0 or n not in proc.stderr or "no such container" in proc.stderr.lower()
    ]
    with _pending_lock:
        _pending_removal.get(docker, set()).difference_update(gone)
    return gone


@atexit.register
def _retry_all_removals() -> None:
    for docker in list(_pending_removal):
        retry_removals(docker, timeout=20.0)


def build_exec_argv(*, docker: str, container: str, script: str) -> list[str]:
    # setsid -w: the command leads its own session inside the container, so a timeout can
    # kill its whole group there (killing the local `docker exec` client would not).
    # HERMES_OUTPUT_SYNC: the shells end each command's output with a sync token (see _SyncChannel).
    return [docker, "exec", "-i", "-e", "HERMES_OUTPUT_SYNC=1", container, "setsid", "-w", "bash", "-c", script, "bash"]


SYNC_WAIT_S = 10.0


class _SyncChannel(_Channel):
    """docker relays the container's stdout and stderr on separate streams, so a command's
    trailer (stderr) can overtake the end of its output (stdout). The shells write
    ``\\0HS <nonce> <seq>\\0`` at the end of each command's output, and INIT writes
    ``\\0HS <nonce> D<n>\\0`` after the output of a shell that died (``exit 3``) before its D
    record; after the trailer or the D record we read output until that token (bounded
    wait) and strip every token of ours from the text."""

    def _setup(self, nonce: str) -> None:
        super()._setup(nonce)
        self._prefix = f"\0HS {nonce} ".encode()
        self._carry = b""
        self._awaiting: int | None = None  # the command whose trailer came before its token
        self._last_token = 0  # seq of the last token seen
        self._death_awaited: int | None = None  # the dead shell whose D record came before its token
        self._last_death_token = -1

    def read_records(self, block_ms: int = 0) -> list[tuple[Any, ...]]:
        records = super().read_records(block_ms)
        for rec in records:
            if rec[0] == "T" and rec[1] > self._last_token:
                self._awaiting = rec[1]
            elif rec[0] == "D" and rec[1] is not None and rec[1] > self._last_death_token:
                self._death_awaited = rec[1]
        return records

    def _filter(self, chunk: bytes) -> bytes:
        data = self._carry + chunk
        self._carry = b""
        out = bytearray()
        while True:
            at = data.find(self._prefix)
            if at < 0:
                keep = _partial_suffix(data, self._prefix)
                out += data[: len(data) - keep]
                self._carry = data[len(data) - keep :]
                return bytes(out)
            end = data.find(b"\0", at + len(self._prefix))
            if end < 0:
                if len(data) - at > 64:  # not a token of ours after all
                    out += data[: at + 1]
                    data = data[at + 1 :]
                    continue
                out += data[:at]
                self._carry = data[at:]
                return bytes(out)
            seq = data[at + len(self._prefix) : end]
            if seq.isdigit():
                self._last_token = max(self._last_token, int(seq))
                if self._awaiting is not None and self._last_token >= self._awaiting:
                    self._awaiting = None
            elif seq[:1] == b"D" and seq[1:].isdigit():
                self._last_death_token = max(self._last_death_token, int(seq[1:]))
                if self._death_awaited is not None and self._last_death_token >= self._death_awaited:
                    self._death_awaited = None
            out += data[:at]
            data = data[end + 1 :]

    def read_output(self, buf: BoundedOutput | None, until_empty: bool = False) -> None:
        end = time.monotonic() + SYNC_WAIT_S
        while True:
            try:
                chunk = os.read(self.ofd, 1 << 16)
            except BlockingIOError:
                chunk = None
            except OSError:
                return
            if chunk == b"":
                if buf is not None and self._carry:
                    buf.feed(self._carry)
                self._carry = b""
                return
            if chunk is not None:
                data = self._filter(chunk)
                if buf is not None and data:
                    buf.feed(data)
                if not until_empty:
                    return
                continue
            waiting = self._awaiting is not None or self._death_awaited is not None
            if not until_empty or not waiting or time.monotonic() >= end:
                return
            probe = select.poll()
            probe.register(self.ofd, select.POLLIN)
            probe.poll(50)

    def discard_output(self, readable: bool = True) -> None:
        self._awaiting = self._death_awaited = None  # between commands: wait for nothing
        super().discard_output(readable)


def _read_counters(path: Path) -> dict[str, int]:
    """``key value`` lines (memory.oom_control, pids.events); {} when unreadable."""
    out: dict[str, int] = {}
    try:
        text = path.read_text()
    except OSError:
        return out
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


def _partial_suffix(data: bytes, token: bytes) -> int:
    """Length of the longest tail of ``data`` that is a prefix of ``token``."""
    for n in range(min(len(token) - 1, len(data)), 0, -1):
        if data.endswith(token[:n]):
            return n
    return 0


def build_kill_argv(*, docker: str, container: str, pgid: int, sig: str) -> list[str]:
    # bash's builtin kill: an image need not ship procps
    return [docker, "exec", container, "bash", "-c", f"kill -{sig} -- -{int(pgid)}"]


def check_engine(docker: str | None = None, timeout: float = 15.0) -> str:
    """Return the docker CLI path once ``docker info`` answers, else SandboxUnavailable."""
    path = docker or shutil.which("docker")
    if path is None:
        raise SandboxUnavailable(
            f"docker backend: the `docker` CLI was not found on PATH; install Docker or {_FALLBACK}"
        )
    try:
        proc = subprocess.run([path, "info"], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SandboxUnavailable(
            f"docker backend: no Docker engine answered `docker info` (no reply within {timeout:g}s); "
            f"start a Docker daemon or {_FALLBACK}"
        ) from None
    except OSError as exc:
        raise SandboxUnavailable(f"docker backend: cannot run {path} ({exc}); {_FALLBACK}") from exc
    if proc.returncode != 0:
        detail = " ".join((proc.stderr or proc.stdout or "").split())[:400]
        raise SandboxUnavailable(
            f"docker backend: no Docker engine answered `docker info` ({detail}); start a Docker daemon or {_FALLBACK}"
        )
    return path


class DockerSandbox(BashSessionSandbox):
    backend = "docker"
    _channel_cls = _SyncChannel
    _kills_early = False  # its processes stop with the container (docker rm -f, at cleanup)

    def __init__(
        self,
        task_id: str,
        settings: SandboxSettings | None = None,
        *,
        docker: str | None = None,
        cwd: str | None = None,
    ) -> None:
        settings = settings or SandboxSettings()
        self._docker = check_engine(docker)
        sweep_once(self._docker)
        retry_removals(self._docker)
        root = Path(settings.root)
        try:
            root.mkdir(parents=True, exist_ok=True)
            host_ws = Path(os.path.realpath(tempfile.mkdtemp(prefix=f"{_slug(task_id)}-", dir=root)))
            state = Path(tempfile.mkdtemp(prefix=f".state-{host_ws.name}-", dir=root))
        except OSError as exc:
            raise SandboxUnavailable(f"docker backend: cannot create a workspace under {root} ({exc})") from exc
        self._host_ws = host_ws
        super().__init__(
            task_id,
            workspace=VIEW_WORKSPACE,
            host_workspace=None,
            state_host_dir=state,
            state_view_dir=VIEW_STATE,
            kill_grace=settings.kill_grace,
            output_limit=settings.output_limit_bytes,
            limits=settings,  # enforced by the engine (run argv); kept for the notes and the drill-down
        )
        self.container = container_name(task_id)
        # the whole workspace bounded in sum, as on bwrap: a sized tmpfs on the host dir we bind
        self._ws_tmpfs = quota.mount_tmpfs(host_ws, settings.workspace_size_mb)
        argv = build_run_argv(
            docker=self._docker,
            name=self.container,
            image=settings.docker_image,
            task_id=task_id,
            host_workspace=str(host_ws),
            host_state=str(state),
            network=settings.network,
            cpu=settings.cpu,
            memory_mb=settings.memory_mb,
            pids_limit=settings.pids_limit,
            env={
                "HOME": VIEW_WORKSPACE,
                "TERM": "dumb",
                "PAGER": "cat",
                "GIT_PAGER": "cat",
                MARKER_VAR: self.sandbox_id,
            },
            owner=owner_label(),
            tmp_size_mb=settings.tmp_size_mb,
            read_only=settings.docker_read_only,
            cpu_time_s=settings.cpu_time_s,
            file_size_mb=settings.file_size_mb,
        )
        self._image = settings.docker_image
        self._settings = settings
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)  # may pull the image
            failure = None if proc.returncode == 0 else " ".join(proc.stderr.split())[:500]
        except (OSError, subprocess.TimeoutExpired) as exc:
            failure = str(exc)
        if failure is not None:
            self._cleaned = self._closed = True  # nothing to clean but what is removed here
            self._discard_half_made()
            if self._ws_tmpfs:
                quota.unmount(host_ws)
            for path in (host_ws, state):
                shutil.rmtree(path, ignore_errors=True)
            if self._owner_record is not None:
                discard_owner(self._owner_record)
            raise SandboxUnavailable(
                f"docker backend: `docker run` failed for image {settings.docker_image!r} ({failure}); "
                f"check the image name (TERMINAL_DOCKER_IMAGE) or {_FALLBACK}"
            )
        self._host_env = dict(os.environ)
        self._host_env[MARKER_VAR] = self.sandbox_id
        self._pidns = self._container_pidns()
        self._cgroup_dirs = self._container_cgroups()
        # the container's own init and `sleep infinity`, before any exec: never the agent's
        self._keeper_pids = {p.pid for p in self.process_tree()} if self._pidns is not None else set()
        self.start()
        if cwd:
            self.set_initial_cwd(cwd)

    def limits_summary(self) -> dict[str, str]:
        lim = self._settings
        return {
            "pids": f"{lim.pids_limit} (docker --pids-limit)",
            "cpu": f"{lim.cpu:g} CPUs (docker --cpus)",
            "memory": f"{lim.memory_mb} MB, no swap (docker --memory)",
            "cpu_time": f"{lim.cpu_time_s} s per process (docker --ulimit cpu)",
            "file_size": f"{lim.file_size_mb} MB per file (docker --ulimit fsize)",
            "workspace": (
                f"{lim.workspace_size_mb} MB in all (tmpfs)"
                if self._ws_tmpfs
                else "unbounded in sum (a sized tmpfs needs root)"
            ),
            "root": "read-only image root" if lim.docker_read_only else "writable container layer (gone at cleanup)",
            "image": self._image,
            "enforced_by": "docker",
        }

    def _argv(self, script: str) -> list[str]:
        return build_exec_argv(docker=self._docker, container=self.container, script=script)

    def _env(self) -> dict[str, str]:
        return self._host_env

    def _verifier_in_machine(self) -> bool:
        return False  # docker exec passes only stdio: the verifier runner is its own exec

    # ------------------------------------------------------------ pids

    _init_pid: int | None = None
    _keeper_pids: set[int] = set()  # replaced per instance; never mutated
    _ws_tmpfs = False

    def _container_pidns(self) -> str | None:
        """The container's pid namespace as this host sees it, when the engine runs on this
        kernel and we may look (root, local engine); None otherwise (Docker Desktop's VM, a
        remote or rootless engine): then timeouts fall back to killing inside the container."""
        try:
            proc = subprocess.run(
                [self._docker, "inspect", "--format", "{{.State.Pid}}", self.container],
                capture_output=True,
                text=True,
                timeout=30,
            )
            pid = int(proc.stdout.strip()) if proc.returncode == 0 else 0
            # the engine's pid is only ours to trust if that process carries this sandbox's marker
            # (a rootless engine reports pids of its own namespace: another process here)
            if pid <= 0 or not procfs.has_env_marker(pid, self._marker):
                return None
            ns = os.readlink(f"/proc/{pid}/ns/pid")
            self._init_pid = pid if ns else None
            return ns
        except (OSError, ValueError, subprocess.TimeoutExpired):
            return None

    def _wants_cgroup(self) -> bool:
        return False  # the engine makes the container's cgroup

    def _limit_prefix(self) -> list[str]:
        return []  # limits are `docker run` options; a host-side prefix would bind the CLI

    def _container_cgroups(self) -> dict[str, Path]:
        """The container's memory and pids cgroup dirs as this host sees them (from its init's
        /proc/<pid>/cgroup), for the limit-hit counters; {} with a remote engine."""
        if self._init_pid is None:
            return {}
        out: dict[str, Path] = {}
        try:
            lines = Path(f"/proc/{self._init_pid}/cgroup").read_text().splitlines()
        except OSError:
            return {}
        for line in lines:
            _, controllers, path = line.split(":", 2)
            for name in ("memory", "pids"):
                if name in controllers.split(","):
                    out[name] = Path("/sys/fs/cgroup") / name / path.lstrip("/")
            if controllers == "" and "memory" not in out:  # cgroup v2: one dir for all
                out["unified"] = Path("/sys/fs/cgroup") / path.lstrip("/")
        return {k: v for k, v in out.items() if v.is_dir()}

    def _limit_counters(self) -> dict[str, int]:
        dirs = self._cgroup_dirs
        out: dict[str, int] = {}
        if "unified" in dirs:
            out["oom_kill"] = _read_counters(dirs["unified"] / "memory.events").get("oom_kill", 0)
            out["pids_max"] = _read_counters(dirs["unified"] / "pids.events").get("max", 0)
        if "memory" in dirs:
            out["oom_kill"] = _read_counters(dirs["memory"] / "memory.oom_control").get("oom_kill", 0)
        if "pids" in dirs:
            out["pids_max"] = _read_counters(dirs["pids"] / "pids.events").get("max", 0)
        return out

    def _map_pid(self, reported: int | None, candidates: set[int] | None = None) -> int | None:
        """Host pid of a container process that reported its in-container pid (found among all
        of the host's: a container's processes are in no group of ours; ``candidates`` unused)."""
        if reported is None or self._pidns is None:
            return None
        for pid in procfs.all_pids():
            try:
                if (
                    procfs.ns_pid(pid) == reported
                    and os.readlink(f"/proc/{pid}/ns/pid") == self._pidns
                    and procfs.has_env_marker(pid, self._marker)
                ):
                    return pid
            except OSError:
                continue
        return None

    def _kill_command(self, ch: _Channel, t0: int) -> None:
        """With the shell's host pid known: kill only the command's processes, as bwrap does
        (the shell, its cwd, exports and earlier background jobs live on). Otherwise kill the
        machine's process group inside the container (INIT leads it via ``setsid``); the next
        command starts a fresh INIT in the same container (its files persist)."""
        if ch.shell_pid is not None:
            super()._kill_command(ch, t0)
            return
        is_agent = ch is self._agent  # (apart: `is` would narrow ch to the attribute's Optional type)
        pgid = ch.reported_ppid if is_agent else ch.reported_pid
        if pgid is not None and pgid > 1:  # `kill -- -1` would hit everything but init
            self._docker_kill(pgid, "KILL")

    def _kill_machine(self, ch: _Channel) -> None:
        """Killing the local ``docker exec`` client does not stop what it started in the
        container: kill the machine's group in there too."""
        is_agent = ch is self._agent  # (apart: `is` would narrow ch to the attribute's Optional type)
        pgid = ch.reported_ppid if is_agent else ch.reported_pid
        if pgid is not None and pgid > 1 and not self._closed:
            self._docker_kill(pgid, "KILL")
        super()._kill_machine(ch)

    def _start_machine(self) -> None:
        try:
            super()._start_machine()
        except SandboxUnavailable as exc:
            raise SandboxUnavailable(self._why_unusable() or str(exc)) from None

    def _machine_dead_note(self, buf: BoundedOutput) -> None:
        why = self._why_unusable()
        buf.feed(
            ("\n[" + why + "]").encode()
            if why
            else b"\n[The sandbox machine stopped; a fresh one starts with the next command]"
        )

    def _why_unusable(self) -> str:
        """When the engine or the container is gone, say so (instead of "shell did not start")."""
        try:
            proc = subprocess.run(
                [self._docker, "inspect", "--format", "{{.State.Running}}", self.container],
                capture_output=True,
                text=True,
                timeout=20,
            )
        except (OSError, subprocess.TimeoutExpired):
            return f"docker backend: the Docker engine did not answer about container {self.container}"
        if proc.returncode == 0 and proc.stdout.strip() == "true":
            return ""
        detail = " ".join((proc.stderr or proc.stdout).split())[:300]
        if proc.returncode != 0 and ("Cannot connect" in detail or "daemon" in detail.lower()):
            return f"docker backend: the Docker engine stopped answering ({detail}); container {self.container} is lost"
        return (
            f"docker backend: container {self.container} is not running any more (the Docker engine restarted "
            f"or it was removed: {detail or 'stopped'}); this sandbox cannot continue"
        )

    def _docker_kill(self, pgid: int, sig: str) -> None:
        argv = build_kill_argv(docker=self._docker, container=self.container, pgid=pgid, sig=sig)
        try:
            subprocess.run(argv, capture_output=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass

    def process_tree(self) -> list[ProcessInfo]:
        """From ``docker top`` (host pids; works even if the image has no ps)."""
        try:
            proc = subprocess.run(
                [self._docker, "top", self.container, "-eo", "pid,ppid,stat,etimes,args"],
                capture_output=True,
                text=True,
                timeout=10,
            )
        except (OSError, subprocess.TimeoutExpired):
            return []
        return parse_docker_top(proc.stdout) if proc.returncode == 0 else []

    def _agent_leftovers(self) -> list[int]:
        """The container's processes minus its init and keeper (``sleep infinity``: killing
        it ends the container) and the machine (agent shell, verifier runner). Host pids, so
        only with a local engine (``_pidns`` known); a remote engine's pids are not ours to kill."""
        if self._pidns is None:
            return []
        spare = self._keeper_pids | self._infra_pids()
        return [p.pid for p in self.process_tree() if p.pid not in spare and p.state not in ("Z", "X")]

    def has_background_processes(self) -> bool:
        # The container's own init and `sleep infinity` are not the agent's work.
        return any(not (p.command == "sleep infinity" or "docker-init" in p.command) for p in self.process_tree())

    def _discard_half_made(self) -> None:
        """A `docker run` cut short (engine away, timeout) may still have made the container."""
        try:
            proc = subprocess.run(
                [self._docker, "rm", "-f", self.container], capture_output=True, text=True, timeout=30
            )
            if proc.returncode == 0 or "no such container" in proc.stderr.lower():
                return
        except (OSError, subprocess.TimeoutExpired):
            pass
        _remember_for_removal(self._docker, self.container)

    def _teardown(self) -> None:
        try:
            proc = subprocess.run(
                [self._docker, "rm", "-f", self.container], capture_output=True, text=True, timeout=60
            )
            failure = "" if proc.returncode == 0 or "no such container" in proc.stderr.lower() else proc.stderr
        except (OSError, subprocess.TimeoutExpired) as exc:
            failure = str(exc)
        if self._ws_tmpfs:
            quota.unmount(self._host_ws)  # lazily: a container that lingers keeps only its own view
        if failure:
            _remember_for_removal(self._docker, self.container)  # retried when the engine answers again
            raise RuntimeError(f"docker rm -f {self.container} failed (retried later): {failure.strip()[:300]}")

    def _dirs_to_remove(self) -> list[Path]:
        return [self._state_host, self._host_ws]


def parse_docker_top(text: str) -> list[ProcessInfo]:
    rows: list[ProcessInfo] = []
    for line in text.splitlines()[1:]:
        parts = line.split(None, 4)
        if len(parts) < 5:
            continue
        try:
            rows.append(
                ProcessInfo(
                    pid=int(parts[0]),
                    ppid=int(parts[1]),
                    state=parts[2][:1],
                    elapsed_s=float(parts[3]),
                    command=truncate(redact(parts[4]), 500),
                )
            )
        except ValueError:
            continue
    return rows
