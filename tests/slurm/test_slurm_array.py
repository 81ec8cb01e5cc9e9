"""deploy/slurm/hermes-hosts.sbatch on a real single-node Slurm cluster: a 2-task array of headless
serve hosts against a real run-api, the simulator and a stand-in trainer that pulls every group.

Oracles are outside the hosts: Slurm's own job states, the trainer's received groups (hashed)
against each host's groups.jsonl / unsent.jsonl, run-api's env weights (``/status-env``, which
only count connected envs), and the hosts' event logs read as plain JSON.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hermes_console.sim.config import LatencyConfig, SimConfig
from hermes_console.sim.server import SimServer
from tests.faults.cli_stop_helpers import assert_every_item_accounted, cli_env, whole_lines
from tests.scaleout.scaleout_helpers import VENV_BIN, RunAPI, call_json

pytestmark = pytest.mark.timeout(600)  # includes the session fixture: apt install (<=180 s) + start

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "deploy" / "slurm" / "hermes-hosts.sbatch"
GROUP_SIZE = 2
WAIT_S = 180.0  # generous: two hosts import, load and roll out on a loaded 2-core machine
SHARD_SOURCE = "SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT"
TASKS = REPO / "environments" / "terminal_tasks" / "tasks.jsonl"


def _train_task_ids() -> list[str]:
    """The env's items (one epoch of its sequence; each epoch is reshuffled), read from its data file."""
    rows = [json.loads(line) for line in TASKS.read_text().splitlines() if line.strip()]
    return [r["task_id"] for r in rows if r["split"] == "train"]


def _hash(group: dict[str, Any]) -> str:
    return hashlib.sha1(json.dumps(group["tokens"]).encode()).hexdigest()


class PullingTrainer:
    """A stand-in trainer: registers (batch = one group, so every queued group can be pulled),
    then takes batches from run-api until told to stop and the queue is empty."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.groups: list[dict[str, Any]] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        call_json(
            f"{url}/register",
            method="POST",
            body={
                "wandb_group": "g",
                "wandb_project": "p",
                "batch_size": GROUP_SIZE,
                "max_token_len": 100_000,
                "checkpoint_dir": "",
                "save_checkpoint_interval": -1,
                "starting_step": 0,
                "num_steps": 100_000,
            },
        )
        self._thread = threading.Thread(target=self._run, name="pulling-trainer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                batch = call_json(f"{self.url}/batch").get("batch")
                if batch:
                    self.groups.extend(batch)
                else:
                    time.sleep(0.1)
        except BaseException as exc:  # noqa: BLE001 - reported by finish()
            self.error = exc

    def finish(self) -> list[str]:
        """Pull until run-api's own queue count is 0; the hashes of every group received."""
        _until(
            lambda: self.error is not None or call_json(f"{self.url}/status")["queue_size"] == 0,
            60,
            "the trainer to empty run-api's queue",
        )
        self._stop.set()
        self._thread.join(15)
        assert self.error is None, f"the trainer failed: {self.error!r}"
        assert call_json(f"{self.url}/status")["queue_size"] == 0
        return [_hash(g) for g in self.groups]


def _until(pred: Callable[[], bool], timeout: float, what: str, on_timeout: Callable[[], str] = lambda: "") -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}\n{on_timeout()}")


class Task:
    """What one array task left on disk: job output, event log, run dir."""

    def __init__(self, job_dir: Path, out_dir: Path, index: int) -> None:
        self.index = index
        self.dir = job_dir / f"task-{index}"
        self.out = out_dir / f"task-{index}.out"

    def output(self) -> str:
        return self.out.read_text(errors="replace") if self.out.exists() else "(no job output yet)"

    def events(self) -> list[dict[str, Any]]:
        """Every whole line of the (plain, flushed as it goes) event log; a torn last line is skipped."""
        path = self.dir / "events.jsonl"
        if not path.exists():
            return []
        text = path.read_text(errors="replace")
        return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines() if line.strip()]

    def trainer(self) -> dict[str, Any]:
        statuses = [e for e in self.events() if e["kind"] == "trainer_status"]
        return statuses[-1] if statuses else {}

    def in_flight(self) -> int:
        events = self.events()
        ended = {"item_completed", "item_dropped", "item_failed", "item_cancelled"}
        return sum(e["kind"] == "item_received" for e in events) - sum(e["kind"] in ended for e in events)

    def run_file(self, name: str) -> Path:
        [path] = list((self.dir / "runs").glob(f"*/{name}")) or [self.dir / "runs" / "missing" / name]
        return path


