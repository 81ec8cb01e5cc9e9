"""Scaling curve: throughput and per-event cost at 16, 64, 256, 1024 concurrent rollouts.

    python -m bench.scaling [--quick] [--levels 16,64,256,1024] [--seconds 3] [--no-write]

The RuntimeHost runs the synthetic env (bench/synth_env.py: 4 turns of
``turn_sleep_s`` each, the events of real rollouts, no HTTP/sandboxes) with N
rollouts in flight; a pump thread folds its events into a ConsoleState every
50 ms (the UI's job, without Textual). For each N: rollouts/s over a window,
the latency-bound ideal N / (4 · turn_sleep_s), events/s, and process CPU per
event (emit + queue + driver + reducer). Levels run in rising then falling
order and each figure is the median of the rounds. A reducer-only figure
(ConsoleState.apply on a pre-built stream) separates the reducer's share.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Any

from bench.common import bench_tmpdir, load_average, median, publish, rnd

SECTION = "scaling"
TURNS = 4
# terminal_tasks' group size; no jitter, so a group's rollouts end together and the
# group barrier costs nothing (the ideal stays N / (turns * sleep)); the window is a
# whole number of turns so lock-step turns do not quantise the rate.
GROUP_SIZE = 4


def _cpu() -> float:
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def one_level(concurrency: int, seconds: float, turn_sleep_s: float, warm_s: float = 1.0) -> dict[str, float]:
    from bench.synth_env import SynthEnv, events_per_rollout
    from hermes_console.runtime.config import RunSpec
    from hermes_console.runtime.host import RuntimeHost
    from hermes_console.runtime.state import ConsoleState

    tmp = bench_tmpdir("scale")
    group_size = GROUP_SIZE
    spec = RunSpec(
        env=SynthEnv,
        mode="process",
        runs_dir=tmp,
        check_server=False,
        max_in_flight=max(1, concurrency // group_size),
        env_overrides={
            "group_size": group_size,
            "total_steps": 10**9,
            "turns_per_rollout": TURNS,
            "turn_sleep_s": turn_sleep_s,
            "turn_jitter": 0.0,
            "data_path_to_save_groups": f"{tmp}/groups.jsonl",
        },
    )
    host = RuntimeHost(spec, exit_when_finished=False)
    state = ConsoleState()
    stop = threading.Event()
    lock = threading.Lock()
    max_depth = 0

    def pump() -> None:
        nonlocal max_depth
        while not stop.is_set():
            max_depth = max(max_depth, len(host.queue))
            batch = host.drain()
            with lock:
                state.apply_all(batch)
            time.sleep(0.05)

    host.start()
    th = threading.Thread(target=pump, name="bench-pump", daemon=True)
    th.start()
    try:
        end = time.monotonic() + 120
        while state.status != "running" and time.monotonic() < end:
            time.sleep(0.05)
        time.sleep(warm_s)
        with lock:
            r0, e0 = state.rollouts_finished, host.queue.pushed
        c0, t0 = _cpu(), time.perf_counter()
        max_depth = 0
        time.sleep(seconds)
        with lock:
            r1, e1 = state.rollouts_finished, host.queue.pushed
        c1, t1 = _cpu(), time.perf_counter()
    finally:
        stop.set()
        th.join(5)
        host.stop(0.2).result(timeout=300)
        host.join(30)
    dt = t1 - t0
    events = e1 - e0
    # Events arrive more evenly than rollout completions: rate from events is less quantised.
    rate = events / dt / (events_per_rollout(TURNS) + 4 / group_size)  # + group/item events
    ideal = concurrency / (TURNS * turn_sleep_s)
    return {
        "rollouts_per_s": rate,
        "rollouts_finished_per_s": (r1 - r0) / dt,
        "ideal_rollouts_per_s": ideal,
        "efficiency": rate / ideal,
        "events_per_s": events / dt,
        "cpu_us_per_event": 1e6 * (c1 - c0) / max(1, events),
        "cpu_cores_used": (c1 - c0) / dt,
        "max_queue_depth": max_depth,
    }


def reducer_cost_us(n_rollouts: int = 4096) -> float:
    from bench.synth_env import synthetic_events
    from hermes_console.runtime.state import ConsoleState

    stream = synthetic_events(n_rollouts, turns=TURNS, group_size=8, concurrent=1024)
    state = ConsoleState()
    t0 = time.perf_counter()
    state.apply_all(stream)
    return 1e6 * (time.perf_counter() - t0) / len(stream)


def run(
    quick: bool = False, *, levels: list[int] | None = None, seconds: float | None = None, turn_sleep_s: float = 0.25
) -> dict[str, Any]:
    levels = levels or ([16, 64] if quick else [16, 64, 256, 1024])
    seconds = seconds or (1.0 if quick else 3.0)
    rounds = 1 if quick else 2
    load_before = load_average()
    per: dict[int, list[dict[str, float]]] = {n: [] for n in levels}
    for r in range(rounds):
        for n in levels if r % 2 == 0 else list(reversed(levels)):
            per[n].append(one_level(n, seconds, turn_sleep_s, warm_s=0.5 if quick else 1.0))
    curve = []
    for n in levels:
        rows = per[n]
        curve.append({"concurrency": n, **{k: rnd(median([row[k] for row in rows]), 3) for k in rows[0]}})
    return {
        "env": "bench.synth_env.SynthEnv (synthetic: real event mix, no HTTP/sandboxes); host + reducer, no Textual",
        "turns_per_rollout": TURNS,
        "turn_sleep_s": turn_sleep_s,
        "window_s": seconds,
        "rounds": rounds,
        "curve": curve,
        "reducer_only_us_per_event": rnd(reducer_cost_us(1024 if quick else 4096), 2),
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "figures": [],
        "quick": quick,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.scaling", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--levels", default=None, help="comma-separated concurrency levels")
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--turn-sleep", type=float, default=0.25)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    levels = [int(x) for x in args.levels.split(",")] if args.levels else None
    result = run(args.quick, levels=levels, seconds=args.seconds, turn_sleep_s=args.turn_sleep)
    publish(SECTION, result, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
