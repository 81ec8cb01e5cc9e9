"""A single-node Slurm cluster for tests and for trying the ``deploy/slurm`` recipe by hand.

Debian's ``slurm-wlm`` and ``munge`` packages are enough (installed when missing, as root with
apt). Everything the cluster needs lives in one temporary directory: its own munge key and
socket (munged runs as the ``munge`` user), ``slurm.conf`` (loopback addresses, free ports,
``proctrack/linuxproc``, one node sized by ``slurmd -C``, a short ``KillWait``), state and spool
directories and logs. Nothing under /etc or /run is touched, so a system Slurm or munge on the
same machine is left alone; clients reach this cluster through ``SLURM_CONF`` (see ``env()``).

``stop()`` cancels the cluster's jobs, stops the daemons it started and sweeps what those
daemons left behind (job processes and ``slurmstepd`` of *this* cluster only, recognised by
``SLURM_CONF`` or open files in the cluster's directory). It is idempotent and also runs at exit.

By hand (prints the ``export SLURM_CONF=...`` to use, stops everything on Ctrl-C)::

    .venv/bin/python tests/slurm/slurm_cluster.py
"""

from __future__ import annotations

import atexit
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

APT_PACKAGES = ("slurm-wlm", "munge")
BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol", "sinfo")
INSTALL_TIMEOUT_S = 180.0  # apt-get took ~45 s here; the test timeout covers this plus the run


class ClusterUnavailable(RuntimeError):
    """The cluster cannot be brought up here; the message says exactly why (used as the skip reason)."""


class ClusterFailed(RuntimeError):
    """Slurm is installed and we may run it, but a daemon died or never became ready: a failure of
    this harness or its config, never a skip."""


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]


def ensure_installed() -> None:
    """Install slurm-wlm and munge when missing and we can (root + apt-get); else raise why not."""
    missing = missing_binaries()
    if not missing:
        return
    what = f"Slurm/munge not installed (missing {', '.join(missing)})"
    if os.geteuid() != 0:
        raise ClusterUnavailable(f"{what} and not root: cannot apt-get install {' '.join(APT_PACKAGES)}")
    if shutil.which("apt-get") is None:
        raise ClusterUnavailable(f"{what} and no apt-get to install {' '.join(APT_PACKAGES)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = f"apt-get update -qq && apt-get install -y -qq {' '.join(APT_PACKAGES)}"
    try:
        done = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        raise ClusterUnavailable(f"{what}; `{cmd}` did not finish within {INSTALL_TIMEOUT_S:g}s") from None
    if done.returncode != 0 or missing_binaries():
        tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
        raise ClusterUnavailable(f"{what}; `{cmd}` failed (exit {done.returncode}): {' | '.join(tail)}")


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def _node_cpus() -> int:
    """CPUs as slurmd itself counts them (``slurmd -C``), so the node registers without a mismatch."""
    out = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, timeout=30).stdout
    match = re.search(r"\bCPUs=(\d+)", out)
    if match is None:
        raise ClusterUnavailable(f"`slurmd -C` did not report CPUs=N: {out.strip()[:200]!r}")
    return int(match.group(1))


def _tail(path: Path, lines: int = 6) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return f"(no {path.name})"


