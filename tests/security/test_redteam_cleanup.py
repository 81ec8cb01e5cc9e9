"""Cleanup of a local sandbox against processes that hide from it (root, cgroup v1).

Cleanup kills the sandbox's cgroups, then looks for leftovers carrying its marker among
the processes outside every sandbox's group (not among all of /proc: that cost ~20 ms per
cleanup with a thousand sandbox processes on the host). These attacks check both halves:
a process that hides in a group nested below the sandbox's own (with an empty environment,
orphaned, so neither the marker nor the process tree lead to it) and one that moves itself
to the host's root group (keeping its environment).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from environments.sandboxes import cgroups
from environments.sandboxes.local import LocalSandbox
from environments.sandboxes.settings import SandboxSettings
from tests.helpers.proc_oracle import live_pids_with, wait_until_gone

U = f"{os.getpid():07d}"
pytestmark = pytest.mark.timeout(120)


def _needs_groups() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: only root can create and leave cgroups")
    if "pids" not in cgroups._available():
        pytest.skip("needs a writable cgroup v1 pids hierarchy")


@pytest.fixture
def box(tmp_path: Path) -> Iterator[LocalSandbox]:
    _needs_groups()
    sb = LocalSandbox("hide", SandboxSettings(sandbox_root=tmp_path, kill_grace=0.3))
    yield sb
    sb.cleanup()


def _launch(box: LocalSandbox, fingerprint: str, move_to: str, clear_env: bool) -> None:
    """Start an orphaned ``sleep`` (double fork, own session) that first moves itself into
    ``move_to`` (a shell expression naming a dir below each controller's mount, e.g.
    ``$g/inner`` for the sandbox's own group ``$g``)."""
    env = "env -i " if clear_env else ""
    script = (
        "for c in pids memory cpu; do "
        'g=$(awk -F: -v c="$c" \'$2 ~ "(^|,)"c"(,|$)" {print $3}\' /proc/self/cgroup); '
        f'd="/sys/fs/cgroup/$c{move_to}"; mkdir -p "$d" 2>/dev/null; '
        'echo "$1" > "$d/cgroup.procs"; done'
    )
    command = (
        f"( setsid {env}/bin/sh -c 'sh -c \"$0\" x $$ && exec sleep {fingerprint}' {_q(script)} & ) ; echo launched"
    )
    result = box.execute(command, 30)
    assert result.output.strip() == "launched", result.output
    pids = started_sleep(fingerprint)
    assert len(pids) == 1, f"the hidden process did not start: {result.output}"


def _q(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def started_sleep(fingerprint: str, within: float = 30.0) -> list[int]:
    """The hidden process once it is ``sleep`` (it moves itself first, then execs)."""
    import time

    end = time.monotonic() + within
    while time.monotonic() < end:
        pids = []
        for pid in live_pids_with(fingerprint):
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() == "sleep":
                    pids.append(pid)
            except OSError:
                continue
        if pids:
            return pids
        time.sleep(0.02)
    return []


def _group_of(pid: int, controller: str) -> str:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _n, names, path = line.split(":", 2)
        if controller in names.split(","):
            return path
    return ""


def test_a_process_in_a_group_nested_below_the_sandboxs_own_dies_with_the_sandbox(box: LocalSandbox) -> None:
    fingerprint = f"601.{U}1"
    _launch(box, fingerprint, "$g/inner", clear_env=True)
    (pid,) = started_sleep(fingerprint)
    assert _group_of(pid, "pids").endswith("/inner")  # the attack really hid it
    assert b"HERMES" not in Path(f"/proc/{pid}/environ").read_bytes()  # no marker to find it by
    group_dirs = [Path(p) for p in box._cgroup.paths()] if box._cgroup else []
    box.cleanup()
    assert wait_until_gone(fingerprint) == []
    assert not any(d.exists() for d in group_dirs)  # nested groups removed with their parent


def test_a_process_that_moved_to_the_root_group_dies_with_the_sandbox(box: LocalSandbox) -> None:
    fingerprint = f"601.{U}2"
    _launch(box, fingerprint, "", clear_env=False)
    (pid,) = started_sleep(fingerprint)
    assert _group_of(pid, "pids") == "/"  # out of every sandbox group
    box.cleanup()
    assert wait_until_gone(fingerprint) == []


def test_processes_outside_sandbox_groups_are_listed_and_those_inside_are_not(box: LocalSandbox) -> None:
    outside = cgroups.pids_outside_sandbox_groups()
    assert outside is not None
    assert os.getpid() in outside
    machine = box._machine.pid if box._machine is not None else None
    assert machine is not None and machine not in outside
    assert machine in (box._cgroup.pids() if box._cgroup else set())


def test_the_safety_net_reads_the_environment_only_of_processes_younger_than_the_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The marker is read (one /proc read each, under a GIL every tool thread wants) only
    from processes that started after the sandbox was made: no older one can be its own.
    An older host process that happens to carry the marker is left alone; the escaped one
    (root group, marker kept) still dies."""
    import subprocess
    import time

    from environments.sandboxes import procfs

    _needs_groups()
    old_fp = f"602.{U}1"
    sb = LocalSandbox("young", SandboxSettings(sandbox_root=tmp_path, kill_grace=0.3))
    marker = sb._marker.decode()
    name, _, value = marker.partition("=")
    older = subprocess.Popen(["sleep", old_fp], env={**os.environ, name: value}, start_new_session=True)
    try:
        time.sleep(0.05)
        born = procfs.read_stat(older.pid)
        assert born is not None
        sb._born_ticks = born.start_ticks + 1  # made after the older process (ticks are 10 ms)
        fingerprint = f"602.{U}2"
        _launch(sb, fingerprint, "", clear_env=False)
        (escaped,) = started_sleep(fingerprint)
        read: list[int] = []
        real = procfs.has_env_marker
        monkeypatch.setattr(procfs, "has_env_marker", lambda pid, m: read.append(pid) or real(pid, m))
        sb.cleanup()
        assert wait_until_gone(fingerprint) == []
        assert older.poll() is None  # older than the sandbox: not its own, marker or not
        assert escaped in read and older.pid not in read and os.getpid() not in read
        young = [p for p in read if (st := procfs.read_stat(p)) is None or st.start_ticks >= sb._born_ticks]
        assert young == read
    finally:
        older.kill()
        older.wait()
        sb.cleanup()


def test_the_kill_says_whether_the_group_is_empty_and_the_net_skips_an_empty_groups_listing(
    box: LocalSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``kill_all`` is True only when its last listing was empty; cleanup's safety net then
    does not list the group's members again on its first look (one cgroup tree read fewer
    per rollout end), and still finds a process that left for the root group (above)."""
    from environments.sandboxes import base

    assert box._cgroup is not None
    fingerprint = f"601.{U}3"
    box.execute(f"( setsid sleep {fingerprint} & ) ; echo ok", 30)
    assert started_sleep(fingerprint)
    assert box._cgroup.kill_all(0.0) is False  # killed, but listed at the deadline: not known empty
    assert box._cgroup.kill_all() is True
    assert wait_until_gone(fingerprint) == []

    looks: list[bool] = []
    group_reads: list[int] = []  # the look during which the group's members were listed
    inside: list[int] = []
    real_leftovers, real_pids = base.BashSessionSandbox._leftovers, cgroups.SandboxCgroup.pids

    def leftovers(self: LocalSandbox, roots: set[int], group_empty: bool = False) -> object:
        looks.append(group_empty)
        inside.append(len(looks))
        try:
            return real_leftovers(self, roots, group_empty=group_empty)
        finally:
            inside.pop()

    def pids(self: cgroups.SandboxCgroup) -> set[int]:
        group_reads.extend(inside)
        return real_pids(self)

    monkeypatch.setattr(base.BashSessionSandbox, "_leftovers", leftovers)
    monkeypatch.setattr(cgroups.SandboxCgroup, "pids", pids)
    box.cleanup()
    assert looks and looks[0] is True and all(not x for x in looks[1:])
    assert 1 not in group_reads  # the first look read no member list


def test_a_reported_pid_outside_the_sandbox_never_becomes_its_shell(box: LocalSandbox) -> None:
    """The shells report their own pid; the fast path that takes a reported pid as is (no pid
    namespace) still requires it to be one of the sandbox's processes: a shell that reports the
    console's pid, init's, or a pid that does not exist maps to nothing (a later kill of "the
    shell" must never reach the console)."""
    assert box._agent is not None and box._agent.shell_pid is not None
    members = box._cgroup.pids() if box._cgroup else set()
    assert box._agent.shell_pid in members
    for hostile in (os.getpid(), os.getppid(), 1, 2**22 + 12345):
        assert box._map_pid(hostile) is None
        assert box._map_pid(hostile, members) is None
    assert box._map_pid(box._agent.shell_pid) == box._agent.shell_pid
