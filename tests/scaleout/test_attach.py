"""Issue 14, the fleet console: two headless hosts as processes (own event bus each), with
``--listen`` (one on loopback TCP, one on a unix socket), one attached console (Textual
Pilot) that sees both (the main screen's panels say which host each row is from, checked
against each host's own event log), pauses one while the other keeps running, shows a host stopped
from it as disconnected and keeps running. ``/metrics`` parses as Prometheus text and
its numbers match the host's own summary and its groups.jsonl."""

from __future__ import annotations

import json
import math
import re
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from hermes_console.remote.client import FleetRuntime, parse_targets
from hermes_console.remote.fleet import FleetConsoleApp, FleetScreen, HostsTable
from hermes_console.ui.config import ConsoleConfig
from tests.scaleout.scaleout_helpers import VENV_BIN, child_env

pytestmark = pytest.mark.timeout(180)
TOKEN = "fleet-test-token-1"


def _start_host(tmp_path: Path, name: str, listen: str, sim_url: str) -> tuple[subprocess.Popen, Path]:
    argv = [
        str(VENV_BIN / "hermes-console"),
        "run",
        "environments.terminal_tasks",
        "--headless",
        "--runs-dir",
        str(tmp_path / name),
        "--record",
        str(tmp_path / f"events-{name}.jsonl"),
        "--listen",
        listen,
        "--listen-token-file",
        str(tmp_path / "token"),
        "--max-in-flight",
        "2",
        "--env.group_size",
        "2",
        "--env.total_steps",
        "100000",
        "--openai.base_url",
        f"{sim_url}/v1",
    ]
    log = tmp_path / f"host-{name}.log"
    env = {**child_env(), "COLUMNS": "250", "HERMES_PROGRESS_EVERY": "0"}
    with open(log, "w") as fp:
        proc = subprocess.Popen(argv, stdout=fp, stderr=subprocess.STDOUT, env=env)
    return proc, log


def _listen_json(run_root: Path, proc: subprocess.Popen, log: Path, timeout: float = 60.0) -> dict:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = list(run_root.glob("*/listen.json"))
        if found:
            return json.loads(found[0].read_text())
        assert proc.poll() is None, f"host exited {proc.returncode}: {log.read_text()}"
        time.sleep(0.2)
    raise AssertionError(f"no listen.json under {run_root} after {timeout}s: {log.read_text()}")


SAMPLE = re.compile(
    r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*",?)*)\})? '
    r"(NaN|[+-]Inf|[-+]?[0-9.]+(?:[eE][-+]?[0-9]+)?)$"
)


