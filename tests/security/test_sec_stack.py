"""Security through the whole stack (items 4-6 of #7; items 1-3 at the sandbox level are in
test_sandbox_security.py / test_file_tool_paths.py, extended for bwrap in test_sec_file_tools_bwrap.py).

4. Secrets in the console's environment never reach a sandbox: a rollout runs `env`.
5. Secrets in tool arguments / outputs are redacted in the console state, the event log
   (--record) and the logs. What is NOT redacted, by design (docs/reliability.md):
   the model's own messages in the jsonl training data (its tool-call arguments).
   The terminal tool redacts command output before the model sees it, so tool results
   in the jsonl are redacted too.
6. The console opens no listening socket with an external simulator; the demo's
   embedded simulator listens on loopback only.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes_console.sim.server import SimServer
from tests.faults.faults_helpers import FaultRun, fault_spec, restore_env, snapshot_env, write_tasks
from tests.helpers.cli import CLI
from tests.helpers.live import HostStarter, fixed_latency_sim, running_sim, started_hosts

pytestmark = pytest.mark.timeout(120)
REPO = Path(__file__).resolve().parents[2]

SECRETS = {
    "OPENAI_API_KEY": "sk-consoleenv0123456789abcdef",
    "HF_TOKEN": "hf_consoleenvabcdefghijklmnop",
    "WANDB_API_KEY": "wandb-consoleenv-0123456789",
    "MY_SERVICE_PASSWORD": "hunter2-console-env",
}
ARG_SECRET = "sk-argsecret0123456789abcdefXYZ"  # a key the model types into a command


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    yield from running_sim(fixed_latency_sim(seed=13, latency_ms=5.0))


@pytest.fixture
def run() -> Iterator[HostStarter[FaultRun]]:
    from environments.sandboxes import reset_configuration

    saved = snapshot_env()
    yield from started_hosts(FaultRun)
    restore_env(saved)
    reset_configuration()


def _tool_contents(jsonl: str) -> list[str]:
    out = []
    for line in Path(jsonl).read_text().splitlines():
        for conv in json.loads(line).get("messages") or []:
            out.extend(m["content"] for m in conv if m.get("role") == "tool")
    return out


@pytest.mark.parametrize("backend", ["local", "bwrap"])
def test_console_secrets_never_reach_a_sandbox(sim, tmp_path, run, monkeypatch, backend):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    tasks = write_tasks(tmp_path / "tasks.jsonl", ["Run this command: env; cat /proc/self/environ | tr '\\0' '\\n'"])
    record = tmp_path / "events.jsonl"
    r = run(
        fault_spec(
            sim,
            tmp_path,
            "--env.terminal_backend",
            backend,
            total_steps=1,
            group_size=1,
            tasks=tasks,
            record_path=str(record),
        )
    )
    r.until_done_items(1, 40)
    r.stop_clean()
    outputs = [c for c in _tool_contents(r.state.run.jsonl_path) if "PATH=" in c]
    assert outputs, "the env listing never came back"
    assert "HERMES_SANDBOX_ID=" in outputs[0]  # we are looking at the sandbox's environment
    everything = Path(r.state.run.jsonl_path).read_text() + record.read_text()
    for name, value in SECRETS.items():
        assert name not in outputs[0], f"{name} reached the sandbox"
        assert value not in everything, f"the value of {name} leaked"


def _strings(obj: Any) -> str:
    return json.dumps(obj, default=str)


def test_secrets_redacted_in_state_record_and_logs_but_training_data_documented(sim, tmp_path, run, caplog):
    caplog.set_level(logging.INFO)
    cmd = f"export OPENAI_API_KEY={ARG_SECRET}; echo token is $OPENAI_API_KEY; echo {ARG_SECRET}"
    tasks = write_tasks(tmp_path / "tasks.jsonl", [f"Run this command: {cmd}"])
    record = tmp_path / "events.jsonl.gz"
    r = run(fault_spec(sim, tmp_path, total_steps=1, group_size=1, tasks=tasks, record_path=str(record)))
    r.until_done_items(1, 40)
    r.stop_clean()
    # The command really ran with the secret in its arguments and output.
    rows = [x for x in r.state.tool_rows if "export" in x.args_head]
    assert rows and "«redacted»" in rows[0].args_head and "«redacted»" in rows[0].result_head
    # 1. the console state the panels render
    snap = _strings(r.state.snapshot()) + _strings([rec.message for rec in r.state.logs])
    assert ARG_SECRET not in snap
    # 2. the event log (--record)
    with gzip.open(record, "rt") as fp:
        recorded = fp.read()
    assert "export OPENAI_API_KEY=" in recorded or "«redacted»" in recorded
    assert ARG_SECRET not in recorded
    # 3. python logging (the agent loop logs each command at INFO) and LogRecord events
    logged = "\n".join(rec.getMessage() for rec in caplog.records)
    assert "$ export OPENAI_API_KEY=" in logged, "the command log line is missing: nothing was checked"
    assert ARG_SECRET not in logged
    assert ARG_SECRET not in _strings([e.to_dict() for e in r.of("log_record")])
    # 4. training data: the model's own tool-call arguments are kept as it wrote them;
    #    the terminal output it was shown was already redacted by the tool.
    raw = Path(r.state.run.jsonl_path).read_text()
    row = json.loads(raw.splitlines()[0])
    calls = [c for conv in row["messages"] for m in conv for c in (m.get("tool_calls") or [])]
    assert any(ARG_SECRET in c["function"]["arguments"] for c in calls)
    results = [c for c in _tool_contents(r.state.run.jsonl_path) if "token is" in c]
    assert results and ARG_SECRET not in results[0] and "«redacted»" in results[0]


# ---------------------------------------------------------------------- listening sockets


def _listening_inodes() -> dict[int, str]:
    """inode -> local address of every listening TCP socket on this machine (v4 + v6)."""
    out: dict[int, str] = {}
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(path).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) > 9 and parts[3] == "0A":  # TCP_LISTEN
                out[int(parts[9])] = parts[1]
    return out


def _socket_inodes(pid: int | str) -> set[int]:
    found = set()
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(f"{fd_dir}/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            found.add(int(target[8:-1]))
    return found


def _listening_of(pid: int | str) -> list[str]:
    listening = _listening_inodes()
    return [listening[i] for i in _socket_inodes(pid) if i in listening]


def _is_loopback(hex_addr: str) -> bool:
    ip = hex_addr.split(":")[0]
    if len(ip) == 8:
        return ip.endswith("7F")  # little-endian 127.x.x.x
    return ip == "0" * 24 + "01000000"  # ::1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_console_opens_no_listening_socket_with_an_external_sim(tmp_path, run):
    port = _free_port()
    proc = subprocess.Popen([*CLI, "sim", "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 30
        while time.monotonic() < end:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.1)
        # Other tests' in-process simulators may be listening already; the run must add none.
        baseline = set(_listening_of("self"))

        class External:  # fault_spec needs only base_url
            base_url = f"http://127.0.0.1:{port}"

        r = run(fault_spec(External(), tmp_path, total_steps=2, group_size=2))
        seen: list[str] = []
        while r.state.accounting.completed < 2:
            r.until(lambda s: True, 1)
            seen += [a for a in _listening_of("self") if a not in baseline]
            time.sleep(0.05)
            if r.host.done.done():
                break
        assert r.state.accounting.completed == 2
        assert seen == [], f"the console listened on {seen}"
        assert _listening_of(proc.pid), "control: the external simulator's listening socket is visible"
        proc.terminate()  # our own child: gone before the no-children check
        proc.wait(10)
        r.stop_clean()
    finally:
        proc.terminate()
        proc.wait(10)


def test_demo_embedded_sim_listens_on_loopback_only(tmp_path):
    proc = subprocess.Popen(
        [*CLI, "demo", "--headless", "--total-steps", "2", "--latency-ms", "5", "--runs-dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=str(tmp_path),
    )
    try:
        addrs: list[str] = []
        end = time.monotonic() + 60
        while time.monotonic() < end and proc.poll() is None and not addrs:
            try:
                addrs = _listening_of(proc.pid)
            except OSError:
                break
            time.sleep(0.1)
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, out[-2000:]
    assert addrs, "the demo's simulator socket was never seen"
    assert all(_is_loopback(a) for a in addrs), addrs
    assert len(addrs) == 1, addrs  # the simulator, nothing else
