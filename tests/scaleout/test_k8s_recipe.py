"""deploy/k8s/hermes-hosts.yaml, run as Kubernetes would run it but as local processes: the
pod's env list (with the test's values for the site-specific ones), ``JOB_COMPLETION_INDEX``
as the Job controller sets it, ``$(VAR)`` expanded in command/args as the kubelet does.
Two pods against a real run-api and a simulator: each takes its shard (from the environment,
no --shard), their items are disjoint, both listen (token) and write listen.json, the
trainer gets every group once."""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from hermes_console_dev.fake_trainer import TrainerRun, run_trainer
from tests.helpers.waits import wait_for
from tests.scaleout.scaleout_helpers import VENV_BIN, child_env

pytestmark = pytest.mark.timeout(200)
RECIPE = Path(__file__).resolve().parents[2] / "deploy" / "k8s" / "hermes-hosts.yaml"
PODS = 2
STEPS = 3
SCHEDULER_VARS = (
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_COUNT",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "JOB_COMPLETION_INDEX",
    "HERMES_SHARD_COUNT",
    "RANK",
    "WORLD_SIZE",
)


def _docs() -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in yaml.safe_load_all(RECIPE.read_text())}


def expand(text: str, env: dict[str, str]) -> str:
    """The kubelet's $(VAR) expansion: defined variables are replaced, $$ escapes, others stay."""
    return re.sub(
        r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
        lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)),
        text,
    )


def test_the_recipe_is_consistent() -> None:
    docs = _docs()
    job, svc = docs["Job"], docs["Service"]
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    [container] = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert spec["completionMode"] == "Indexed"
    assert int(env["HERMES_SHARD_COUNT"]) == spec["completions"] == spec["parallelism"]
    assert pod["subdomain"] == svc["metadata"]["name"] and svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == {"job-name": job["metadata"]["name"]}
    args = container["args"]
    assert int(args[args.index("--drain-deadline") + 1]) < pod["terminationGracePeriodSeconds"]
    assert "--listen-token-file" in args  # 0.0.0.0 without a token is refused by the host
    assert expand("$(A)/$(B)/$$(A)", {"A": "x"}) == "x/$(B)/$(A)"


def _pod(index: int, tmp_path: Path, values: dict[str, str]) -> subprocess.Popen:
    [container] = _docs()["Job"]["spec"]["template"]["spec"]["containers"]
    env: dict[str, str] = {}
    for item in container["env"]:
        name = item["name"]
        env[name] = values.get(name, item.get("value"))  # the site's values (a kustomize patch)
    env["POD_NAME"] = f"hermes-hosts-{index}-x7k2p"  # the downward API
    env["JOB_COMPLETION_INDEX"] = str(index)  # the Job controller
    argv = [expand(a, env) for a in [*container["command"], *container["args"]]]
    assert argv[0] == "hermes-console"
    argv[0] = str(VENV_BIN / "hermes-console")
    base = {k: v for k, v in child_env().items() if k not in SCHEDULER_VARS}
    log = open(tmp_path / f"pod-{index}.log", "w")
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env={**base, **env, "COLUMNS": "250"})


def _events(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as fp:
        return [json.loads(line) for line in fp if line.strip()]


def test_two_pods_of_the_indexed_job_take_disjoint_shards(tmp_path: Path, sims, run_api) -> None:
    sim = sims(latency_ms=40.0)
    (tmp_path / "token").write_text("k8s-recipe-token-42\n")
    runs = tmp_path / "runs"
    values = {
        "HERMES_SHARD_COUNT": str(PODS),
        "RUN_API_URL": run_api.url,
        "INFERENCE_URL": f"{sim.base_url}/v1",
        "HERMES_LISTEN": "127.0.0.1:0",
        "HERMES_TOKEN_FILE": str(tmp_path / "token"),
        "HERMES_RUNS_DIR": str(runs),
        "HERMES_PROGRESS_EVERY": "1",
        "HERMES_TOTAL_STEPS": str(STEPS),
    }
    result: dict[str, TrainerRun] = {}

    def trainer() -> None:
        result["run"] = asyncio.run(run_trainer(run_api.url, steps=STEPS, batch_size=8, deadline_s=120, reset=False))

    thread = threading.Thread(target=trainer, daemon=True)
    pods = [_pod(i, tmp_path, values) for i in range(PODS)]
    try:
        # Both pods loaded their env and wait for a trainer before it starts. Started at once,
        # a pod that loaded seconds earlier on a loaded box could fill the trainer's 3 steps
        # alone, and the other one exit with no item (seen in CI: [[6 items], []]).
        logs_of = [tmp_path / f"pod-{i}.log" for i in range(PODS)]
        assert wait_for(lambda: all("status=running" in log.read_text() for log in logs_of), within=120), [
            log.read_text()[-2000:] for log in logs_of
        ]
        thread.start()
        thread.join(150)
        assert "run" in result and len(result["run"].batches) == STEPS
        codes = [p.wait(90) for p in pods]  # the trainer has its steps: every host exits by itself
    finally:
        for p in pods:
            if p.poll() is None:
                p.kill()
                p.wait(10)
    logs = [(tmp_path / f"pod-{i}.log").read_text() for i in range(PODS)]
    assert codes == [0] * PODS, (codes, logs)  # each index of the Job completes
    items: list[list[str]] = []
    for i in range(PODS):
        pod_dir = runs / f"hermes-hosts-{i}-x7k2p"
        events = _events(pod_dir / "events.jsonl.gz")
        [configured] = [e for e in events if e["kind"] == "run_configured"]
        assert configured["shard"] == f"{i}/{PODS} (JOB_COMPLETION_INDEX/HERMES_SHARD_COUNT)", configured
        assert f"shard={i}/{PODS}" in logs[i]  # the progress lines in `kubectl logs` say it too
        [listen] = list(pod_dir.glob("*/listen.json"))
        assert re.fullmatch(r"127\.0\.0\.1:\d+", json.loads(listen.read_text())["address"])
        assert "listening on 127.0.0.1:" in logs[i]
        items.append([e["item_summary"] for e in events if e["kind"] == "item_received"])
    # Host i's j-th item is item k = 2j + i of the env's sequence; the first 22 (k < 22) are one
    # epoch, a permutation of the env's 22 tasks: the hosts' first 11 each must not meet.
    assert all(items)
    assert not set(items[0][:11]) & set(items[1][:11]), items
    hashes = [json.dumps(g["tokens"]) for b in result["run"].batches for g in b]
    assert len(hashes) == len(set(hashes))
