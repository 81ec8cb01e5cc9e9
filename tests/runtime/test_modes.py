"""The other modes and front doors: serve against atroposlib's real trainer API
(on loopback), evaluate mode, `demo --headless`, SIGINT in headless, and the
event queue's cost."""

from __future__ import annotations

import asyncio
import io
import json
import signal
import socket
import threading
import time
from pathlib import Path

import aiohttp
import pytest
from rich.console import Console

from environments import events as ev
from hermes_console.cli import main as cli_main
from hermes_console.runtime.headless import EXIT_INTERRUPTED, EXIT_OK, run_headless
from hermes_console.runtime.host import RuntimeHost
from hermes_console.runtime.queue import EventQueue
from tests.helpers.run_api import TrainerAPI
from tests.runtime.runtime_helpers import identity, make_spec


async def _fake_trainer(url: str, batches: int, batch_size: int) -> list:
    got = []
    async with aiohttp.ClientSession() as session:
        await (await session.get(f"{url}/reset_data")).read()
        reg = {
            "wandb_group": "g",
            "wandb_project": "p",
            "batch_size": batch_size,
            "max_token_len": 100_000,
            "checkpoint_dir": "",
            "save_checkpoint_interval": -1,
            "starting_step": 0,
            "num_steps": batches,
        }
        await (await session.post(f"{url}/register", json=reg)).read()
        end = time.monotonic() + 60
        while len(got) < batches and time.monotonic() < end:
            data = await (await session.get(f"{url}/batch")).json()
            if data.get("batch"):
                got.append(data["batch"])
            else:
                await asyncio.sleep(0.2)
    return got


def test_serve_mode_sends_groups_to_the_trainer(sim, tmp_path, live):
    with TrainerAPI() as api:
        spec = make_spec(
            sim, tmp_path, "--env.rollout_server_url", api.url, "--env.total_steps", "2", mode="serve", max_in_flight=2
        )
        p = live(spec, exit_when_finished=True)
        p.until(lambda s: s.trainer is not None and s.trainer.state == "waiting", 30, "waiting for the trainer")
        batches = asyncio.run(_fake_trainer(api.url, batches=2, batch_size=8))
        assert len(batches) == 2
        for batch in batches:
            for group in batch:
                assert len(group["tokens"]) == 4 and len(group["scores"]) == 4
                assert "hermes_group_id" not in group  # our ids stay in groups.jsonl, not the trainer's data
        p.until(lambda s: s.status == "finished", 60, "serve run finished at total_steps")
    states = [e.state for e in p.of("trainer_status")]
    assert states[0] == "waiting" and "registered" in states and states[-1] == "finished"
    assert identity(p.state, p.events) is None
    assert p.state.accounting.completed >= 4


def test_evaluate_mode_runs_once_and_writes_metrics(sim, tmp_path):
    host = RuntimeHost(make_spec(sim, tmp_path, mode="evaluate"), exit_when_finished=True)
    buf = io.StringIO()
    assert run_headless(host, console=Console(file=buf, width=200)) == EXIT_OK, buf.getvalue()
    [metrics_file] = list(Path(tmp_path / "run" / "evals").glob("*/metrics.json"))
    metrics = json.loads(metrics_file.read_text())["results"]["all"]
    assert metrics["eval/total_tasks"] > 0
    assert "eval/pass_rate" in buf.getvalue()


def test_demo_headless(tmp_path, capsys):
    code = cli_main(
        [
            "demo",
            "--headless",
            "--total-steps",
            "2",
            "--latency-ms",
            "1",
            "--runs-dir",
            str(tmp_path),
            "--record",
            str(tmp_path / "demo.jsonl.gz"),
        ]
    )
    out = capsys.readouterr().out
    assert code == EXIT_OK, out
    assert "received 2 =" in out
    [jsonl] = list(tmp_path.glob("terminal-tasks-*/groups.jsonl"))
    assert jsonl.read_text().strip()
    assert (tmp_path / "demo.jsonl.gz").stat().st_size > 0


