"""Smoke versions of every benchmark: tiny sizes, each runs and reports its figures
with the expected keys. Never timing assertions (machines are noisy); the
figures themselves live in BENCHMARKS.md / bench/results.json."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

FIGURE_KEYS = {"name", "value", "target", "unit", "op", "verdict"}


def _check(result: dict[str, Any], keys: Iterable[str], n_figures: int) -> None:
    missing = set(keys) - set(result)
    assert not missing, f"missing keys {sorted(missing)} in {sorted(result)}"
    json.dumps(result, default=str)  # results.json must be able to hold it
    assert len(result["figures"]) == n_figures
    for fig in result["figures"]:
        assert FIGURE_KEYS <= set(fig)
        assert fig["verdict"] in ("PASS", "MISS", "n/a")
    assert len(result["load_average_before"]) == 3


def test_common_helpers(tmp_path: Path) -> None:
    from bench.common import figure, pct, write_results

    assert pct([5, 1, 3, 2, 4], 50) == 3
    assert pct(range(1, 101), 99) == 99
    assert figure("x", 0.5, 1.0, "s", False)["verdict"] == "PASS"
    assert figure("x", 0.5, 1.0, "x", True)["verdict"] == "MISS"
    assert figure("x", None, 1.0, "x", True)["verdict"] == "n/a"
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"sim": {"a": 1}}))
    write_results("p9", {"b": 2}, path)
    assert json.loads(path.read_text()) == {"sim": {"a": 1}, "p9": {"b": 2}}


def test_four_turn_tasks_are_compute_tasks(tmp_path: Path) -> None:
    from bench.common import FOUR_TOOL_TURN_TASKS, four_turn_tasks_file
    from hermes_console.sim.scripts import Compute, find_script

    rows = [json.loads(x) for x in Path(four_turn_tasks_file(str(tmp_path))).read_text().splitlines()]
    assert {r["task_id"] for r in rows} == set(FOUR_TOOL_TURN_TASKS)
    for row in rows:  # inspect, compute, write, verify + answer: exactly 4 tool turns when solved
        script = find_script(row["prompt"], row["task_id"])
        assert script is not None and isinstance(script.solve, Compute) and script.verify


def test_synthetic_events_replay_through_the_reducer() -> None:
    from bench.synth_env import events_per_rollout, synthetic_events
    from hermes_console.runtime.state import ConsoleState

    stream = synthetic_events(16, turns=2, group_size=4, concurrent=8)
    state = ConsoleState()
    state.apply_all(stream)
    assert state.rollouts_finished == 16
    assert sum(1 for e in stream if e.kind.startswith(("rollout_", "turn_", "tool_call_"))) == 16 * events_per_rollout(
        2
    )


def test_p1_overhead_smoke() -> None:
    from bench import p1_overhead

    thresholds = gc.get_threshold()
    r = p1_overhead.run(True, groups=1, pairs=1)
    _check(r, ["throughput_ratio", "bare_groups_per_s", "console_groups_per_s", "ui_thread_cpu_share_median"], 1)
    # the console side ran with the console process's GC setup, and left none of it behind
    assert r["console_gc"].startswith("as run_console")
    assert gc.get_threshold() == thresholds and gc.get_freeze_count() == 0
    assert len(r["bare_groups_per_s"]) == len(r["console_groups_per_s"]) == 1
    # CPU per group of each runner over the same span (a real rollout costs ms of CPU)
    assert r["bare_cpu_ms_per_group_median"] > 1 and r["console_cpu_ms_per_group_median"] > 1
    shown = r["bare_cpu_ms_per_group_median"] / r["console_cpu_ms_per_group_median"]  # of the rounded medians
    assert abs(r["cpu_per_group_ratio"] - shown) < 0.01


def test_p2_efficiency_smoke() -> None:
    from bench import p2_efficiency

    r = p2_efficiency.run(True, rollouts=4, latency_ms=5.0, repeats=1, tool_pool=8)
    _check(r, ["efficiency", "ideal_wall_s", "achieved_wall_s", "cpu_ms_per_rollout", "achieved_rollouts_per_s"], 1)
    assert r["runs"]["check"]["five_llm_calls"] == 4  # exactly 4 tool turns + a final answer
    # CPU per rollout split by event loop / other threads (tools) / sandbox processes.
    assert {"loop_thread_ms", "other_threads_ms", "bash_children_ms", "total_ms"} <= set(r["cpu_ms_per_rollout"])
    assert r["chat_path"].startswith("lean")
    # the headline batch runs without the bench's probe; the CPU split comes from a probed one
    assert len(r["runs"]["concurrent_walls_s"]) == len(r["runs"]["concurrent_walls_probed_s"]) == 1
    assert r["efficiency_probed_batch"] > 0


def test_p2_floor_smoke() -> None:
    """The least runtime runs the same tasks to the end: five model calls each (checked inside)
    and every task solved, so it ran the same commands the env's rollouts run."""
    from bench import p2_floor

    r = p2_floor.run(True, rollouts=4, latency_ms=5.0, repeats=1)
    _check(r, ["floor_efficiency", "env_efficiency", "env_share_of_floor", "floor_cpu_ms_per_rollout"], 1)
    assert r["floor_mean_reward"] == 1.0
    assert len(r["runs"]["floor_batch"]) == len(r["runs"]["env_batch"]) == 1
    assert r["floor_cpu_ms_per_rollout"]["shells_and_commands"] > 0


