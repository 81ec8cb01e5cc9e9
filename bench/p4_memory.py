"""P4 memory: RSS after 100,000 rollouts vs after 1,000, through host + reducer.

    python -m bench.p4_memory [--quick] [--rollouts 100000] [--no-write]

The RuntimeHost runs the synthetic env (bench/synth_env.py: the events of real
agent rollouts, no HTTP or sandboxes, so 100k rollouts take a minute, not a day)
at full speed with 256 rollouts in flight; a pump thread drains its events into
a ConsoleState like the UI or the headless printer does. VmRSS (/proc/self/status,
after gc.collect()) is read when 1,000 and when ``rollouts`` have finished. Runs
in a fresh subprocess so nothing else this bench did is in the RSS.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from typing import Any

from bench.common import REPO, bench_tmpdir, figure, load_average, publish, rnd, rss_mb

SECTION = "p4_memory"
TARGET_GROWTH_MB = 50.0


def measure(total: int, checkpoints: list[int]) -> dict[str, Any]:
    """In this process: run the host until ``total`` rollouts finished; RSS at each checkpoint."""
    from bench.synth_env import SynthEnv
    from hermes_console.runtime.config import RunSpec
    from hermes_console.runtime.host import RuntimeHost
    from hermes_console.runtime.state import ConsoleState

    tmp = bench_tmpdir("p4")
    group_size = 8
    spec = RunSpec(
        env=SynthEnv,
        mode="process",
        runs_dir=tmp,
        check_server=False,
        max_in_flight=256 // group_size,
        env_overrides={
            "group_size": group_size,
            "total_steps": 10**9,
            "turns_per_rollout": 4,
            "turn_sleep_s": 0.0,
            "data_path_to_save_groups": f"{tmp}/groups.jsonl",
        },
    )
    host = RuntimeHost(spec, exit_when_finished=False)
    state = ConsoleState()
    lock = threading.Lock()
    stop = threading.Event()

    def pump() -> None:
        while not stop.is_set():
            batch = host.drain(20_000)
            with lock:
                state.apply_all(batch)
            if not batch:
                time.sleep(0.02)

    rss: dict[str, float] = {"before_start": rss_mb()}
    t0 = time.perf_counter()
    host.start()
    thread = threading.Thread(target=pump, name="bench-pump", daemon=True)
    thread.start()
    try:
        for cp in checkpoints:
            while True:
                with lock:
                    done = state.rollouts_finished
                if done >= cp:
                    break
                if host.done.done():
                    raise RuntimeError(f"runtime ended early: {state.status} {state.status_detail}")
                time.sleep(0.05)
            with lock:  # hold the pump while measuring so the reading is of a still heap
                rss[str(cp)] = rss_mb()
                rss[f"{cp}_at_s"] = round(time.perf_counter() - t0, 1)
                rss[f"{cp}_queue_depth"] = len(host.queue)
    finally:
        host.stop(0.5).result(timeout=300)
        host.join(30)
        stop.set()
        thread.join(10)
    return {
        "rss_mb": rss,
        "events_applied": state.events_applied,
        "rollouts_finished": state.rollouts_finished,
        "elapsed_s": round(time.perf_counter() - t0, 1),
    }


def run(quick: bool = False, *, rollouts: int | None = None) -> dict[str, Any]:
    total = rollouts or (5_000 if quick else 100_000)
    base = 1_000
    checkpoints = sorted({base, total // 4, total // 2, total} - {0})
    load_before = load_average()
    code = (
        "import json,sys; from bench.p4_memory import measure; "
        f"print('RESULT'+json.dumps(measure({total}, {checkpoints})))"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=str(REPO), capture_output=True, text=True, timeout=1800)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")), None)
    if line is None:
        raise RuntimeError(f"p4 subprocess failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    m = json.loads(line[len("RESULT") :])
    rss = m["rss_mb"]
    growth = rss[str(total)] - rss[str(base)]
    return {
        "rollouts": total,
        "baseline_rollouts": base,
        "env": "bench.synth_env.SynthEnv (synthetic: real event mix, no HTTP/sandboxes), 256 in flight",
        "rss_mb_at": {k: rnd(v, 1) for k, v in rss.items() if not k.endswith(("_at_s", "_queue_depth"))},
        "seconds_at": {k[:-5]: v for k, v in rss.items() if k.endswith("_at_s")},
        "queue_depth_at": {k[:-12]: v for k, v in rss.items() if k.endswith("_queue_depth")},
        "rss_growth_mb": rnd(growth, 1),
        "events_applied": m["events_applied"],
        "elapsed_s": m["elapsed_s"],
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "figures": [figure(f"P4 RSS growth {base:,} -> {total:,} rollouts", growth, TARGET_GROWTH_MB, "MB", False)],
        "quick": quick,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.p4_memory", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rollouts", type=int, default=None)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    result = run(args.quick, rollouts=args.rollouts)
    publish(SECTION, result, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
