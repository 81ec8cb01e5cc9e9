"""Red team (#18, findings 4 and 6): resource bombs are bounded, nothing outlives cleanup.

Real local and bwrap sandboxes with small limits; /proc (tests/helpers/proc_oracle)
is the oracle for processes, the host's own ability to fork for "host unaffected".
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from environments.sandboxes import cgroups
from environments.sandboxes.bwrap import BwrapSandbox, build_bwrap_argv
from environments.sandboxes.local import LocalSandbox
from environments.sandboxes.settings import SandboxSettings
from tests.helpers.proc_oracle import live_pids_with, wait_until_gone

pytestmark = pytest.mark.timeout(120)
BACKENDS = [LocalSandbox, BwrapSandbox]
HAVE_CGROUP = bool(cgroups._available())
needs_cgroup = pytest.mark.skipif(not HAVE_CGROUP, reason="no writable pids/memory cgroup here")


def _fp() -> str:
    """A unique `sleep` argument: the /proc fingerprint of this test's processes."""
    return f"7{uuid.uuid4().int % 10**6:06d}.5"


def _host_still_forks() -> None:
    assert subprocess.run(["true"], timeout=30).returncode == 0


def _marker_procs(box) -> list:
    return [p for p in map(int, filter(str.isdigit, os.listdir("/proc"))) if _has(p, box._marker)]


