"""The TerminalBench-2 / TBLite eval envs: upstream import paths, and an evaluate run on the
offline fixture through the console's host against the embedded simulator, on bwrap."""

from __future__ import annotations

import base64
import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest

from tests.helpers.benchmarks import assert_no_tb2_leftovers, results_by_task, tb2_evaluate_spec
from tests.runtime.runtime_helpers import wait_no_children

pytestmark = pytest.mark.slow


def test_envs_import_at_the_upstream_paths_with_upstream_defaults():
    from environments.benchmarks.tblite.tblite_env import TBLiteEvalEnv
    from environments.benchmarks.terminalbench_2.terminalbench2_env import TerminalBench2EvalEnv

    assert issubclass(TBLiteEvalEnv, TerminalBench2EvalEnv)
    assert (TerminalBench2EvalEnv.name, TBLiteEvalEnv.name) == ("terminal-bench-2", "tblite")
    tb2, lite = TerminalBench2EvalEnv.env_config_cls(), TBLiteEvalEnv.env_config_cls()
    assert (tb2.dataset_name, tb2.task_timeout, tb2.test_timeout, tb2.max_concurrent_tasks) == (
        "NousResearch/terminal-bench-2",
        1800,
        180,
        8,
    )
    assert (tb2.force_build, tb2.eval_concurrency, tb2.task_filter, tb2.skip_tasks) == (False, 0, None, None)
    assert (lite.dataset_name, lite.task_timeout) == ("NousResearch/openthoughts-tblite", 1200)
    config, _ = TerminalBench2EvalEnv.config_init()
    assert (config.max_agent_turns, config.agent_temperature, config.terminal_timeout) == (60, 0.6, 300)
    assert Path(config.dataset_name).is_file()  # the offline fixture, no network


def test_reward_parsing_and_safe_unpacking(tmp_path):
    from environments.benchmarks.terminalbench_2.tasks import parse_reward, unpack_b64_tar

    assert [parse_reward("1\n", 1), parse_reward("0", 0), parse_reward("0.25", 1)] == [1.0, 0.0, 0.25]
    assert [parse_reward("garbage", 0), parse_reward(None, 0), parse_reward("", 2)] == [1.0, 1.0, 0.0]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("../escape.txt")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(ValueError, match="cannot unpack"):
        unpack_b64_tar(base64.b64encode(buf.getvalue()).decode(), tmp_path / "dest", "tests_tar")
    assert not (tmp_path / "escape.txt").exists()
    with pytest.raises(ValueError, match="not valid base64"):
        unpack_b64_tar("!!not base64!!", tmp_path / "dest", "tests_tar")


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap not installed")
def test_terminalbench_fixture_evaluates_on_bwrap(sim, host_runs, tmp_path):
    results = tmp_path / "results.jsonl"
    p = host_runs(tb2_evaluate_spec(sim, tmp_path, results, "bwrap", "--env.task_timeout", "20"))
    p.until(lambda s: s.status in ("finished", "failed", "stopped"), 120, "the evaluation to finish")
    assert p.state.status == "finished", f"{p.state.status}: {p.state.status_detail}"

    # streamed: one line per task, written as each finished (the timed-out task last)
    rows = results_by_task(results)
    assert len(results.read_text().splitlines()) == 4
    assert {k: v["reward"] for k, v in rows.items()} == {
        "answer-42": 1.0,
        "shout": 1.0,
        "wrong-answer": 0.0,
        "slow-task": 0.0,
    }
    assert rows["slow-task"]["timed_out"] and rows["slow-task"]["error"] == "timeout (20s)"
    assert list(rows)[-1] == "slow-task"  # first in the dataset, last to finish
    assert all(
        not rows[k].get("timed_out") and rows[k]["turns_used"] > 0 for k in ("answer-42", "shout", "wrong-answer")
    )

    # the console saw each task as a rollout (eval progress, drill-down)
    finished = {e.rollout_id: e for e in p.of("rollout_finished")}
    assert sorted(e.reward for e in finished.values()) == [0.0, 0.0, 1.0, 1.0]
    assert {e.rollout_id for e in p.of("rollout_started")} == set(finished)

    [metrics_file] = list(tmp_path.glob("*/evals/*/metrics.json"))
    metrics = json.loads(metrics_file.read_text())["results"]["all"]
    assert metrics["eval/pass_rate"] == 0.5 and metrics["eval/total_tasks"] == 4
    assert metrics["eval/timed_out_tasks"] == 1
    [samples] = list(tmp_path.glob("*/evals/*/samples.jsonl"))  # evaluate_log's own copy
    assert len(samples.read_text().splitlines()) == 4
    assert (metrics["eval/pass_rate_basics"], metrics["eval/pass_rate_files"], metrics["eval/pass_rate_system"]) == (
        1.0,
        0.0,
        0.0,
    )

    # nothing left behind: overrides, sandboxes, processes (the `sleep 45` included)
    assert_no_tb2_leftovers()
    assert wait_no_children(20) == []