def _submit(cluster: Any, tmp_path: Path, sim: SimServer, api: RunAPI) -> str:
    env = cli_env()
    env.update(
        {
            "HERMES_BIN": str(VENV_BIN / "hermes-console"),  # the job must find this checkout's venv
            "HERMES_RUN_API_URL": api.url,
            "HERMES_OPENAI_URL": f"{sim.base_url}/v1",
            "HERMES_JOB_DIR": str(tmp_path / "job"),
            "HERMES_RECORD": "events.jsonl",
            "HERMES_PROGRESS_EVERY": "2",
            "COLUMNS": "120",  # the summary table's width, whatever the terminal running the tests
            # every host serves its events and controls for `hermes-console attach` (loopback only here)
            "HERMES_LISTEN": "1",
            "HERMES_LISTEN_ADDR": "127.0.0.1:0",
        }
    )
    host_flags = [
        "--env.total_steps",
        "100000",
        "--env.group_size",
        str(GROUP_SIZE),
        "--env.max_agent_turns",
        "4",
        "--openai.timeout",
        "30",
        "--max-in-flight",
        "2",
    ]
    return cluster.sbatch(
        SCRIPT,
        ["--array=0-1", f"--output={tmp_path}/task-%a.out", f"--chdir={tmp_path}"],
        host_flags,
        env=env,
        cwd=tmp_path,
    )


def _attached_console_sees_every_host(tasks: list[Task], token_file: Path) -> None:
    """One console attached to every task's --listen address (as the job output says to)
    shows both hosts and their groups as the hosts' own event logs count them."""
    import asyncio

    from hermes_console.remote.client import FleetRuntime, parse_targets
    from hermes_console.remote.fleet import FleetConsoleApp
    from hermes_console.ui.config import ConsoleConfig

    addresses = [json.loads(t.run_file("listen.json").read_text())["address"] for t in tasks]
    for t, address in zip(tasks, addresses):
        assert f"listening on {address}" in t.output() or address in t.output(), t.output()[-2000:]
    fleet = FleetRuntime(parse_targets(addresses), token=token_file.read_text().strip())
    app = FleetConsoleApp(fleet, config=ConsoleConfig(ui_cpu_share=0.0))  # unthrottled: the test reads the screen

    async def drive() -> None:
        async with app.run_test(size=(200, 60)) as pilot:
            end = time.monotonic() + WAIT_S
            while time.monotonic() < end and not all(h.state.accounting.completed >= 1 for h in fleet.hosts):
                await pilot.pause(0.25)
            assert len(fleet.hosts) == 2 and all(h.connected for h in fleet.hosts)
            for h, t in zip(fleet.hosts, tasks):
                assert h.state.accounting.completed >= 1, (h.label, t.output()[-2000:])

            # The merged view is the console's reduction of the same events, drained on its own
            # ticks: it agrees with the hosts' sum once it has caught up (groups keep completing).
            def agree() -> bool:
                return app.merged.accounting.completed == sum(h.state.accounting.completed for h in fleet.hosts)

            while time.monotonic() < end and not agree():
                await pilot.pause(0.05)
            assert agree(), (app.merged.accounting, [h.state.accounting for h in fleet.hosts])
            await pilot.press("q")

    asyncio.run(drive())
    fleet.join(10)


