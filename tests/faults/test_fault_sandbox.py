"""Sandbox faults through the whole stack (cases 6-8 of #7): the simulator's policy
issues the command (``Run this command: ...`` task prompts), the terminal tool runs
it in the rollout's sandbox, the console shows what happened.

The fork bomb is bounded (150 sleeps) and runs on bwrap, in its own pid namespace:
the machine is never at risk, and the test proves every one of them is gone.
"""

from __future__ import annotations

import json
import resource
import time
from pathlib import Path

import pytest

from tests.faults.faults_helpers import fault_spec, write_tasks

pytestmark = pytest.mark.timeout(120)


def _tool_results(jsonl: str) -> list:
    out = []
    for line in Path(jsonl).read_text().splitlines():
        for conv in json.loads(line).get("messages") or []:
            out.extend(json.loads(m["content"]) for m in conv if m.get("role") == "tool")
    return out


def _dropped_tool_results(path: Path) -> list:
    out = []
    for line in path.read_text().splitlines():
        for conv in json.loads(line)["group"].get("messages") or []:
            out.extend(json.loads(m["content"]) for m in conv if m.get("role") == "tool")
    return out


def test_command_past_terminal_timeout_is_killed_and_reported(sim, tmp_path, run):
    tasks = write_tasks(tmp_path / "tasks.jsonl", ["Run this command: sleep 30"])
    spec = fault_spec(sim, tmp_path, "--env.terminal_timeout", "1", total_steps=1, tasks=tasks)
    r = run(spec)
    r.until_done_items(1, 40)
    r.assert_alive()
    rows = r.tool_rows(error_kind="timeout")
    assert len(rows) == 2, [(x.tool_name, x.error_kind) for x in r.state.tool_rows]  # one per rollout
    assert all(x.exit_code == 124 and "timed out after 1 seconds" in x.error for x in rows)
    assert all(x.duration_s < 15 for x in rows)  # killed near the 1 s timeout, not after 30 s
    boxes = [s for s in r.state.sandboxes.values() if s.timeouts]
    assert len(boxes) == 2 and all(s.timeouts == 1 for s in boxes)
    timed_out = [e for e in r.of("sandbox_command_finished") if e.timed_out]
    assert len(timed_out) == 2 and all(e.exit_code == 124 and "sleep 30" in e.command for e in timed_out)
    # each timeout counts once in the headline errors: as the tool call's, not again as the sandbox's
    assert r.state.errors_by_kind["tool:timeout"] == 2
    assert r.state.errors_by_kind["sandbox_timeout"] == 0
    # The model is told, and the rollout goes on to finish normally.
    results = _tool_results(r.state.run.jsonl_path)
    assert any(t.get("exit_code") == 124 and "timed out" in (t.get("error") or "") for t in results)
    assert r.state.accounting.completed == 1
    assert r.own_processes() == []  # killed by the timeout (duration above), then the rollout cleaned up
    r.assert_jsonl_complete()
    r.stop_clean()


def test_process_ignoring_sigterm_is_killed_by_timeout_and_by_operator(sim, tmp_path, run):
    cmd = "trap '' TERM; sleep 60; echo survived"
    tasks = write_tasks(tmp_path / "tasks.jsonl", [f"Run this command: {cmd}"])
    # 10 s (was 4 s): both rollouts must be inside the command at once; on a loaded box the second
    # one started it after the first one's 4 s timeout had already fired
    spec = fault_spec(sim, tmp_path, "--env.terminal_timeout", "10", total_steps=1, tasks=tasks)
    r = run(spec)
    r.until(
        lambda s: sum(1 for b in s.sandboxes.values() if b.running_command and "trap" in b.running_command) >= 2,
        60,
        "both rollouts running the TERM-proof command",
    )
    victim = next(b.task_id for b in r.state.sandboxes.values() if b.running_command and "trap" in b.running_command)
    # Operator kill: the command ignores SIGTERM, the kill still lands (SIGKILL after the grace).
    assert r.host.kill_sandbox(victim).result(timeout=15) is True
    r.until(lambda s: s.sandboxes.get(victim) is None or s.sandboxes[victim].state == "closed", 30, "victim closed")
    r.until_done_items(1, 90)  # the other rollout: the 10 s timeout fires and escalates to SIGKILL
    r.assert_alive()
    closed = r.of("sandbox_closed")
    assert any(e.task_id == victim and e.reason == "killed" for e in closed)
    timeouts = r.tool_rows(error_kind="timeout")
    assert timeouts and all(x.exit_code == 124 and x.duration_s < 45 for x in timeouts)  # well before the 60 s sleep
    texts = [json.dumps(t) for t in _tool_results(r.state.run.jsonl_path)]
    assert not any("survived" in t for t in texts)
    assert r.state.accounting.completed == 1
    assert r.own_processes() == []
    r.stop_clean()