def test_p2_sandboxes_get_the_fixed_path_and_the_host_keeps_its_own(tmp_path, monkeypatch) -> None:
    """The bench's batches run their sandboxes with a bwrap sandbox's PATH (a pyenv shim first on
    the host's PATH made python3 ~8x dearer on the bench box); the host's PATH is back after."""
    import os

    from bench.p2_efficiency import SANDBOX_PATH, _sandbox_path
    from environments.sandboxes.local import LocalSandbox
    from environments.sandboxes.settings import SandboxSettings

    host = "/opt/shims:" + SANDBOX_PATH
    monkeypatch.setenv("PATH", host)

    def sandbox_path(name: str) -> str:
        box = LocalSandbox(name, SandboxSettings(sandbox_root=tmp_path))
        try:
            return box.execute('printf %s "$PATH"', 10).output
        finally:
            box.cleanup()

    with _sandbox_path(SANDBOX_PATH):
        assert sandbox_path("fixed") == SANDBOX_PATH
    assert os.environ["PATH"] == host
    assert sandbox_path("host") == host


def test_chat_cpu_smoke() -> None:
    from bench import chat_cpu

    r = chat_cpu.run(calls=4, rounds=1, concurrency=2)
    assert r["cpu_ms_per_call_lean"] > 0 and r["cpu_ms_per_call_openai_client"] > 0
    assert len(r["runs"]["lean_ms"]) == len(r["runs"]["openai_client_ms"]) == 1


def test_p3_responsiveness_smoke() -> None:
    from bench import p3_responsiveness

    r = p3_responsiveness.run(True, rollouts=16, samples=1, turn_sleep_s=0.05)
    _check(r, ["events_per_s", "pause_ack_ms_p50", "pause_ack_ms_p99", "ui_tick_ms_p99", "event_queue_max_depth"], 3)
    assert r["samples"] + r["missed_samples"] == 1


def test_p4_memory_smoke() -> None:
    from bench import p4_memory

    r = p4_memory.run(True, rollouts=1_200)
    _check(r, ["rss_growth_mb", "rss_mb_at", "events_applied"], 1)
    assert {"1000", "1200"} <= set(r["rss_mb_at"])


@pytest.mark.timeout(240)
def test_p5_startup_smoke() -> None:
    from bench import p5_startup

    r = p5_startup.run(True, runs=1, warm=False)
    _check(r, ["first_frame_s", "first_rollout_finished_s", "samples"], 1)
    assert r["samples"][0]["exit_code"] == 0


def test_scaling_smoke() -> None:
    from bench import scaling

    r = scaling.run(True, levels=[4], seconds=0.3, turn_sleep_s=0.02)
    _check(r, ["curve", "reducer_only_us_per_event"], 0)
    assert r["curve"][0]["concurrency"] == 4
    assert {"rollouts_per_s", "ideal_rollouts_per_s", "cpu_us_per_event", "events_per_s"} <= set(r["curve"][0])


def test_main_table_and_selection() -> None:
    from bench.__main__ import BENCHES, main, table

    fig = {"name": "P9 thing", "value": 1.5, "target": 1.0, "unit": "x", "op": ">=", "verdict": "PASS"}
    text = table({"p9": {"figures": [fig]}, "p8": {"error": "boom", "figures": []}})
    assert "P9 thing" in text and "PASS" in text and "ERROR" in text
    assert {k for k, _, _ in BENCHES} == {"sim", "p1", "p2", "p2floor", "p3", "p4", "p5", "scaling", "peers"}
    with pytest.raises(SystemExit):
        main(["--only", "nope"])


@pytest.mark.timeout(300)
def test_p7_peers_smoke() -> None:
    """The two runners with moving parts of their own: atroposlib serve (real run-api, a trainer
    pulling batches) and a headless host with a console attached from another process."""
    from bench import p7_peers

    runners = ["atroposlib serve", "hermes-console headless + attach"]
    r = p7_peers.run(True, runners=runners)
    _check(r, ["rows", "group_size", "trainer_batch_size"], 0)
    assert [row["runner"] for row in r["rows"]] == runners
    for row in r["rows"]:
        assert row["groups"] == 2 and row["rollouts_per_s"] > 0
        assert row["cpu_ms_per_rollout"]["process"] > 0
    assert r["rows"][0]["trainer_sequences"] == [2 * 4]  # every group reached the trainer through run-api
    assert r["rows"][1]["cpu_ms_per_rollout"]["attached_console_process"] is not None
    assert "hermes-console headless + attach" in p7_peers.table(r)


def test_tokens_cpu_smoke() -> None:
    from bench import tokens_cpu

    r = tokens_cpu.run(rollouts=3, rounds=2)
    assert r["same_tokens_and_masks"] is True
    assert r["whole_ms_per_rollout"] > 0 and r["pieces_ms_per_rollout"] > 0


def test_trend_line_cpu_smoke() -> None:
    from bench import trend_line_cpu

    r = trend_line_cpu.run(rounds=2, redraws=3, points=30, width=20, height=2)
    assert r["same_cells"] is True and r["samples_per_side"] == 6
    assert r["textual_sparkline_ms_per_redraw"] > 0 and r["trend_line_ms_per_redraw"] > 0


def test_sandbox_burst_smoke() -> None:
    from bench import sandbox_burst

    r = sandbox_burst.main(
        ["--threads", "4", "--commands", "2", "--rounds", "1", "--rev", "HEAD", "--command", "sleep 0.1"]
    )  # a shallow clone has HEAD only
    for row in ("4 threads", "1 threads"):
        for side in ("old", "new"):
            m = r[row]["median"][side]
            assert m["host_cpu_ms"] > 0 and m["wall_s"] > 0, (row, side, m)