def test_array_hosts_take_disjoint_items_deliver_once_and_drain_on_scancel(slurm_cluster, tmp_path):
    cluster = slurm_cluster
    sim = SimServer(SimConfig(seed=7, port=0, latency=LatencyConfig(mode="fixed", mean_ms=150.0)))
    sim.start()
    api = RunAPI(tmp_path).start()
    job = ""
    try:
        trainer = PullingTrainer(api.url)
        job = _submit(cluster, tmp_path, sim, api)
        tasks = [Task(tmp_path / "job", tmp_path, i) for i in (0, 1)]

        def show() -> str:
            return "\n".join(f"--- task {t.index} output:\n{t.output()[-2500:]}" for t in tasks)

        # Both hosts registered and confirmed groups; task 1 has work in flight: cancel it now.
        _until(
            lambda: all(t.trainer().get("groups_sent", 0) >= 1 for t in tasks) and tasks[1].in_flight() >= 1,
            WAIT_S,
            "both hosts sending, task 1 with a group in flight",
            show,
        )
        env_ids = {t.index: t.trainer()["env_id"] for t in tasks}
        _attached_console_sees_every_host(tasks, tmp_path / "job" / "listen.token")
        assert sorted(env_ids.values()) == [0, 1], env_ids
        assert api.env_weight(env_ids[0]) == pytest.approx(0.5)  # run-api counts two connected envs
        cluster.run("scancel", f"{job}_1")
        _until(lambda: 1 not in cluster.tasks(job), cluster.kill_wait_s + WAIT_S, "task 1 to end", show)
        assert cluster.job_field(f"{job}_1", "JobState") == "CANCELLED"
        assert cluster.tasks(job).get(0) == "RUNNING", show()  # the other host goes on...
        # ...and now holds the whole weight: the cancelled host sent /disconnect-env on its way out
        _until(lambda: api.env_weight(env_ids[0]) == pytest.approx(1.0), 30, "run-api to drop the cancelled env", show)
        assert tasks[0].trainer()["state"] != "error"

        # The gentle stop: only the batch shell is signalled, and it passes one SIGTERM to the host.
        cluster.run("scancel", "--batch", "--signal=USR1", f"{job}_0")
        _until(lambda: not cluster.tasks(job), cluster.kill_wait_s + WAIT_S, "task 0 to end", show)
        received = trainer.finish()
    finally:
        if job:
            cluster.run("scancel", job, check=False)
        api.stop()
        sim.stop()

    # Every group the trainer received, exactly once; each from exactly one host.
    assert len(received) == len(set(received)), "the trainer received a group twice"
    kept: dict[int, set[str]] = {}
    for t in tasks:
        out = t.output()
        # SIGTERM'd, drained, exited by itself: 0 when that lost nothing, 143 when it cancelled or
        # left a group unconfirmed (read from the event log, not from the host's verdict)
        lost = any(e["kind"] == "item_cancelled" for e in t.events()) or t.trainer().get("send_errors", 0)
        assert f"host exited with code {143 if lost else 0}" in out, out[-3000:]
        assert ("SIGUSR1: stopping the host" in out) == (t.index == 0), out[-3000:]
        assert f"{t.index}/2 ({SHARD_SOURCE})" in out, out[-3000:]  # the shard, in the summary
        events = t.events()
        started = [e for e in events if e["kind"] == "run_configured"]
        assert started and started[-1]["shard"] == f"{t.index}/2 ({SHARD_SOURCE})"
        statuses = [e["status"] for e in events if e["kind"] == "runtime_status"]
        assert "stopping" in statuses and statuses[-1] == "stopped", statuses[-5:]
        assert_every_item_accounted(events)  # each item received has exactly one outcome

        jsonl = [_hash(json.loads(line)) for line in whole_lines(t.run_file("groups.jsonl"))]
        assert len(jsonl) == len(set(jsonl))
        unsent_path = t.run_file("unsent.jsonl")
        spool = {_hash(r["group"]): r["outcome"] for r in map(json.loads, whole_lines(unsent_path))}
        kept[t.index] = set(jsonl)
        # never silently lost: a kept group reached the trainer, or is in the spool with its outcome
        lost = [h for h in jsonl if h not in received and h not in spool]
        assert not lost, f"task {t.index}: {len(lost)} kept group(s) neither received nor recorded undelivered"
        # never delivered when recorded as not delivered (only 'unknown' may have arrived)
        wrongly = [h for h, outcome in spool.items() if h in received and outcome != "unknown"]
        assert not wrongly, f"task {t.index}: groups recorded {set(spool.values())} reached the trainer"
        confirmed = t.trainer()["groups_sent"]
        assert len(set(jsonl) & set(received)) >= confirmed >= 1

    assert not kept[0] & kept[1], "both hosts produced the same group"
    assert set(received) <= kept[0] | kept[1], "the trainer received a group no host wrote"
    # Disjoint shares of the item sequence: within an epoch, each host takes every other item.
    items = [[e["item_summary"] for e in t.events() if e["kind"] == "item_received"] for t in tasks]
    epoch = _train_task_ids()
    half = len(epoch) // 2
    assert all(i in epoch for share in items for i in share), items
    assert not set(items[0][:half]) & set(items[1][:half]), items
    assert all(len(set(share[:half])) == len(share[:half]) for share in items), items
