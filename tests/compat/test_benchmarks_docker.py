"""A TerminalBench-style evaluation on the docker backend with a per-task image built in the
test from a rootfs (the base sandbox rootfs plus the task's file), through the console's
host against the embedded simulator. Oracles: the verifier's reward file (written inside
the task's container by test.sh), the engine's own list of containers, the results file."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from hermes_console.runtime.config import RunSpec
from tests.docker_support import docker, managed_containers, needs_engine, sandbox_image, task_image
from tests.runtime.runtime_helpers import Pump

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

# The task's input lives only in the task image (/app/data/in.txt): solved means the agent
# read it there and wrote the product; the verifier (test.sh) compares with the expected value.
SOLVE = "python3 -c \"a, b = open('/app/data/in.txt').read().split(); open('/app/answer.txt', 'w').write(str(int(a) * int(b)))\""
TEST_SH = (
    "#!/bin/bash\nmkdir -p /logs/verifier\n"
    'if [ "$(cat /app/answer.txt 2>/dev/null)" = "$(cat /app/data/expected.txt)" ]; '
    "then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n"
)


@pytest.fixture
def host_runs():
    from hermes_console.runtime.host import RuntimeHost

    hosts: list[Any] = []

    def start(spec: RunSpec) -> Pump:
        host = RuntimeHost(spec, exit_when_finished=True)
        hosts.append(host)
        host.start()
        return Pump(host)

    yield start
    for host in hosts:
        host.stop(0.5).result(timeout=30)
        host.join(10)


@needs_engine
def test_task_image_from_a_rootfs_scores_1_when_solved_on_docker(sim, host_runs, tmp_path: Path) -> None:
    from environments import sandboxes
    from environments.task_overrides import list_task_env_overrides

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
        spec = RunSpec(
            env="environments.benchmarks.terminalbench_2",
            mode="evaluate",
            runs_dir=str(tmp_path),
            flags=[
                "--openai.base_url",
                f"{sim.base_url}/v1",
                "--env.terminal_backend",
                "docker",
                "--env.dataset_name",
                str(tasks),
                "--env.task_timeout",
                "90",
                "--env.results_path",
                str(results),
            ],
        )
        p = host_runs(spec)
        p.until(lambda s: s.status in ("finished", "failed", "stopped"), 150, "the evaluation to finish")
        assert p.state.status == "finished", f"{p.state.status}: {p.state.status_detail}"
        got: dict[str, dict[str, Any]] = {}
        for line in results.read_text().splitlines():
            row = json.loads(line)
            got[row["task_name"]] = row
        assert {k: v["reward"] for k, v in got.items()} == {"multiply": 1.0, "wrong": 0.0}, got
        assert all(not v.get("error") for v in got.values()), got
        # nothing left: overrides, sandboxes, containers
        assert list_task_env_overrides() == {}
        assert [s for s in sandboxes.list_sandboxes() if s.task_id.startswith("tb2-")] == []
        assert set(managed_containers()) <= before
    finally:
        docker("rmi", "-f", tag, check=False)