class SlurmCluster:
    """munged + slurmctld + slurmd in the foreground, as our own child processes."""

    def __init__(self, kill_wait_s: int = 20, keep_dir: bool = False) -> None:
        self.kill_wait_s = kill_wait_s
        self.keep_dir = keep_dir
        self.root = Path("/nonexistent")  # made by start()
        self.conf = self.root / "slurm.conf"
        self.munge_socket = self.root / "munge" / "munge.sock"
        self.hostname = socket.gethostname().split(".")[0]
        self.cpus = 0
        self.daemons: dict[str, subprocess.Popen] = {}
        self._stopped = False

    # ------------------------------------------------------------------ start

    def start(self, timeout_s: float = 60.0) -> SlurmCluster:
        if os.geteuid() != 0:
            raise ClusterUnavailable("not root: munged must run as the munge user and slurmd as root")
        ensure_installed()
        self.root = Path(tempfile.mkdtemp(prefix="hermes-slurm-", dir="/tmp"))
        self.root.chmod(0o755)  # munged (user munge) must reach its socket below
        self.conf = self.root / "slurm.conf"
        self.munge_socket = self.root / "munge" / "munge.sock"
        atexit.register(self.stop)
        try:
            self._start_munge(timeout_s)
            self._write_conf()
            self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
            self._wait(
                lambda: "is UP" in self.run("scontrol", "ping", check=False).stdout,
                timeout_s,
                "slurmctld to answer `scontrol ping`",
                "slurmctld",
            )
            self._spawn("slurmd", ["slurmd", "-D", "-f", str(self.conf)])
            self._wait(self._node_idle, timeout_s, f"node {self.hostname} to be idle in `sinfo`", "slurmd")
        except BaseException:
            self.stop()
            raise
        return self

    def _start_munge(self, timeout_s: float) -> None:
        try:
            munge_user = pwd.getpwnam("munge")
        except KeyError:
            raise ClusterUnavailable("no `munge` user (the munge package creates it)") from None
        mdir = self.munge_socket.parent
        mdir.mkdir(mode=0o755)
        key = mdir / "munge.key"
        key.write_bytes(os.urandom(1024))  # this cluster's own key: /etc/munge is not touched
        key.chmod(0o600)
        for path in (mdir, key):
            os.chown(path, munge_user.pw_uid, munge_user.pw_gid)
        self._spawn(
            "munged",
            [
                "munged",
                "--foreground",
                f"--socket={self.munge_socket}",
                f"--key-file={key}",
                f"--pid-file={mdir / 'munged.pid'}",
                f"--log-file={mdir / 'munged.log'}",
                f"--seed-file={mdir / 'seed'}",
            ],
            user=munge_user.pw_uid,
            group=munge_user.pw_gid,
        )

        def answers() -> bool:
            if not self.munge_socket.exists():
                return False
            cred = subprocess.run(["munge", "-n", "-S", str(self.munge_socket)], capture_output=True, timeout=10)
            return cred.returncode == 0

        self._wait(answers, timeout_s, "munged to issue a credential", "munged")

    def _write_conf(self) -> None:
        for sub in ("state", "spool", "log"):
            (self.root / sub).mkdir()
        detected = _node_cpus()
        self.cpus = max(2, detected)  # two array tasks side by side, even on a 1-CPU machine
        overrides = "SlurmdParameters=config_overrides\n" if detected < 2 else ""
        ctld_port, slurmd_port = _free_ports(2)
        r = self.root
        self.conf.write_text(
            f"""# written by tests/slurm/slurm_cluster.py: a private single-node cluster
ClusterName=hermes
SlurmctldHost={self.hostname}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
KillWait={self.kill_wait_s}
StateSaveLocation={r / "state"}
SlurmdSpoolDir={r / "spool"}
SlurmctldPidFile={r / "slurmctld.pid"}
SlurmdPidFile={r / "slurmd.pid"}
SlurmctldLogFile={r / "log" / "slurmctld.log"}
SlurmdLogFile={r / "log" / "slurmd.log"}
{overrides}NodeName={self.hostname} NodeAddr=127.0.0.1 CPUs={self.cpus} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
        )

    def _spawn(self, name: str, argv: Sequence[str], **kw: object) -> None:
        out = open(self.root / f"{name}.out", "wb")
        try:
            # own session: a Ctrl-C aimed at the test run does not reach the daemons; stop() does
            self.daemons[name] = subprocess.Popen(
                list(argv),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=self.env(),
                **kw,
            )  # type: ignore[arg-type]
        finally:
            out.close()

    def _wait(self, pred, timeout_s: float, what: str, daemon: str) -> None:  # type: ignore[no-untyped-def]
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            proc = self.daemons.get(daemon)
            if proc is not None and proc.poll() is not None:
                raise ClusterFailed(
                    f"{daemon} exited ({proc.returncode}) while waiting for {what}: "
                    f"{_tail(self.root / f'{daemon}.out')}"
                )
            try:
                if pred():
                    return
            except (OSError, subprocess.SubprocessError):
                pass
            time.sleep(0.3)
        raise ClusterFailed(f"timed out after {timeout_s:g}s waiting for {what}: {_tail(self.root / f'{daemon}.out')}")

    def _node_idle(self) -> bool:
        states = self.run("sinfo", "-h", "-N", "-o", "%T", check=False).stdout.split()
        return states == ["idle"]

    # ------------------------------------------------------------------ use

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """An environment whose Slurm commands talk to this cluster."""
        env = dict(os.environ if base is None else base)
        env["SLURM_CONF"] = str(self.conf)
        return env

    def run(self, *argv: str, check: bool = True, timeout: float = 30.0) -> subprocess.CompletedProcess:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, env=self.env())
        if check and done.returncode != 0:
            raise RuntimeError(f"`{' '.join(argv)}` failed ({done.returncode}): {done.stderr.strip()}")
        return done

    def sbatch(
        self, script: Path, options: Sequence[str], script_args: Sequence[str], env: dict[str, str], cwd: Path
    ) -> str:
        """Submit; return the job id (the array's job id for an array)."""
        argv = ["sbatch", "--parsable", *options, str(script), *script_args]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, env=self.env(env), cwd=str(cwd))
        if done.returncode != 0:
            raise RuntimeError(f"sbatch failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout.strip().split(";")[0]

    def tasks(self, job_id: str) -> dict[int, str]:
        """Array task id -> state, for the tasks squeue still lists (finished ones drop out)."""
        out = self.run("squeue", "-h", "-r", "-j", job_id, "-o", "%K %T", check=False).stdout
        tasks = {}
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0].isdigit():
                tasks[int(parts[0])] = parts[1]
        return tasks

    def job_field(self, job: str, name: str) -> str:
        """One field of ``scontrol show job`` (e.g. JobState, ExitCode); finished jobs stay for MinJobAge."""
        out = self.run("scontrol", "show", "job", job, check=False).stdout
        match = re.search(rf"\b{name}=(\S+)", out)
        return match.group(1) if match else ""

    # ------------------------------------------------------------------ stop

    def stop(self) -> None:
        """Cancel jobs, stop our daemons, sweep what they left; never raises."""
        if self._stopped:
            return
        self._stopped = True
        try:
            self._cancel_jobs()
        except Exception:  # noqa: BLE001 - go on stopping the daemons whatever happened
            pass
        for name in ("slurmd", "slurmctld", "munged"):
            self._terminate(name)
        self._sweep()
        if not self.keep_dir and self.root.name.startswith("hermes-slurm-"):
            shutil.rmtree(self.root, ignore_errors=True)

    def _cancel_jobs(self) -> None:
        ctld = self.daemons.get("slurmctld")
        if ctld is None or ctld.poll() is not None:
            return
        jobs = self.run("squeue", "-h", "-o", "%A", check=False).stdout.split()
        if not jobs:
            return
        self.run("scancel", *jobs, check=False)
        end = time.monotonic() + self.kill_wait_s + 30
        while time.monotonic() < end and self.run("squeue", "-h", "-o", "%A", check=False).stdout.strip():
            time.sleep(0.5)

    def _terminate(self, name: str) -> None:
        proc = self.daemons.get(name)
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def _sweep(self) -> None:
        """SIGKILL processes of this cluster that outlived its daemons (job steps, their children)."""
        mine = f"SLURM_CONF={self.conf}".encode()
        root = str(self.root)
        me = os.getpid()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == me:
                continue
            try:
                ours = mine in (entry / "environ").read_bytes().split(b"\0")
                if not ours:
                    ours = any(os.readlink(fd).startswith(root) for fd in (entry / "fd").iterdir())
            except OSError:
                continue  # gone, or not ours to read
            if ours:
                try:
                    os.kill(int(entry.name), signal.SIGKILL)
                except OSError:
                    pass


def main() -> int:
    cluster = SlurmCluster(keep_dir=True)
    try:
        cluster.start()
    except ClusterUnavailable as exc:
        print(f"cannot start the cluster: {exc}")
        return 1
    print(
        f"single-node Slurm cluster up ({cluster.cpus} CPUs, KillWait {cluster.kill_wait_s}s), files in {cluster.root}"
        f"\n  export SLURM_CONF={cluster.conf}\nCtrl-C (or kill {os.getpid()}) stops it; the directory is kept for its logs.",
        flush=True,
    )
    for signum in (signal.SIGINT, signal.SIGTERM):  # also when started in the background (SIGINT ignored)
        signal.signal(signum, signal.default_int_handler)
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
