"""docker backend hardening: limits/labels in the run argv, the orphan sweep (argv,
parsing, who counts as gone, the sweep against a stand-in CLI), and with a real
engine: a labelled, limited container that is reaped and swept."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from environments.sandboxes import docker as dk
from environments.sandboxes.settings import SandboxSettings
from tests.docker_support import needs_engine, sandbox_image

pytestmark = pytest.mark.timeout(60)
HOST = socket.gethostname()


def _after(argv, flag):
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_run_argv_limits_isolation_and_labels():
    argv = dk.build_run_argv(
        docker="docker",
        name="hermes-t-1",
        image="img",
        task_id="t-1",
        host_workspace="/w",
        host_state="/s",
        network=False,
        cpu=2,
        memory_mb=512,
        pids_limit=64,
        env={},
        owner=f"{HOST}:42:7",
    )
    assert _after(argv, "--cpus") == ["2"] and _after(argv, "--memory") == ["512m"]
    assert _after(argv, "--memory-swap") == ["512m"]  # no swap beyond the cap
    assert _after(argv, "--pids-limit") == ["64"] and _after(argv, "--network") == ["none"]
    assert _after(argv, "--security-opt") == ["no-new-privileges"] and _after(argv, "--cap-drop") == ["ALL"]
    assert set(_after(argv, "--cap-add")) <= {"CHOWN", "DAC_OVERRIDE", "FOWNER"}
    assert _after(argv, "-v")[0] == "/w:/workspace"  # per-task workspace
    assert _after(argv, "--label") == [
        "hermes-console.task=t-1",
        "hermes-console.managed=1",
        f"hermes-console.owner={HOST}:42:7",
    ]
    assert argv.index("img") > max(i for i, a in enumerate(argv) if a == "--label")  # options before the image


def test_owner_label_names_this_process():
    host, pid, ticks = dk.owner_label().rsplit(":", 2)
    assert (host, int(pid)) == (HOST, os.getpid()) and int(ticks) > 0


def test_sweep_commands_and_parsing():
    assert dk.build_sweep_list_argv(docker="docker") == [
        "docker",
        "ps",
        "-a",
        "--no-trunc",
        "--filter",
        "label=hermes-console.managed=1",
        "--format",
        '{{.ID}}\t{{.Label "hermes-console.owner"}}',
    ]
    assert dk.build_remove_argv(docker="docker", container_ids=["a", "b"]) == ["docker", "rm", "-f", "a", "b"]
    assert dk.parse_sweep_listing("c1\th:1:2\nc2\t\n\n") == [("c1", "h:1:2"), ("c2", "")]


def test_only_dead_owners_on_this_host_are_orphans():
    me = dk.owner_label()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    reused = f"{HOST}:{os.getpid()}:1"  # our pid, another start time: the pid was reused
    rows = [
        ("mine", me),
        ("dead", f"{HOST}:{dead.pid}:5"),
        ("reused", reused),
        ("remote", "other-host:1:1"),
        ("unlabelled", ""),
        ("garbage", "x:y:z"),
    ]
    assert dk.orphaned(rows, host=HOST) == ["dead", "reused"]


FAKE_CLI = textwrap.dedent("""\
    #!{python}
    import json, sys
    log = {log!r}
    with open(log, "a") as fh:
        fh.write(json.dumps(sys.argv[1:]) + "\\n")
    if sys.argv[1] == "ps":
        print("c-orphan\\t{host}:999999:1")
        print("c-live\\t{live}")
        print("c-remote\\tsomewhere-else:1:1")
    """)


def test_sweep_removes_only_orphans_through_the_cli(tmp_path: Path):
    log = tmp_path / "calls.jsonl"
    cli = tmp_path / "docker"
    cli.write_text(FAKE_CLI.format(python=sys.executable, log=str(log), host=HOST, live=dk.owner_label()))
    cli.chmod(0o755)
    assert dk.sweep_orphans(str(cli)) == ["c-orphan"]
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert calls[0][:2] == ["ps", "-a"] and calls[1] == ["rm", "-f", "c-orphan"]
    # the startup sweep runs once per process and engine
    dk._swept_engines.discard(str(cli))
    dk.sweep_once(str(cli))
    dk.sweep_once(str(cli))
    assert len(log.read_text().splitlines()) == 4  # ps + rm once more, not twice


def test_sweep_never_raises(tmp_path: Path):
    assert dk.sweep_orphans(str(tmp_path / "no-such-docker")) == []


@needs_engine
def test_real_container_is_limited_labelled_and_swept(tmp_path: Path):
    image = sandbox_image()
    settings = SandboxSettings(sandbox_root=tmp_path, docker_image=image, memory_mb=256, pids_limit=32)
    box = dk.DockerSandbox("scaleout", settings)
    try:
        info = json.loads(
            subprocess.run(
                ["docker", "inspect", box.container], capture_output=True, text=True, timeout=30, check=True
            ).stdout
        )[0]
        assert info["HostConfig"]["Memory"] == 256 * 1024 * 1024 and info["HostConfig"]["PidsLimit"] == 32
        assert info["HostConfig"]["NetworkMode"] == "none" and "no-new-privileges" in info["HostConfig"]["SecurityOpt"]
        labels = info["Config"]["Labels"]
        assert labels["hermes-console.managed"] == "1" and labels["hermes-console.owner"] == dk.owner_label()
        assert box.execute("echo ok", 30).output == "ok\n"
        # a container whose owner is gone (as after a crash) is removed by the sweep; ours is not
        orphan = subprocess.run(
            [
                "docker",
                "run",
                "-d",
                "--label",
                "hermes-console.managed=1",
                "--label",
                f"hermes-console.owner={HOST}:999999:1",
                image,
                "sleep",
                "60",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout.strip()
        removed = dk.sweep_orphans("docker")
        assert orphan in removed and not any(box.container in r for r in removed)
    finally:
        box.cleanup()
    assert subprocess.run(["docker", "inspect", box.container], capture_output=True, timeout=30).returncode != 0
