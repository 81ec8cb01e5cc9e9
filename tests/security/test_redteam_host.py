"""Red team (#18): a hostile sandbox must not reach the host through the layer around bwrap.

Each test plays the attack from inside a real sandbox (bwrap, and local where the
attack means something there) and checks the host with independent oracles: file
bytes/hashes, /proc, directory listings. Attacks that hung or OOM'd the console before
the fix run in a child Python under a memory ceiling and a wall-clock timeout, so a
regression fails the test instead of taking the machine down.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from environments.sandboxes.bwrap import BwrapSandbox
from environments.sandboxes.local import LocalSandbox
from environments.sandboxes.settings import SandboxSettings
from environments.sandboxes.stale import sweep_stale
from tests.docker_support import DockerBox

pytestmark = pytest.mark.timeout(120)
REPO = str(Path(__file__).resolve().parents[2])
BACKENDS = [LocalSandbox, BwrapSandbox]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _state_view(box: Any) -> str:
    """Where the sandbox sees its own state dir (bwrap: /run/hermes-state; local: the host path)."""
    return box._state_view


# ------------------------------------------------------------------ finding 1


@pytest.mark.parametrize("backend", BACKENDS + [DockerBox])
def test_planted_command_file_symlinks_never_written_through(backend, tmp_path: Path) -> None:
    victim = tmp_path / "victim.conf"
    victim.write_text("original host content\n")
    before = _sha(victim)
    box = backend("plant", SandboxSettings(sandbox_root=tmp_path / "root"))
    try:
        state = _state_view(box)
        plant = box.execute(
            f"for i in $(seq 0 80); do ln -sf {victim} {state}/cmd-$i.sh; ln -sf {victim} {state}/pid-$i; done; echo planted",
            60,  # 162 forks of `ln` (and the first command starts the sandbox): seconds on a loaded machine
        )
        assert "planted" in plant.output, plant.output[-500:]
        for i in range(20):  # the host's next commands would have landed in the victim
            result = box.execute(f"echo PAYLOAD-{i}", 30)
            assert result.output == f"PAYLOAD-{i}\n", result.output
        stdin = box.execute("cat", 30, stdin_data="via-stdin\n")
        assert stdin.output == "via-stdin\n"
    finally:
        box.cleanup()
    assert _sha(victim) == before
    assert victim.read_text() == "original host content\n"


def test_command_text_is_byte_exact_and_not_in_the_state_dir(tmp_path: Path) -> None:
    box = BwrapSandbox("exact", SandboxSettings(sandbox_root=tmp_path / "root"))
    try:
        tricky = "printf '%s\\n' 'héllo ✓' \"$((6*7))\"\nx=$'a\\n\\n'; printf '[%s]' \"$x\"; echo\n\n"
        result = box.execute(tricky, 10)
        listing = box.execute("ls -A /run/hermes-state", 10)
        unset = box.execute('echo "[${__hermes_c-unset}][${__hermes_n-unset}]"', 10)
    finally:
        box.cleanup()
    assert result.output == "héllo ✓\n42\n[a\n\n]\n"
    assert "cmd-" not in listing.output and "owner" not in listing.output
    assert unset.output == "[unset][unset]\n"  # the wrapper's own variables do not leak into the command


# ------------------------------------------------------------------ finding 2


def test_forged_owner_record_kills_nothing_and_deletes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "root"
    decoy_dir = root / "decoy-dir"  # directly under the root: the old sweep deleted such dirs
    box = BwrapSandbox("forger", SandboxSettings(sandbox_root=root))
    decoy_dir.mkdir()
    (decoy_dir / "keep").write_text("keep me")
    mark = f"DECOY_MARK_{uuid.uuid4().hex[:8]}=1"
    name, value = mark.split("=")
    decoy = subprocess.Popen(["sleep", "300"], env={**os.environ, name: value})
    try:
        forged = {"pid": 999999, "start_ticks": 1, "marker": mark, "sandbox_id": "x", "dirs": [str(decoy_dir)]}
        blob = json.dumps(forged)
        result = box.execute(
            f"cat > /run/hermes-state/owner.json <<'EOF'\n{blob}\nEOF\n"
            "mkdir -p /run/hermes-state/.owners && cp /run/hermes-state/owner.json /run/hermes-state/.owners/x.json; "
            "ls /run/hermes-state",
            10,
        )
        assert "owner.json" in result.output
        # a second console on the same root: its reaper sweeps first thing
        child = subprocess.run(
            [
                sys.executable,
                "-c",
                f"import sys; sys.path.insert(0, {REPO!r}); "
                f"from environments.sandboxes.stale import sweep_stale; print(sweep_stale({str(root)!r}))",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert child.returncode == 0, child.stderr
        sweep_stale(root)
        time.sleep(0.2)
        assert decoy.poll() is None, "the decoy host process was killed by a sandbox-chosen marker"
        assert (decoy_dir / "keep").read_text() == "keep me"
        assert box.host_workspace.is_dir()  # our own live sandbox untouched too
        assert box.execute("echo alive", 10).output == "alive\n"
    finally:
        decoy.kill()
        decoy.wait(5)
        box.cleanup()


def test_owner_records_are_outside_every_sandbox_mount(tmp_path: Path) -> None:
    root = tmp_path / "root"
    box = BwrapSandbox("owners", SandboxSettings(sandbox_root=root))
    try:
        records = list((root / ".owners").iterdir())
        assert [p.name for p in records] == [f"{box.sandbox_id}.json"]
        assert (root / ".owners").stat().st_mode & 0o077 == 0
        listing = box.execute("ls -AR /run/hermes-state /workspace", 10)
        direct = box.execute(f"cat {records[0]}", 10)
        assert box.sandbox_id not in listing.output
        assert direct.exit_code != 0 and "No such file" in direct.output
    finally:
        box.cleanup()
    assert not (root / ".owners").exists() or not list((root / ".owners").iterdir())


# ------------------------------------------------------------------ finding 3

CHILD = textwrap.dedent(
    """
    import json, resource, sys, time
    sys.path.insert(0, {repo!r})
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))  # a regression fails, not the machine
    from environments.sandboxes.settings import SandboxSettings
    from environments.sandboxes.{module} import {cls}
    box = {cls}("victim", SandboxSettings(sandbox_root={root!r}))
    try:
        box.run_diagnostic({plant!r}.replace("@STATE@", box._state_view), 10)
        started = time.monotonic()
        cwd = box.cwd()
        out = {{"cwd": cwd, "workspace": box.workspace, "s": time.monotonic() - started}}
        out["next"] = box.execute("pwd", 10).output
    finally:
        box.cleanup()
    print(json.dumps(out))
    """
)


def _child(code: str, timeout: float = 60) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "plant",
    [
        "ln -sf /dev/zero @STATE@/cwd",
        "rm -f @STATE@/cwd && mkfifo @STATE@/cwd",
        "head -c 20000000 /dev/zero > @STATE@/cwd",
        "ln -sf /etc/hostname @STATE@/cwd",
    ],
    ids=["dev-zero", "fifo", "huge", "symlink-host-file"],
)
def test_hostile_cwd_file_is_refused_quickly(backend, plant: str, tmp_path: Path) -> None:
    module = "bwrap" if backend is BwrapSandbox else "local"
    code = CHILD.format(repo=REPO, module=module, cls=backend.__name__, root=str(tmp_path / "root"), plant=plant)
    out = _child(code)
    assert out["cwd"] == out["workspace"]  # hostile content ignored: the last good cwd
    assert out["next"].strip() in (out["workspace"], os.path.realpath(out["workspace"]))


def _tool_child(root: Path, setup: str, call: Any, timeout: float = 60) -> dict[str, Any]:
    code = textwrap.dedent(
        f"""
        import json, resource, sys, time, uuid
        sys.path.insert(0, {REPO!r})
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
        from environments.sandboxes import configure, get_sandbox, cleanup_all_environments
        configure(backend="bwrap", sandbox_root={str(root)!r}, file_size_mb=64 * 1024)
        from environments.tools import handle_function_call
        tid = "t-" + uuid.uuid4().hex[:6]
        box = get_sandbox(tid)
        try:
            r = box.execute({setup!r}, 20)
            assert r.exit_code == 0, r.output
            started = time.monotonic()
            raw = handle_function_call({call[0]!r}, {call[1]!r}, task_id=tid)
            out = {{"result": json.loads(raw), "s": time.monotonic() - started}}
        finally:
            cleanup_all_environments()
        print(json.dumps(out))
        """
    )
    return _child(code, timeout)


def test_read_file_of_30g_sparse_file_is_a_quick_tool_error(tmp_path: Path) -> None:
    out = _tool_child(tmp_path, "truncate -s 30G big.txt", ("read_file", {"path": "big.txt"}))
    assert "error" in out["result"] and "bytes" in out["result"]["error"], out
    assert "terminal" in out["result"]["error"]


def test_patch_of_30g_sparse_file_is_a_quick_tool_error(tmp_path: Path) -> None:
    out = _tool_child(
        tmp_path, "truncate -s 30G big.txt", ("patch", {"path": "big.txt", "old_string": "a", "new_string": "b"})
    )
    assert "error" in out["result"] and "bytes" in out["result"]["error"], out


def test_write_file_to_a_fifo_does_not_hang(tmp_path: Path) -> None:
    out = _tool_child(tmp_path, "mkfifo pipe", ("write_file", {"path": "pipe", "content": "x"}), timeout=60)
    assert "error" in out["result"] and "regular file" in out["result"]["error"], out


def test_read_file_of_a_fifo_and_a_devnode_link_refused(tmp_path: Path) -> None:
    out = _tool_child(tmp_path, "mkfifo pipe", ("read_file", {"path": "pipe"}))
    assert "error" in out["result"], out
    out = _tool_child(tmp_path, "ln -s /dev/zero z", ("read_file", {"path": "z"}))
    assert "error" in out["result"], out


def test_search_skips_fifos_and_huge_files(tmp_path: Path) -> None:
    out = _tool_child(
        tmp_path,
        "mkfifo pipe && truncate -s 30G big.txt && echo needle > small.txt",
        ("search_files", {"pattern": "needle"}),
    )
    assert out["result"].get("total_count") == 1, out


def test_docker_backend_shares_the_fix(tmp_path: Path) -> None:
    """docker (through the fake engine of tests/environments: `docker exec` runs the same
    wrapper in a bwrap with the state dir mounted): planted cmd-N.sh / pid-N links to a host
    file are never written or read through, even when a timeout makes the host read pid-N."""
    from environments.sandboxes.docker import DockerSandbox
    from tests.environments.test_sandbox_docker import FAKE_DOCKER

    engine = tmp_path / "fake-engine"
    engine.mkdir()
    cli = tmp_path / "docker"
    cli.write_text(FAKE_DOCKER.format(python=sys.executable, repo=REPO, state=str(engine)))
    cli.chmod(0o755)
    victim = tmp_path / "victim.conf"
    victim.write_text("original\n")
    box = DockerSandbox("dplant", SandboxSettings(sandbox_root=tmp_path / "root", kill_grace=0.2), docker=str(cli))
    try:
        for i in range(0, 12):
            (box._state_host / f"cmd-{i}.sh").symlink_to(victim)
            (box._state_host / f"pid-{i}").symlink_to(victim)
        assert box.execute("echo one", 10).output == "one\n"
        slow = box.execute("sleep 30", 0.5)
        assert slow.timed_out
        assert box.execute("cat", 10, stdin_data="two\n").output == "two\n"
    finally:
        box.cleanup()
    assert victim.read_text() == "original\n"
