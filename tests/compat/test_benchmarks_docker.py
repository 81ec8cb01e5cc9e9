"""A TerminalBench-style evaluation on the docker backend with a per-task image built in the
test from a rootfs (the base sandbox rootfs plus the task's file), through the console's
host against the embedded simulator. Oracles: the verifier's reward file (written inside
the task's container by test.sh), the engine's own list of containers, the results file."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.docker_support import docker, managed_containers, needs_engine, sandbox_image, task_image
from tests.helpers.benchmarks import assert_no_tb2_leftovers, results_by_task, tb2_evaluate_spec

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

# The task's input lives only in the task image (/app/data/in.txt): solved means the agent
# read it there and wrote the product; the verifier (test.sh) compares with the expected value.
SOLVE = "python3 -c \"a, b = open('/app/data/in.txt').read().split(); open('/app/answer.txt', 'w').write(str(int(a) * int(b)))\""
TEST_SH = (
    "#!/bin/bash\nmkdir -p /logs/verifier\n"
    'if [ "$(cat /app/answer.txt 2>/dev/null)" = "$(cat /app/data/expected.txt)" ]; '
    "then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n"
)


@needs_engine
def test_task_image_from_a_rootfs_scores_1_when_solved_on_docker(sim, host_runs, tmp_path: Path) -> None:
    sandbox_image()  # skip early, with the reason, when there is no base image
    before = set(managed_containers())
    tag = f"hermes-test-tb:{uuid.uuid4().hex[:8]}"
    task_image({"/app/data/in.txt": "6 7\n", "/app/data/expected.txt": "42\n"}, tag, tmp_path)
    try:
        tasks = tmp_path / "tasks.jsonl"
        rows = [
            {
                "task_name": "multiply",
                "category": "image",
                "instruction": f"Run this command: {SOLVE}",
                "docker_image": tag,
                "environment_tar": "",
                "tests_tar": "",
                "test_sh": TEST_SH,
            },
            {
                "task_name": "wrong",
                "category": "image",
                "instruction": "Run this command: echo 41 > /app/answer.txt",
                "docker_image": tag,
                "environment_tar": "",
                "tests_tar": "",
                "test_sh": TEST_SH,
            },
        ]
        tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
        results = tmp_path / "results.jsonl"
        flags = ("--env.dataset_name", str(tasks), "--env.task_timeout", "90")
        p = host_runs(tb2_evaluate_spec(sim, tmp_path, results, "docker", *flags))
        p.until(lambda s: s.status in ("finished", "failed", "stopped"), 150, "the evaluation to finish")
        assert p.state.status == "finished", f"{p.state.status}: {p.state.status_detail}"
        got = results_by_task(results)
        assert {k: v["reward"] for k, v in got.items()} == {"multiply": 1.0, "wrong": 0.0}, got
        assert all(not v.get("error") for v in got.values()), got
        # nothing left: overrides, sandboxes, containers
        assert_no_tb2_leftovers()
        assert set(managed_containers()) <= before
    finally:
        docker("rmi", "-f", tag, check=False)