def parse_prometheus(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Text exposition format 0.0.4, strictly: every sample's family TYPEd before it, valid names,
    labels and values, no duplicate series."""
    types: dict[str, str] = {}
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    assert text.endswith("\n")
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            assert kind in ("counter", "gauge", "untyped") and name not in types, line
            types[name] = kind
            continue
        if line.startswith("#") or not line:
            continue
        m = SAMPLE.match(line)
        assert m, f"not a Prometheus sample line: {line!r}"
        name, labels_text, value = m.groups()
        assert name in types, f"{name} has no # TYPE line before it"
        labels = tuple(sorted(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', labels_text or "")))
        key = (name, labels)
        assert key not in out, f"duplicate series {key}"
        out[key] = float(value)
    return out


def _metric(m: dict, name: str, **labels: str) -> float:
    hits = [v for (n, ls), v in m.items() if n == name and all((k, val) in ls for k, val in labels.items())]
    assert len(hits) == 1, (name, labels, hits)
    return hits[0]


def _summary_accounting(log_text: str) -> dict[str, int]:
    m = re.search(
        r"received (\d+) = completed (\d+) \+ dropped (\d+) \+ failed (\d+) \+ cancelled (\d+) "
        r"\+ in flight (\d+)",
        log_text,
    )
    assert m, log_text[-3000:]
    return dict(zip(("received", "completed", "dropped", "failed", "cancelled", "in_flight"), map(int, m.groups())))


def _logged_ids(path: Path) -> dict[str, set]:
    """The ids a host's own event log names: its groups, rollouts and sandboxes."""
    ids: dict[str, set] = {"group": set(), "rollout": set(), "task": set()}
    for line in path.read_text().splitlines():
        event = json.loads(line)
        for what in ids:
            if event.get(f"{what}_id"):
                ids[what].add(event[f"{what}_id"])
    return ids


def _main_screen_hosts(screen, seen: dict[str, dict[str, str]]) -> None:
    """Collect (row id -> host column) of the main screen's groups, sandboxes and tool calls."""
    from hermes_console.ui.widgets.groups_table import GroupsTable
    from hermes_console.ui.widgets.sandboxes_table import SandboxesTable
    from hermes_console.ui.widgets.tool_calls_table import ToolCallsTable

    for what, table in (("group", screen.query_one(GroupsTable)), ("task", screen.query_one(SandboxesTable))):
        for key in table.keys():
            seen[what][key] = table.get_row(key)[0].plain
    tools = screen.query_one(ToolCallsTable)
    for row_key in list(tools.rows):
        seen["rollout"][tools._rollout_of[int(row_key.value)]] = tools.get_row(row_key)[0].plain


async def _until(pilot, pred, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        await pilot.pause(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_one_console_over_two_hosts(tmp_path: Path, sims) -> None:
    sim = sims(latency_ms=40.0)
    (tmp_path / "token").write_text(TOKEN + "\n")
    sock = tmp_path / "b.sock"
    procs: list[tuple[subprocess.Popen, Path]] = [
        _start_host(tmp_path, "a", "127.0.0.1:0", sim.base_url),
        _start_host(tmp_path, "b", f"unix:{sock}", sim.base_url),
    ]
    try:
        infos = [_listen_json(tmp_path / name, p, log) for name, (p, log) in zip("ab", procs)]
        addr_a = infos[0]["address"]
        assert re.fullmatch(r"127\.0\.0\.1:\d+", addr_a) and infos[1]["address"] == f"unix:{sock}"
        assert f"listening on {addr_a}" in procs[0][1].read_text()

        # a wrong token is refused, with the reason; nothing was paused
        req = urllib.request.Request(
            f"http://{addr_a}/control/pause",
            method="POST",
            data=b"{}",
            headers={"Authorization": "Bearer wrong-token-123"},
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=10)
        assert refused.value.code == 401 and "wrong token" in json.loads(refused.value.read())["error"]

        fleet = FleetRuntime(parse_targets([addr_a, f"unix:{sock}"]), token=TOKEN)
        app = FleetConsoleApp(fleet, config=ConsoleConfig(ui_cpu_share=0.0))  # unthrottled: the test reads the screen
        metrics_paused: dict = {}
        stats: dict[str, int] = {}
        column: dict[str, dict[str, str]] = {"group": {}, "task": {}, "rollout": {}}

        async def drive() -> None:
            async with app.run_test(size=(200, 60)) as pilot:
                h0, h1 = fleet.hosts
                await _until(
                    pilot,
                    lambda: h0.state.accounting.completed >= 2 and h1.state.accounting.completed >= 2,
                    90,
                    "both hosts completing groups in the console",
                )

                # the merged view is the sum of the hosts, once it has caught up: it is the
                # console's reduction of the same events, applied in its own drain steps
                def agree() -> bool:
                    merged, a0, a1 = app.merged.accounting, h0.state.accounting, h1.state.accounting
                    return (
                        merged.completed == a0.completed + a1.completed and merged.received == a0.received + a1.received
                    )

                await _until(pilot, agree, 30, "the merged view to agree with the hosts' sum")
                # every panel's host column: rows of both hosts (checked against their logs below)
                await _until(
                    pilot,
                    lambda: (
                        _main_screen_hosts(app.screen, column),
                        all(set(c.values()) == {"h0", "h1"} for c in column.values()),
                    )[1],
                    60,
                    "rows of both hosts in the groups, sandboxes and tool calls panels",
                )
                await pilot.press("H")
                assert isinstance(app.screen, FleetScreen)
                await pilot.pause(0.3)
                assert app.screen.query_one(HostsTable).keys() == ["h0", "h1"]
                assert app.screen.selected_host() is h0
                await pilot.press("p")  # pause h0 only
                await _until(
                    pilot,
                    lambda: h0.state.status == "paused" and h0.state.accounting.in_flight == 0,
                    60,
                    "h0 paused and drained",
                )
                done0, recv0 = h0.state.accounting.completed, h0.state.accounting.received
                done1 = h1.state.accounting.completed
                await _until(pilot, lambda: h1.state.accounting.completed >= done1 + 3, 60, "h1 going on")
                assert (h0.state.accounting.completed, h0.state.accounting.received) == (done0, recv0)
                assert h1.state.status == "running" and app.merged.status == "running"
                assert "h0 paused" in app.merged.status_detail
                metrics_paused.update(
                    parse_prometheus(urllib.request.urlopen(f"http://{addr_a}/metrics", timeout=10).read().decode())
                )
                stats.update(done0=done0, recv0=recv0)

                # host filter: the main console shows h1 alone
                await pilot.press("down", "enter")
                assert fleet.selected == 1 and app.state is h1.state

                # stop h0 from the console: it drains and exits; the console shows it disconnected
                await pilot.press("up", "s")
                await pilot.pause(0.3)
                await pilot.press("y")
                await _until(pilot, lambda: h0.link == "disconnected", 60, "h0 shown as disconnected")
                assert app.is_running and h1.connected
                done1 = h1.state.accounting.completed
                await _until(pilot, lambda: h1.state.accounting.completed > done1, 60, "h1 still going")
                await pilot.press("q")

        import asyncio

        asyncio.run(drive())
        fleet.join(10)
        assert procs[0][0].wait(60) == 0, procs[0][1].read_text()[-3000:]
    finally:
        for p, _ in procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(60)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(10)
    # each row's host column names the host whose own event log has that id (and the
    # other's has not); the row key carries the same host
    logged = {"h0": _logged_ids(tmp_path / "events-a.jsonl"), "h1": _logged_ids(tmp_path / "events-b.jsonl")}
    for what, rows in column.items():
        for key, label in rows.items():
            raw, _, tag = key.rpartition("@")
            other = "h1" if label == "h0" else "h0"
            assert tag == label and raw in logged[label][what] and raw not in logged[other][what], (what, key, label)

    # h1 was still running when the console left: the console detached, it did not stop it;
    # the test's own SIGTERM did (0 when that drain lost nothing, 143 when it cancelled groups)
    h1_log = procs[1][1].read_text()
    assert "SIGTERM: stopping" in h1_log, h1_log[-3000:]
    h1 = _summary_accounting(h1_log)
    assert procs[1][0].returncode == (128 + 15 if h1["cancelled"] else 0), h1_log[-3000:]

    # /metrics (read while h0 was paused and drained) == h0's own summary == its groups.jsonl
    summary = _summary_accounting(procs[0][1].read_text())
    m = metrics_paused
    assert _metric(m, "hermes_paused") == 1 and _metric(m, "hermes_groups_in_flight") == 0
    for outcome in ("received", "completed", "dropped", "failed", "cancelled"):
        assert _metric(m, "hermes_groups_total", outcome=outcome) == summary[outcome], outcome
    assert summary["completed"] == stats["done0"] and summary["received"] == stats["recv0"]
    [jsonl] = list((tmp_path / "a").glob("*/groups.jsonl"))
    assert len(jsonl.read_text().splitlines()) == summary["completed"]
    assert summary["failed"] == summary["cancelled"] == 0  # a clean simulator, drained before the stop
    # group_size 2: every kept or dropped group finished both its rollouts
    assert _metric(m, "hermes_rollouts_finished_total") == 2 * (summary["completed"] + summary["dropped"])
    assert math.isfinite(_metric(m, "hermes_reward_mean"))