def test_sigint_in_headless_stops_gracefully(sim, tmp_path):
    host = RuntimeHost(make_spec(sim, tmp_path, "--env.total_steps", "1000", max_in_flight=4), exit_when_finished=True)
    timer = threading.Timer(4.0, signal.raise_signal, args=(signal.SIGINT,))
    timer.start()
    buf = io.StringIO()
    try:
        code = run_headless(host, console=Console(file=buf, width=200), drain_deadline_s=0.5)
    finally:
        timer.cancel()
    out = buf.getvalue()
    assert code == EXIT_INTERRUPTED, out
    assert "stopped" in out and "in flight 0" in out
    assert not host._thread.is_alive()
    lines = Path(host.driver.jsonl_path).read_text().splitlines()
    assert len(lines) == host.driver.completed  # everything completed is on disk


def test_event_queue_is_cheap_enough():
    q = EventQueue()
    e = ev.LoopLag(lag_ms=1.0) if hasattr(ev, "LoopLag") else ev.ItemDropped(group_id="g", reason="r")
    n = 200_000
    t0 = time.thread_time()  # CPU time of this thread: a loaded machine does not inflate it
    for _ in range(n):
        q.push(e)
    rate = n / max(time.thread_time() - t0, 1e-9)
    assert rate > 100_000, f"{rate:.0f} events/s"  # P3 needs 20k/s end to end
    items = q.drain()
    assert len(q) == 0
    # Past coalesce_at, lag samples fold into segments: every event is still accounted for.
    assert sum(getattr(x, "count", 1) for x in items) == n


def test_evaluate_with_intake_paused_then_resumes(sim, tmp_path, live):
    p = live(make_spec(sim, tmp_path, "--env.total_steps", "1000", max_in_flight=2))
    p.until(lambda s: s.accounting.received >= 2, 60, "running")
    metrics = p.host.evaluate(pause_intake=True).result(90)
    assert metrics["eval/total_tasks"] > 0
    p.pump()
    [started] = p.of("eval_started")
    assert started.intake_paused is True
    # no item was taken while the evaluation ran
    t0, t1 = started.ts, p.of("eval_finished")[-1].ts
    assert not [e for e in p.of("item_received") if t0 < e.ts < t1]
    statuses = [e.status for e in p.of("runtime_status")]
    assert "paused" in statuses[statuses.index("running") :] and statuses[-1] == "running"
    received = p.state.accounting.received
    p.until(lambda s: s.accounting.received > received, 30, "intake resumed after the evaluation")


def test_a_finished_run_stays_available_until_stopped(sim, tmp_path, live):
    """Under the UI the runtime outlives the run: evaluate and inspect, then quit."""
    p = live(make_spec(sim, tmp_path, "--env.total_steps", "2"), exit_when_finished=False)
    p.until(lambda s: s.status == "finished", 60, "finished")
    assert not p.host.done.done()
    assert p.host.evaluate().result(90)["eval/total_tasks"] > 0
    p.stop(deadline=1)
    assert p.state.status == "finished" and not p.host._thread.is_alive()
    assert identity(p.state, p.events) is None and p.state.accounting.completed + p.state.accounting.dropped_total == 2