def _has(pid: int, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return marker in fh.read().split(b"\0")
    except OSError:
        return False


# ------------------------------------------------------------------ finding 4


@needs_cgroup
@pytest.mark.parametrize("backend", BACKENDS)
def test_fork_bomb_is_bounded_by_the_pids_limit(backend, tmp_path: Path) -> None:
    box = backend("forkbomb", SandboxSettings(sandbox_root=tmp_path, pids_limit=48, kill_grace=0.1))
    try:
        # a generous bound: under load the bomb (and bash's fork retries) can outlast a few seconds
        result = box.execute("b() { b | b & }; b; sleep 2", 30)
        peak = (
            int((box._cgroup.dirs["pids"] / "pids.peak").read_text())
            if (box._cgroup.dirs["pids"] / "pids.peak").exists()
            else 0
        )
        after = box.execute("echo still-usable", 10)
    finally:
        box.cleanup()
    assert "process limit reached (48 processes)" in result.output, result.output[-500:]
    assert peak <= 48
    assert after.output.strip().endswith("still-usable") or "process limit" in after.output
    _host_still_forks()
    assert _marker_procs(box) == []


@needs_cgroup
def test_process_limit_note_survives_a_timeout(tmp_path: Path) -> None:
    """A command that hits the pids limit and then runs into its timeout (the usual fate of
    a fork bomb on a slow machine: bash retries the failed forks for seconds) still says
    which limit it hit. The command cannot end by itself (`wait` on 600 s sleeps), so the
    timeout path is taken every time; 16 forks happen long before the timeout."""
    fp = _fp()
    box = LocalSandbox("pids-timeout", SandboxSettings(sandbox_root=tmp_path, pids_limit=16, kill_grace=0.1))
    try:
        result = box.execute(f"for i in {{1..40}}; do sleep {fp} & done; wait", 8)
    finally:
        box.cleanup()
    assert result.timed_out, result.output[-500:]
    assert "process limit reached (16 processes)" in result.output, result.output[-500:]
    assert wait_until_gone(f"sleep {fp}") == []


@needs_cgroup
@pytest.mark.parametrize("backend", BACKENDS)
def test_memory_bomb_is_killed_with_a_visible_error(backend, tmp_path: Path) -> None:
    box = backend("membomb", SandboxSettings(sandbox_root=tmp_path, memory_mb=96))
    try:
        result = box.execute('python3 -c \'x = bytearray(1 << 30); print("ALLOC" + "DONE")\'', 30)
        ok = box.execute("python3 -c 'x = bytearray(8 << 20); print(\"small ok\")'", 30)
    finally:
        box.cleanup()
    assert "ALLOCDONE" not in result.output
    assert result.exit_code != 0
    assert "memory limit reached (96 MB)" in result.output, result.output[-500:]
    assert ok.output.strip() == "small ok"
    _host_still_forks()


@pytest.mark.parametrize("backend", BACKENDS)
def test_memory_bomb_without_cgroup_hits_the_address_space_rlimit(backend, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(cgroups, "_probe", {})  # as on a host where cgroups are not writable
    box = backend("membomb-rl", SandboxSettings(sandbox_root=tmp_path, memory_mb=256))
    try:
        assert box._cgroup is None
        result = box.execute('python3 -c \'x = bytearray(1 << 30); print("ALLOC" + "DONE")\'', 30)
    finally:
        box.cleanup()
    assert "ALLOCDONE" not in result.output and "MemoryError" in result.output


def test_bwrap_tmp_is_size_capped(tmp_path: Path) -> None:
    box = BwrapSandbox("tmpfill", SandboxSettings(sandbox_root=tmp_path, tmp_size_mb=8))
    try:
        result = box.execute("head -c 64M /dev/zero > /tmp/fill; echo rc=$?; du -sm /tmp | cut -f1", 30)
    finally:
        box.cleanup()
    assert "No space left on device" in result.output and "rc=1" in result.output
    assert int(result.output.strip().splitlines()[-1]) <= 8


def test_bwrap_argv_sizes_tmp_before_the_tmpfs() -> None:
    argv = build_bwrap_argv(
        bwrap="b",
        host_workspace="w",
        host_state="s",
        network=False,
        env={},
        command=["x"],
        system_binds=[],
        tmp_size_mb=16,
    )
    i = argv.index("--tmpfs")
    assert argv[i - 2 : i + 2] == ["--size", str(16 << 20), "--tmpfs", "/tmp"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_cpu_time_limit_is_a_visible_error(backend, tmp_path: Path) -> None:
    box = backend("cpu", SandboxSettings(sandbox_root=tmp_path, cpu_time_s=1))
    try:
        result = box.execute("python3 -c 'while True: pass'", 90)
    finally:
        box.cleanup()
    assert not result.timed_out
    assert "CPU time limit reached (1 s per process)" in result.output, result.output[-500:]


@pytest.mark.parametrize("backend", BACKENDS)
def test_file_size_limit_is_a_visible_error(backend, tmp_path: Path) -> None:
    box = backend("fsize", SandboxSettings(sandbox_root=tmp_path, file_size_mb=1))
    try:
        result = box.execute("head -c 5M /dev/zero > big", 30)
        size = (box.host_workspace / "big").stat().st_size
    finally:
        box.cleanup()
    assert size <= 1 << 20
    assert "file size limit reached (1 MB per file)" in result.output, result.output[-500:]


def test_limits_are_settings_with_env_vars() -> None:
    from environments.sandboxes.settings import settings_from_env

    got = settings_from_env(
        {
            "TERMINAL_CPU_TIME": "30",
            "TERMINAL_FILE_SIZE_MB": "7",
            "TERMINAL_TMP_SIZE_MB": "9",
            "TERMINAL_PIDS_LIMIT": "11",
            "TERMINAL_CONTAINER_MEMORY": "300",
        }
    )
    assert got == {"cpu_time_s": 30, "file_size_mb": 7, "tmp_size_mb": 9, "pids_limit": 11, "memory_mb": 300}
    with pytest.raises(ValueError, match="TERMINAL_CPU_TIME"):
        settings_from_env({"TERMINAL_CPU_TIME": "-1"})


# ------------------------------------------------------------------ finding 6

ESCAPES = {
    "background": "sleep {fp} >/dev/null 2>&1 &",
    "bash-c-amp": "bash -c 'sleep {fp} >/dev/null 2>&1 &'",
    "nohup": "nohup sleep {fp} >/dev/null 2>&1 &",
    "setsid-no-marker": "env -u HERMES_SANDBOX_ID setsid sleep {fp} >/dev/null 2>&1 < /dev/null &",
    "double-fork-python": (
        "env -u HERMES_SANDBOX_ID python3 -c 'import os, subprocess\n"
        'if os.fork() == 0:\n os.setsid()\n subprocess.Popen(["sleep", "{fp}"], stdout=subprocess.DEVNULL, '
        "stderr=subprocess.DEVNULL, start_new_session=True)\n os._exit(0)\nos.wait()'"
    ),
}


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_orphans_after_cleanup(backend, tmp_path: Path) -> None:
    fps = {name: _fp() for name in ESCAPES}
    box = backend("orphans", SandboxSettings(sandbox_root=tmp_path))
    try:
        # one command per escape: bwrap's pid namespace ends with each command, local keeps them
        for name, template in ESCAPES.items():
            box.execute(template.format(fp=fps[name]), 30)
        if backend is LocalSandbox:
            # a background child may not have exec'd sleep yet when its command returns: poll
            deadline = time.monotonic() + 30
            alive = {name: live_pids_with(f"sleep {fp}") for name, fp in fps.items()}
            while not all(alive.values()) and time.monotonic() < deadline:
                time.sleep(0.05)
                alive = {name: live_pids_with(f"sleep {fp}") for name, fp in fps.items()}
            assert all(alive.values()), alive  # they did start and outlive their command
    finally:
        box.cleanup()
    survivors = {name: wait_until_gone(f"sleep {fp}") for name, fp in fps.items()}
    assert survivors == {name: [] for name in ESCAPES}


def test_docker_tmp_size_comes_from_the_settings() -> None:
    from environments.sandboxes.docker import build_run_argv

    argv = build_run_argv(
        docker="docker",
        name="n",
        image="i",
        task_id="t",
        host_workspace="/w",
        host_state="/s",
        network=False,
        cpu=1.0,
        memory_mb=64,
        pids_limit=32,
        env={},
        tmp_size_mb=48,
    )
    assert argv[argv.index("--tmpfs") + 1] == "/tmp:rw,nosuid,size=48m"
    assert argv[argv.index("--pids-limit") + 1] == "32" and argv[argv.index("--memory") + 1] == "64m"


@needs_cgroup
def test_groups_of_a_crashed_console_are_swept(tmp_path: Path) -> None:
    """A console killed with SIGKILL leaves its sandbox's cgroup and background process;
    the next console's sweep kills the process (found by group membership only: it has
    dropped the marker and left the session) and removes the group."""
    import subprocess as sp
    import sys

    fp = _fp()
    child = sp.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time\n"
                f"sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})\n"
                "from environments.sandboxes.local import LocalSandbox\n"
                "from environments.sandboxes.settings import SandboxSettings\n"
                f"box = LocalSandbox('crash', SandboxSettings(sandbox_root={str(tmp_path / 'a')!r}))\n"
                f"box.execute('env -u HERMES_SANDBOX_ID setsid sleep {fp} >/dev/null 2>&1 < /dev/null &', 10)\n"
                "print(box._cgroup.dirs['pids'], flush=True)\n"
                "time.sleep(120)\n"
            ),
        ],
        stdout=sp.PIPE,
        text=True,
    )
    try:
        group = Path(child.stdout.readline().strip())
        assert group.is_dir() and live_pids_with(f"sleep {fp}")
        child.kill()
        child.wait(10)
        from environments.sandboxes.stale import sweep_stale

        sweep_stale(tmp_path / "another-root")  # a different console, a different sandbox root
        assert wait_until_gone(f"sleep {fp}", within=10) == []
        assert not group.exists()
        sweep_stale(tmp_path / "a")  # its own root: the workspace (and its tmpfs) go too
        assert not [ln for ln in Path("/proc/self/mounts").read_text().splitlines() if str(tmp_path / "a") in ln]
        assert [p.name for p in (tmp_path / "a").iterdir() if not p.name.startswith(".")] == []
    finally:
        child.kill()
        child.wait(10)


