"""Issue 14, last fault: SIGTERM to one of two serve hosts (a real run-api, a real simulator,
hosts as processes). The signalled host drains, leaves run-api (``/disconnect-env``: the
other host's weight goes back to 1.0, as run-api computes it) and exits by the headless
contract; the other host carries the run to its end. The trainer's received groups
(hashed) against both hosts' groups.jsonl and event logs: nothing twice, nothing silently
lost, every item of both hosts accounted."""

from __future__ import annotations

import asyncio
import hashlib
import json
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from hermes_console_dev.fake_trainer import PullPause, TrainerRun, run_trainer
from tests.scaleout.scaleout_helpers import VENV_BIN, child_env

pytestmark = pytest.mark.timeout(300)
# Enough steps that the trainer cannot be near the end when both hosts have delivered, even
# when one host starts seconds after the other on a loaded box (at 10, a host that came up
# after the other had filled the queue bound once left exactly the bound: the precondition
# below failed on a fresh-clone run with the suite in parallel).
STEPS = 16
BATCH = 8
# What both hosts can have queued while the trainer holds: back-pressure stops admission at
# max_batches_offpolicy (3) batches of sequences; each host (max 2 in flight, group_size 4) can
# overshoot that by what it had running, and by the other host's sends it has not yet polled.
QUEUE_BOUND_SEQS = 3 * BATCH + 2 * 2 * 4


def _hash(group: dict[str, Any]) -> str:
    return hashlib.sha1(json.dumps(group["tokens"]).encode()).hexdigest()


def _events(path: Path) -> list[dict[str, Any]]:
    out = []
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # the line being written right now
            break
    return out


def _trainer_states(path: Path) -> list[dict[str, Any]]:
    return [e for e in _events(path) if e["kind"] == "trainer_status"]


def _wait(pred, timeout: float, what: str, procs=(), diag=lambda: "") -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        for p, log in procs:
            assert p.poll() is None, f"a host exited early ({p.returncode}): {Path(log).read_text()[-2000:]}"
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{diag()}")


def _tail(path: Path, n: int = 2500) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else "(no file)"