def test_output_flood_is_bounded_everywhere(sim, tmp_path, run):
    cmd = "yes 0123456789abcdef | head -c 100000000; echo; echo flood-end"
    tasks = write_tasks(tmp_path / "tasks.jsonl", [f"Run this command: {cmd}"])
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    r = run(fault_spec(sim, tmp_path, "--env.terminal_timeout", "60", total_steps=1, group_size=1, tasks=tasks))
    r.until_done_items(1, 90)
    r.assert_alive()
    flood = [
        x for x in r.state.tool_rows if x.tool_name == "terminal" and x.exit_code == 0 and "0123456789" in x.result_head
    ]
    assert flood, [(x.tool_name, x.exit_code, x.result_head[:60]) for x in r.state.tool_rows]
    assert all(len(x.result_head) <= 200 for x in r.state.tool_rows)  # the UI rows stay small
    # 60 kB of output to the model can make the group longer than max_token_len: then it is in
    # dropped.jsonl (reason too_long), never kept; the bound on the output is the same either way.
    dropped = Path(r.state.run.jsonl_path).with_name("dropped.jsonl")
    written = _tool_results(r.state.run.jsonl_path) + (_dropped_tool_results(dropped) if dropped.exists() else [])
    flood_results = [t for t in written if "0123456789" in t.get("output", "")]
    assert len(flood_results) == 1
    out = flood_results[0]["output"]
    # The model gets a bounded head + tail with a notice, and the tail holds the end of the output.
    assert len(out) <= 60_000 and "output truncated" in out and out.rstrip().endswith("flood-end")
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    assert grown_mb < 400, f"memory grew {grown_mb:.0f} MB for a 100 MB flood"
    a = r.state.accounting
    assert a.completed + a.dropped.get("too_long", 0) == 1, a
    r.stop_clean()


def test_bounded_fork_bomb_in_bwrap_is_contained_and_reaped(sim, tmp_path, run):
    # 150 sleeps via a nested bash (the terminal tool refuses a bare '&' in the foreground).
    cmd = "bash -c 'for i in $(seq 1 150); do sleep 60 & done; wait'"
    tasks = write_tasks(tmp_path / "tasks.jsonl", [f"Run this command: {cmd}"])
    # the command can never end by itself (`wait` on 60 s sleeps): 10 s leaves a loaded machine
    # time to start all 150 (3 s did not), and the timeout still fires every time
    spec = fault_spec(
        sim,
        tmp_path,
        "--env.terminal_backend",
        "bwrap",
        "--env.terminal_timeout",
        "10",
        total_steps=1,
        group_size=1,
        tasks=tasks,
    )
    r = run(spec)
    peak = 0
    end = time.monotonic() + 120
    while time.monotonic() < end and not r.state.accounting.completed:
        r.pump()
        peak = max(peak, len(r.own_processes()))
        time.sleep(0.1)
    r.until_done_items(1, 120)
    assert r.state.run.terminal_backend == "bwrap"
    assert peak >= 100, (
        f"the bomb never ran (peak {peak} sandbox processes)",
        [(x.tool_name, x.exit_code, x.error, x.result_head) for x in r.state.tool_rows],
    )
    timeouts = r.tool_rows(error_kind="timeout")
    assert len(timeouts) == 1 and timeouts[0].exit_code == 124
    end = time.monotonic() + 30
    while r.own_processes() and time.monotonic() < end:
        time.sleep(0.1)
    assert r.own_processes() == [], "fork-bomb processes survived the timeout"
    r.assert_alive()
    r.stop_clean()