def test_drilldown_details_show_the_limits(tmp_path: Path) -> None:
    from environments.sandboxes import cleanup_vm, configure, get_sandbox, reset_configuration
    from hermes_console.runtime import sandbox_ops

    reset_configuration()
    configure(backend="bwrap", sandbox_root=tmp_path, pids_limit=77, memory_mb=321, cpu_time_s=9, file_size_mb=5)
    task = f"limits-{uuid.uuid4().hex[:6]}"
    try:
        get_sandbox(task).execute("true", 10)
        limits = sandbox_ops.details(task).limits
    finally:
        cleanup_vm(task)
        reset_configuration()
    assert limits["pids"].startswith("77 ") and limits["memory"].startswith("321 MB")
    assert limits["cpu_time"].startswith("9 s") and limits["file_size"].startswith("5 MB")


@needs_cgroup
@pytest.mark.parametrize("backend", BACKENDS)
def test_cpu_share_is_capped_by_the_cgroup(backend, tmp_path: Path) -> None:
    """A busy loop under cpu=0.1 is throttled by the kernel (cpu.stat nr_throttled, the
    kernel's own count), so one sandbox cannot take every core of the host."""
    box = backend("cpushare", SandboxSettings(sandbox_root=tmp_path, cpu=0.1))
    try:
        if not box._cgroup.has_cpu:
            pytest.skip("no writable cpu cgroup")
        box.execute("timeout 1 sh -c 'while :; do :; done'", 30)
        stat = dict(line.split() for line in (box._cgroup.dirs["cpu"] / "cpu.stat").read_text().splitlines())
        quota = int((box._cgroup.dirs["cpu"] / "cpu.cfs_quota_us").read_text())
    finally:
        box.cleanup()
    assert quota == 10_000
    assert int(stat["nr_throttled"]) > 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_whole_workspace_is_bounded_not_just_each_file(backend, tmp_path: Path) -> None:
    """Many files, each under the per-file limit, cannot fill the host's disk: the workspace
    is a sized tmpfs (root mounts it; elsewhere the drill-down says it is unbounded)."""
    if os.geteuid() != 0:
        pytest.skip("a sized workspace tmpfs needs root (mount); not root here")
    box = backend("wsquota", SandboxSettings(sandbox_root=tmp_path, workspace_size_mb=4, file_size_mb=3))
    workspace = box.host_workspace
    try:
        assert "4 MB in all (tmpfs)" in box.limits_summary()["workspace"]
        (line,) = [m for m in Path("/proc/self/mounts").read_text().splitlines() if f" {workspace} " in m]
        options = line.split()[3].split(",")
        assert "nosuid" in options and "nodev" in options and "size=4096k" in options and line.split()[2] == "tmpfs"
        out = box.execute("for i in 1 2 3 4; do head -c 2000000 /dev/zero > f$i || echo FULL-$i; done; echo ok", 20)
        assert "FULL-" in out.output and "No space left on device" in out.output
        used = sum(p.stat().st_size for p in workspace.iterdir())
        assert used <= 4 * 1024 * 1024  # never more than the workspace size, whatever the file count
    finally:
        box.cleanup()
    mounts = Path("/proc/self/mounts").read_text()
    assert str(workspace) not in mounts and not workspace.exists()  # no mount, no dir left