def test_sigterm_to_one_of_two_hosts(tmp_path: Path, sims, run_api) -> None:
    sim = sims(latency_ms=60.0)
    result: dict[str, TrainerRun] = {}
    pause = PullPause()

    def trainer() -> None:
        result["run"] = asyncio.run(
            run_trainer(run_api.url, steps=STEPS, batch_size=BATCH, deadline_s=200, reset=False, pause=pause)
        )

    thread = threading.Thread(target=trainer, daemon=True)
    thread.start()
    hosts = {}
    for name in ("a", "b"):
        argv = [
            str(VENV_BIN / "hermes-console"),
            "run",
            "environments.terminal_tasks",
            "--mode",
            "serve",
            "--headless",
            "--runs-dir",
            str(tmp_path / name),
            "--record",
            str(tmp_path / f"{name}.jsonl"),
            "--max-in-flight",
            "2",
            "--env.rollout_server_url",
            run_api.url,
            "--env.total_steps",
            str(STEPS),
            "--openai.base_url",
            f"{sim.base_url}/v1",
        ]
        log = tmp_path / f"host-{name}.log"
        with open(log, "w") as fp:
            hosts[name] = (
                subprocess.Popen(argv, stdout=fp, stderr=subprocess.STDOUT, env={**child_env(), "COLUMNS": "250"}),
                log,
            )

    def diag() -> str:
        b_states = _trainer_states(tmp_path / "b.jsonl")[-3:]
        return "\n".join(
            [f"--- host {n} log:\n{_tail(log)}" for n, (_, log) in hosts.items()]
            + [f"--- b's last trainer states: {b_states}", f"--- run-api log:\n{_tail(run_api.log_path)}"]
        )

    try:
        procs = list(hosts.values())
        _wait(
            lambda: all(any(t["groups_sent"] >= 1 for t in _trainer_states(tmp_path / f"{n}.jsonl")) for n in "ab"),
            120,
            "both hosts delivering",
            procs,
        )
        assert any(abs(t["env_weight"] - 0.5) < 1e-6 for t in _trainer_states(tmp_path / "b.jsonl"))
        # The trainer holds (a long optimizer step) while a drains, so the run cannot reach its end
        # before a has left: b is certainly still connected and polling when a's leave lands. (Without
        # the hold, a slow drain on a loaded box let b finish first, and b never saw the new weight.)
        pause.wanted.set()
        _wait(pause.holding.is_set, 30, "the trainer to hold")
        step = run_api.current_step()
        assert (STEPS - step) * BATCH > QUEUE_BOUND_SEQS, f"the trainer took {step} batches before both hosts delivered"
        a, a_log = hosts["a"]
        seen_before = len(_trainer_states(tmp_path / "b.jsonl"))
        a.send_signal(signal.SIGTERM)
        code_a = a.wait(90)
        # a told run-api it left (/disconnect-env): run-api itself now gives b the whole weight...
        b_env = _trainer_states(tmp_path / "b.jsonl")[-1]["env_id"]
        assert run_api.env_weight(b_env) == pytest.approx(1.0), diag()
        # ...and b, still polling, trains with it
        _wait(
            lambda: any(abs(t["env_weight"] - 1.0) < 1e-6 for t in _trainer_states(tmp_path / "b.jsonl")[seen_before:]),
            30,
            "b's weight back to 1.0 after a's /disconnect-env",
            [hosts["b"]],
            diag,
        )
        pause.wanted.clear()
        thread.join(190)
        b, b_log = hosts["b"]
        code_b = b.wait(90)
    finally:
        pause.wanted.clear()
        for p, _ in hosts.values():
            if p.poll() is None:
                p.kill()
                p.wait(10)
    assert code_b == 0, b_log.read_text()[-3000:]
    run = result["run"]
    assert len(run.batches) == STEPS

    received = [_hash(g) for batch in run.batches for g in batch]
    assert len(received) == len(set(received)), "the trainer got a group twice"
    kept: dict[str, set] = {}
    for name in "ab":
        [jsonl] = list((tmp_path / name).glob("*/groups.jsonl"))
        hashes = [_hash(json.loads(line)) for line in jsonl.read_text().splitlines() if line.strip()]
        assert len(hashes) == len(set(hashes))
        kept[name] = set(hashes)
        events = _events(tmp_path / f"{name}.jsonl")
        ends = {
            e["group_id"]
            for e in events
            if e["kind"] in ("item_completed", "item_failed", "item_dropped", "item_cancelled")
        }
        started = [e["group_id"] for e in events if e["kind"] == "item_received"]
        assert set(started) == ends and len(started) == len(set(started)), f"{name}: an item without an end"
        confirmed = {e["group_id"] for e in events if e["kind"] == "item_completed"}
        unsent = {
            e["group_id"]: e
            for e in events
            if e["kind"] == "item_failed" and (e.get("error_kind") or "").startswith("send")
        }
        # every kept group is in the jsonl, and was either confirmed or recorded (with its cause,
        # spooled in unsent.jsonl) as not delivered / delivery unknown: never silently lost
        assert len(hashes) == len(confirmed) + len(unsent), (name, len(hashes), len(confirmed), unsent)
        spool = jsonl.with_name("unsent.jsonl")
        spooled = [json.loads(x) for x in spool.read_text().splitlines()] if spool.exists() else []
        assert sorted(r["group_id"] for r in spooled) == sorted(unsent), (name, spooled, unsent)
        last = [e for e in events if e["kind"] == "trainer_status"][-1]
        assert last["groups_sent"] == len(confirmed), (name, last)
        # each host left run-api on its way out, a by its drain, b at the run's end
        assert not [e for e in events if e["kind"] == "log_record" and "left (" in e["message"]], name
        statuses = [e["status"] for e in events if e["kind"] == "runtime_status"]
        assert statuses[-1] == ("stopped" if name == "a" else "finished"), (name, statuses[-5:])
        if name == "a":
            # the stop asked for and done exits 0; 143 only when something was cancelled or left
            # unconfirmed (read from the event log, not from the host's own verdict)
            lost = any(e["kind"] == "item_cancelled" for e in events) or unsent or last["send_errors"]
            assert code_a == (128 + signal.SIGTERM if lost else 0), (lost, a_log.read_text()[-3000:])
    assert set(received) <= kept["a"] | kept["b"], "the trainer got a group no host recorded"
    assert set(received) & kept["b"]  # b carried the run on