def test_demo_starts_its_simulator_on_the_host_thread_after_the_ui(monkeypatch) -> None:
    """The demo's simulator (aiohttp app, tokenizer load ~1 s) must not delay the first frame:
    cli builds and starts it inside the host's `prepare` callable, and the host waits for the server."""
    import hermes_console.cli as cli

    seen = {"built": 0, "started": 0, "stopped": 0}

    class FakeSim:
        def __init__(self, config):
            seen["built"] += 1
            seen["port"] = config.port

        def start(self):
            seen["started"] += 1

        def stop(self):
            seen["stopped"] += 1

    class FakeHost:
        def __init__(self, spec, *, exit_when_finished, prepare):
            seen["spec"], seen["prepare"] = spec, prepare

    def fake_front_end(host, headless, deadline, keys, sigterm_exit_code=0):
        seen["built_before_front_end"] = seen["built"]
        seen["prepare"]()  # what the host does on its own thread once the UI is up
        return 0

    monkeypatch.setattr("hermes_console.sim.server.SimServer", FakeSim)
    monkeypatch.setattr("hermes_console.runtime.host.RuntimeHost", FakeHost)
    monkeypatch.setattr(cli, "_front_end", fake_front_end)
    assert cli.main(["demo", "--headless"]) == 0
    assert seen["built_before_front_end"] == 0
    assert (seen["built"], seen["started"], seen["stopped"]) == (1, 1, 1)
    # The spec is built when the runtime starts (off the way to the first frame: pydantic).
    assert callable(seen["spec"])
    spec = seen["spec"]()
    assert f"127.0.0.1:{seen['port']}/v1" in " ".join(spec.flags)
    assert spec.server_wait_s > 0


def test_a_spec_given_as_a_callable_is_built_once_when_first_needed() -> None:
    from hermes_console.runtime.config import RunSpec
    from hermes_console.runtime.host import RuntimeHost

    built: list[RunSpec] = []

    def build() -> RunSpec:
        built.append(RunSpec(env="environments/terminal_tasks/env.py", runs_dir="unused"))
        return built[-1]

    host = RuntimeHost(build)
    assert built == []  # nothing is built (or imported) with the host
    assert host.spec is host.spec is built[0]
    assert len(built) == 1


async def test_probe_waits_for_a_server_that_starts_late() -> None:
    from hermes_console.runtime.errors import ConfigError
    from hermes_console.runtime.servers import probe_servers
    from hermes_console.sim.config import SimConfig
    from hermes_console.sim.server import SimServer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig

    cfg = [APIServerConfig(base_url=f"http://127.0.0.1:{port}/v1", model_name="m", api_key="x")]
    with pytest.raises(ConfigError, match="not reachable"):
        await probe_servers(cfg, timeout_s=0.5, wait_s=0.0)
    sim = SimServer(SimConfig(port=port))
    starter = asyncio.get_running_loop().run_in_executor(None, sim.start)
    try:
        await probe_servers(cfg, timeout_s=0.5, wait_s=20.0)  # retries until it answers
    finally:
        await starter
        sim.stop()


def test_demo_keeps_at_most_keep_runs_demo_dirs(tmp_path, capsys):
    """Disk use of the demo is bounded: the oldest demo run dirs go, nothing else under runs/."""
    old = [f"terminal-tasks-2020010{d}-000000" for d in range(1, 6)] + ["terminal-tasks-20200105-000000-1"]
    for name in [*old, "terminal-tasks-keep-me", "other-env-20200101-000000", "notes"]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "groups.jsonl").write_text("{}\n")
    code = cli_main(
        [
            "demo",
            "--headless",
            "--total-steps",
            "1",
            "--latency-ms",
            "1",
            "--runs-dir",
            str(tmp_path),
            "--keep-runs",
            "3",
        ]
    )
    assert code == EXIT_OK, capsys.readouterr().out
    left = sorted(p.name for p in tmp_path.iterdir())
    [new] = [n for n in left if n.startswith("terminal-tasks-") and n not in old and n != "terminal-tasks-keep-me"]
    assert (tmp_path / new / "groups.jsonl").exists()
    # the new run + the 2 newest older ones (by their stamp; "-1" is the later of the same second)
    assert left == sorted(
        [
            new,
            "terminal-tasks-20200105-000000",
            "terminal-tasks-20200105-000000-1",
            "terminal-tasks-keep-me",
            "other-env-20200101-000000",
            "notes",
        ]
    )
    assert "removed 4 old demo run dir(s)" in capsys.readouterr().err
