"""Inference-server faults against the real runtime + simulator (cases 1-5 of #7).

Each case: the console keeps running and answers commands, the fault shows with
its cause (events, ConsoleState, the data the panels render), every item is
accounted, every completed group is in the jsonl, and stop leaves nothing behind.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hermes_console.sim.config import LatencyConfig, SimConfig
from hermes_console.sim.server import SimServer
from tests.faults.faults_helpers import fault_spec

pytestmark = pytest.mark.timeout(120)


def _server_row(r):
    assert r.state.servers, "no ServerStats reached the console"
    return r.state.servers[0]


def test_http_500_at_30_percent_is_counted_and_survived(sim, tmp_path, run):
    sim.set_faults(http_500=0.3)
    r = run(fault_spec(sim, tmp_path, total_steps=4))
    r.until_done_items(4, 90)
    r.assert_alive()
    injected = sim.stats()["faults"]["http_500"]
    assert injected > 0
    # Retried-away 500s are not invisible: every failed attempt is counted with its cause.
    r.until(lambda s: s.servers and s.servers[0]["transport_errors"] >= injected, 60, "all 500s counted")
    row = _server_row(r)
    assert row["transport_errors"] == injected
    assert "HTTP 500" in row["last_transport_error"]
    assert r.state.errors_by_kind["server_http_error"] == injected
    # Retries absorb a 30% rate: the items still complete.
    assert r.state.accounting.completed + r.state.accounting.failed == 4
    assert r.state.accounting.completed >= 3
    r.assert_accounted()
    r.assert_jsonl_complete()
    r.stop_clean()


def test_hang_past_the_timeout_fails_the_item_then_recovers(sim, tmp_path, run):
    sim.set_faults(hang=1.0)
    spec = fault_spec(
        sim, tmp_path, "--env.worker_timeout", "3", total_steps=4, group_size=1, timeout_s=1, max_in_flight=2
    )
    r = run(spec)
    r.until(lambda s: s.accounting.failed >= 2, 40, "two items failed by the hang")
    sim.set_faults(hang=0.0)
    failed = r.of("item_failed")
    assert all(e.error_kind == "timeout" and "worker_timeout=3s" in e.error for e in failed), failed
    groups = [r.state.groups[e.group_id] for e in failed if e.group_id in r.state.groups]
    assert groups and all(g.status == "failed" and "worker_timeout" in (g.reason or "") for g in groups)
    assert any("group failed (timeout)" in t for t in r.stream_texts("error"))
    # The request timeouts themselves are counted with their cause.
    r.until(lambda s: s.servers and s.servers[0]["transport_errors"] >= 2, 60, "timeouts counted")
    assert "Timeout" in _server_row(r)["last_transport_error"]
    assert r.state.errors_by_kind["item_timeout"] >= 2
    # The hang over, the run carries on and finishes its items.
    r.until_done_items(4, 60)
    assert r.state.accounting.completed >= 1
    r.assert_alive()
    r.assert_accounted()
    r.assert_jsonl_complete()
    r.stop_clean()


def test_server_killed_mid_run_and_restarted_on_the_same_port(tmp_path, run):
    cfg = SimConfig(seed=3, latency=LatencyConfig(mode="fixed", mean_ms=30.0))
    first = SimServer(cfg)
    first.start()
    port = first.port
    second = None
    try:
        # Many items, few at a time: work is certainly left when the server dies, however late
        # a loaded machine lets the test see "mid-run" (with 6 items all in flight, a slow look
        # could find the run already finished).
        r = run(fault_spec(first, tmp_path, total_steps=16, max_in_flight=2))
        r.until(lambda s: s.accounting.completed >= 1 and s.accounting.in_flight >= 1, 60, "mid-run")
        first.stop()  # in-flight requests die; new ones are refused
        r.until(lambda s: s.servers and s.servers[0]["transport_errors"] >= 1, 60, "refused connections counted")
        r.assert_alive()
        second = SimServer(cfg.model_copy(update={"port": port}))
        second.start()
        r.until_done_items(16, 120)
        row = _server_row(r)
        assert row["last_transport_error"] and any(
            w in row["last_transport_error"] for w in ("ConnectError", "RemoteProtocolError", "ReadError")
        ), row
        assert r.state.errors_by_kind["server_http_error"] >= 1
        # After the restart the same URL serves again: completions resume.
        assert second.stats()["requests"]["chat_completions"] > 0
        assert r.state.accounting.completed >= 2
        r.assert_alive()
        r.assert_accounted()
        r.assert_jsonl_complete()
        r.stop_clean()
    finally:
        first.stop()
        if second is not None:
            second.stop()


def _tool_messages(jsonl: str) -> list:
    out = []
    for line in Path(jsonl).read_text().splitlines():
        for conv in json.loads(line).get("messages") or []:
            out.extend(m for m in conv if m.get("role") == "tool")
    return out


@pytest.mark.parametrize(
    "fault, kind, model_sees",
    [
        ("malformed_tool_json", "bad_json", "Invalid JSON in tool arguments"),
        ("unknown_tool", "unknown_tool", "Unknown tool 'browser_navigate'"),
    ],
)
def test_bad_tool_calls_are_shown_per_kind_and_answered(sim, tmp_path, run, fault, kind, model_sees):
    sim.set_faults(**{fault: 1.0})
    r = run(fault_spec(sim, tmp_path, total_steps=2, max_turns=3))
    r.until_done_items(2, 60)
    r.assert_alive()
    rows = r.tool_rows(error_kind=kind)
    assert rows, f"no {kind} rows in the tool-calls table"
    assert all(row.status == "error" and model_sees.split("'")[0] in row.error for row in rows)
    assert r.state.errors_by_kind[f"tool:{kind}"] == len(rows)
    assert any(f"failed: {model_sees.split(chr(39))[0]}" in t for t in r.stream_texts("error"))
    finished = [e for e in r.of("tool_call_finished") if e.error_kind == kind]
    assert len(finished) == len(rows)
    # The rollout does not crash: the model gets the error as the tool result and the group completes.
    assert r.state.accounting.completed == 2
    assert any(model_sees in m["content"] for m in _tool_messages(r.state.run.jsonl_path))
    r.assert_accounted()
    r.assert_jsonl_complete()
    r.stop_clean()