def test_force_build_is_refused_with_the_reason():
    import asyncio

    from environments.benchmarks.terminalbench_2.terminalbench2_env import TerminalBench2EvalEnv

    config, servers = TerminalBench2EvalEnv.config_init()
    env = TerminalBench2EvalEnv(config.model_copy(update={"force_build": True}), servers, testing=True)
    with pytest.raises(ValueError, match="force_build=True is not supported"):
        asyncio.run(env.setup())


def test_local_backend_is_refused_because_task_paths_are_absolute():
    import asyncio

    from environments.benchmarks.terminalbench_2.terminalbench2_env import TerminalBench2EvalEnv

    config, servers = TerminalBench2EvalEnv.config_init()
    env = TerminalBench2EvalEnv(config.model_copy(update={"terminal_backend": "local"}), servers, testing=True)
    with pytest.raises(ValueError, match="terminal_backend 'local' cannot run TerminalBench tasks"):
        asyncio.run(env.setup())


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap not installed")
def test_cancelling_an_evaluation_cleans_up_every_task(sim, tmp_path):
    """Ctrl+C / stop mid-run: the running tasks (a `sleep 45` among them) end, their sandboxes close."""
    import asyncio
    import time

    from environments.atropos_compat import DEFAULT_TIMEOUT_S
    from environments.benchmarks.terminalbench_2.terminalbench2_env import TerminalBench2EvalEnv
    from environments.hermes_base_env import APIServerConfig

    results = tmp_path / "results.jsonl"
    config, _ = TerminalBench2EvalEnv.config_init()
    config = config.model_copy(update={"terminal_backend": "bwrap", "results_path": str(results)})
    servers = [
        APIServerConfig(
            base_url=f"{sim.base_url}/v1",
            model_name="hermes-sim",
            api_key="x",
            server_type="openai",
            health_check=False,
            timeout=DEFAULT_TIMEOUT_S,
        )
    ]
    env = TerminalBench2EvalEnv(config, servers)

    def lines() -> int:
        return len(results.read_text().splitlines()) if results.exists() else 0

    async def run() -> None:
        await env.setup()
        task = asyncio.ensure_future(env.evaluate())
        deadline = time.monotonic() + 60
        while lines() < 3 and time.monotonic() < deadline and not task.done():
            await asyncio.sleep(0.1)
        assert lines() == 3 and not task.done()  # the three quick tasks are in; `sleep 45` still runs
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    assert_no_tb2_leftovers()
    assert wait_no_children(20) == []


def test_console_loader_resolves_each_benchmark_package_to_its_env():
    from environments.benchmarks.tblite.tblite_env import TBLiteEvalEnv
    from environments.benchmarks.terminalbench_2.terminalbench2_env import TerminalBench2EvalEnv
    from hermes_console.runtime.loader import load_env_class

    assert load_env_class("environments.benchmarks.terminalbench_2") is TerminalBench2EvalEnv
    assert load_env_class("environments.benchmarks.tblite") is TBLiteEvalEnv
