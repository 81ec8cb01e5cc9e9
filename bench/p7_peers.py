"""Peer table: every way an operator can run terminal_tasks, side by side in one run.

    python -m bench.p7_peers [--quick] [--latencies 20,300,2000] [--rounds 1] [--runners a,b] [--no-write]

Same env (terminal_tasks, group size 4), same simulator process at a fixed latency per call;
each run is a fresh process of its own (``bench/peers_worker.py``), as an operator starts it:
- **atroposlib process**: ``BaseEnv.process_manager``, what atroposlib's ``process`` CLI runs
  (one group at a time: it has no concurrency setting), no observer;
- **atroposlib serve**: ``BaseEnv.env_manager``, what its ``serve`` CLI runs, at its default
  ``max_num_workers`` (8 per server), against a real ``run-api`` (atroposlib's FastAPI app on
  loopback, ``tests/helpers/run_api.py``) with a trainer pulling batches of 16 sequences
  (``hermes_console_dev.fake_trainer``); the run-api and the trainer live in this process;
- **hermes-console serve with UI** / **process with UI**: ``RuntimeHost`` at its default concurrency
  with the Textual console in the same process (headless Textual, 160x45); serve against
  the same run-api and trainer;
- **hermes-console headless**: ``RuntimeHost`` + the headless progress printer (``--headless``);
- **hermes-console headless + attach**: the same with ``--listen unix:PATH`` and a console
  attached from another process (``hermes-console attach``'s ``FleetConsoleApp``, headless
  160x45); the host takes its first item once the console is connected.

Each runner does exactly N groups. Reported per runner and latency: rollouts/s over [first
item, N-th group sent] and CPU per rollout over the same window, split into the env process
(env loop thread, main thread = the UI when in-process, other threads = tool pool, listener)
and its sandbox processes (reaped children + live machines read before cleanup); for attach
also the attached console process. Order alternates per latency and round; medians over
rounds. The simulator, run-api and trainer are not counted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import REPO, SimProcess, bench_tmpdir, load_average, median, publish, rnd

SECTION = "p7_peers"
GROUP_SIZE = 4
TRAINER_BATCH_SIZE = 16  # sequences per trainer step: 4 groups (a user's small batch)
QUICK_BATCH_SIZE = 8
RUNNERS = (
    "atroposlib process",
    "atroposlib serve",
    "hermes-console serve with UI",
    "hermes-console process with UI",
    "hermes-console headless",
    "hermes-console headless + attach",
)
CPU_KEYS = (
    "process",
    "of_it_env_loop",
    "of_it_main_thread",
    "of_it_other_threads",
    "sandbox_children",
    "attached_console_process",
)


def groups_for(runner: str, latency_ms: float, quick: bool) -> int:
    """Enough groups for a few waves at the runner's concurrency, a multiple of the trainer's
    batch (4 groups) so a serve trainer takes every group."""
    if quick:
        return 2  # with a trainer batch of 2 groups (QUICK_BATCH_SIZE)
    if runner == "atroposlib process":  # sequential: fewer groups, the rate is per group anyway
        return 8 if latency_ms <= 50 else 4
    return 24 if latency_ms <= 500 else 16


def _result_of(out: Path, proc: subprocess.Popen[bytes], what: str) -> dict[str, Any]:
    text = out.read_text() if out.exists() else ""
    line = next((ln for ln in reversed(text.splitlines()) if ln.startswith("RESULT ")), None)
    if line is None:
        err = out.with_suffix(".err")
        tail = err.read_text()[-3000:] if err.exists() else ""
        raise RuntimeError(f"{what} gave no result (exit {proc.returncode}):\n{tail}")
    return dict(json.loads(line[len("RESULT ") :]))


def _spawn(argv: list[str], out: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with open(out, "w") as fo, open(out.with_suffix(".err"), "w") as fe:
        return subprocess.Popen(
            [sys.executable, "-m", "bench.peers_worker", *argv], stdout=fo, stderr=fe, cwd=str(REPO), env=env
        )


def _wait(proc: subprocess.Popen[bytes], timeout: float) -> None:
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def _trainer(api_url: str, groups: int, batch_size: int, timeout: float, out: dict[str, Any]) -> threading.Thread:
    """A trainer pulling batches until it has every group (on its own thread and loop)."""
    import asyncio

    from hermes_console_dev.fake_trainer import run_trainer

    steps = groups * GROUP_SIZE // batch_size

    def pull() -> None:
        run = asyncio.run(run_trainer(api_url, steps, batch_size, deadline_s=timeout))
        out["trainer_batches"], out["trainer_sequences"] = len(run.batches), run.sequences

    t = threading.Thread(target=pull, name="bench-trainer", daemon=True)
    t.start()
    return t


def run_one(
    runner: str, sim_url: str, groups: int, tmp: str, timeout: float = 900.0, batch_size: int = TRAINER_BATCH_SIZE
) -> dict[str, Any]:
    """One run of ``runner`` in its own process; its RESULT (raises when it had none)."""
    d = Path(tmp)
    d.mkdir(parents=True, exist_ok=True)
    argv = [runner, "--sim", sim_url, "--groups", str(groups), "--tmp", str(d), "--timeout", str(timeout)]
    out = d / "worker.out"
    if "serve" in runner:
        from tests.helpers.run_api import TrainerAPI

        pulled: dict[str, Any] = {}
        with TrainerAPI() as api:
            trainer = _trainer(api.url, groups, batch_size, timeout, pulled)
            proc = _spawn([*argv, "--api", api.url], out)
            _wait(proc, timeout)
            trainer.join(30)
        # what the trainer took from run-api: proof the groups went through the trainer API
        return {**_result_of(out, proc, runner), **pulled}
    if runner.endswith("attach"):
        return _with_attach(argv, d, out, timeout)
    proc = _spawn(argv, out)
    _wait(proc, timeout)
    return _result_of(out, proc, runner)


def _with_attach(argv: list[str], d: Path, out: Path, timeout: float) -> dict[str, Any]:
    sock, ready = d / "host.sock", d / "attached"
    host = _spawn([*argv, "--listen", f"unix:{sock}", "--ready-file", str(ready)], out)
    console: subprocess.Popen[bytes] | None = None
    try:
        end = time.monotonic() + 120
        while not sock.exists() and host.poll() is None and time.monotonic() < end:
            time.sleep(0.05)
        console = _spawn(["attach", "--listen", f"unix:{sock}", "--ready-file", str(ready)], d / "attach.out")
        _wait(host, timeout)
    finally:
        if console is not None:
            Path(f"{ready}.stop").touch()  # the console detaches and reports
            _wait(console, 60)
        if host.poll() is None:
            host.kill()
            host.wait(10)
    result = _result_of(out, host, "headless host with --listen")
    if console is not None:
        result["attach"] = _result_of(d / "attach.out", console, "attached console")
    return result


def run(
    quick: bool = False,
    *,
    latencies: list[float] | None = None,
    rounds: int = 1,
    runners: list[str] | None = None,
) -> dict[str, Any]:
    latencies = latencies or ([20.0] if quick else [20.0, 300.0, 2000.0])
    chosen = list(runners or RUNNERS)
    tmp = bench_tmpdir("p7")
    batch = QUICK_BATCH_SIZE if quick else TRAINER_BATCH_SIZE
    timeout = 180.0 if quick else 900.0  # per run; quick: inside the smoke test's own bound
    load_before = load_average()
    rows: list[dict[str, Any]] = []
    for li, latency in enumerate(latencies):
        seen: dict[str, list[dict[str, Any]]] = {r: [] for r in chosen}
        with SimProcess(latency, solve_rate=0.6) as sim:
            if not quick:  # sandbox root, page cache of the imports: the first run pays none of it
                run_one("atroposlib process", sim.base_url, 1, os.path.join(tmp, f"warm-{latency:g}"))
            for r in range(rounds):
                order = chosen if (li + r) % 2 == 0 else list(reversed(chosen))
                for runner in order:
                    load = load_average()
                    tag = f"{latency:g}ms-r{r}-{RUNNERS.index(runner) if runner in RUNNERS else runner}"
                    groups = groups_for(runner, latency, quick)
                    m = run_one(runner, sim.base_url, groups, os.path.join(tmp, tag), timeout, batch)
                    m["load_before"], m["load_after"] = load, load_average()
                    c = m["cpu_ms_per_rollout"]
                    print(  # progress: a long run under load shows what it has so far
                        f"p7 {latency:g} ms {runner}: {m['rollouts_per_s']:.3f} rollouts/s, "
                        f"{c['process']:.1f} + {c['sandbox_children']:.1f} ms/rollout, load {load} -> {m['load_after']}",
                        file=sys.stderr,
                        flush=True,
                    )
                    seen[runner].append(m)
        for runner, runs in seen.items():
            rows.append(_row(runner, latency, runs))
    return {
        "rows": rows,
        "group_size": GROUP_SIZE,
        "trainer_batch_size": batch,
        "rounds": rounds,
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "figures": [],
        "quick": quick,
    }


def _row(runner: str, latency: float, runs: list[dict[str, Any]]) -> dict[str, Any]:
    cpu: dict[str, float | None] = {}
    for key in CPU_KEYS:
        values = [m["cpu_ms_per_rollout"][key] for m in runs if m["cpu_ms_per_rollout"].get(key) is not None]
        cpu[key] = rnd(median(values), 1) if values else None
    return {
        "latency_ms": latency,
        "runner": runner,
        "groups": runs[0]["groups"],
        "runs": len(runs),
        "rollouts_per_s": rnd(median([m["rollouts_per_s"] for m in runs]), 3),
        "cpu_ms_per_rollout": cpu,
        "loads": [[m["load_before"], m["load_after"]] for m in runs],
        "trainer_sequences": [m["trainer_sequences"] for m in runs if "trainer_sequences" in m] or None,
        "other_threads_by_name": [m.get("other_threads_ms_per_rollout_by_name") for m in runs],
    }


def _cpu_cell(cpu: dict[str, Any]) -> str:
    text = f"{cpu['process']:.0f} + {cpu['sandbox_children']:.0f}"
    if cpu.get("attached_console_process") is not None:
        text += f" (+ {cpu['attached_console_process']:.0f} console)"
    return text


def table(result: dict[str, Any]) -> str:
    """Rows = way of running; columns = latency x {rollouts/s, CPU ms/rollout (process + sandboxes)}."""
    lats = sorted({r["latency_ms"] for r in result["rows"]})
    by = {(r["runner"], r["latency_ms"]): r for r in result["rows"]}
    runners = list(dict.fromkeys(r["runner"] for r in result["rows"]))
    head = "| way of running | " + " | ".join(f"{lat:g} ms: rollouts/s | {lat:g} ms: CPU ms/rollout" for lat in lats)
    lines = [head + " |", "|---|" + "---|---|" * len(lats)]
    for runner in runners:
        cells = []
        for lat in lats:
            row = by.get((runner, lat))
            cells += [str(row["rollouts_per_s"]), _cpu_cell(row["cpu_ms_per_rollout"])] if row else ["-", "-"]
        lines.append(f"| {runner} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def split_table(result: dict[str, Any]) -> str:
    """CPU ms per rollout by where it was spent."""
    lines = [
        "| latency | way of running | groups | env process | of it: env loop | main thread (UI) | other threads "
        "| sandbox processes | attached console | load before → after |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        c = r["cpu_ms_per_rollout"]
        loads = "; ".join(f"{b[0]:g} → {a[0]:g}" for b, a in r["loads"])
        lines.append(
            f"| {r['latency_ms']:g} ms | {r['runner']} | {r['groups']} | "
            + " | ".join("-" if c.get(k) is None else f"{c[k]:.1f}" for k in CPU_KEYS)
            + f" | {loads} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.p7_peers", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--latencies", default=None, help="comma-separated ms, default 20,300,2000")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--runners", default=None, help=f"comma-separated subset of: {'; '.join(RUNNERS)}")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    latencies = [float(x) for x in args.latencies.split(",")] if args.latencies else None
    runners = [x.strip() for x in args.runners.split(",")] if args.runners else None
    unknown = set(runners or ()) - set(RUNNERS)
    if unknown:
        ap.error(f"unknown runner(s) {sorted(unknown)}; expected some of {list(RUNNERS)}")
    result = run(args.quick, latencies=latencies, rounds=args.rounds, runners=runners)
    print(table(result), file=sys.stderr)
    print(split_table(result), file=sys.stderr)
    print(
        f"load average {result['load_average_before']} before, {result['load_average_after']} after",
        file=sys.stderr,
    )
    publish(SECTION, result, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
