"""P1 host overhead: terminal_tasks under the console (RuntimeHost + the Textual
app attached, headless) vs bare atroposlib ``process_manager`` with no observer.

    python -m bench.p1_overhead [--quick] [--groups N] [--pairs K] [--latency-ms 20] [--no-write]

Same env class, same config, same simulator process (fixed latency), same
number of groups. ``process_manager`` runs one group at a time, so the console
run uses ``max_in_flight=1`` too: the ratio is the cost of hosting, not a
change of concurrency. The two runs alternate ``pairs`` times (bare first, then
console, then bare...) and the figure is the ratio of medians. Throughput is
groups over [first get_next_item, last group sent] for both (see tt_env).
One extra console run at the driver's default concurrency is reported for
information only.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any

from bench.common import SimProcess, bench_tmpdir, figure, load_average, median, publish, rnd, runtime_process_gc

TARGET = 0.97
SECTION = "p1_overhead"


async def _bare(base_url: str, n_groups: int, tmp: str, tag: str) -> float:
    from bench.tt_env import TimedTerminalTasksEnv, build_bare_env, env_overrides
    from environments import events

    if events.active:  # a console run left an observer behind: the comparison would be unfair
        raise RuntimeError("an event observer is still installed before the bare run")
    TimedTerminalTasksEnv.reset_clock()
    env = build_bare_env(
        TimedTerminalTasksEnv,
        base_url,
        env_overrides(
            "", os.path.join(tmp, f"bare-{tag}", "groups.jsonl"), total_steps=n_groups, extra={"dataset_name": None}
        ),
    )
    await env.process_manager()
    rate = TimedTerminalTasksEnv.groups_per_s(n_groups)
    if rate is None:
        raise RuntimeError(f"bare run finished only {len(TimedTerminalTasksEnv.sent_at)} of {n_groups} groups")
    return rate


async def _console(
    base_url: str,
    n_groups: int,
    tmp: str,
    tag: str,
    max_in_flight: int | None,
    ui_stats: dict[str, Any],
    ui_config: dict[str, Any] | None = None,
    gc_tune: bool = True,
) -> float:
    from bench.tt_env import TimedTerminalTasksEnv, env_overrides
    from hermes_console.runtime.config import RunSpec
    from hermes_console.runtime.host import RuntimeHost
    from hermes_console.ui.app import ConsoleApp
    from hermes_console.ui.config import ConsoleConfig

    TimedTerminalTasksEnv.reset_clock()
    overrides = env_overrides("", os.path.join(tmp, f"console-{tag}", "groups.jsonl"), total_steps=n_groups)
    overrides.pop("dataset_name")
    spec = RunSpec(
        env=TimedTerminalTasksEnv,
        mode="process",
        env_overrides=overrides,
        openai_overrides={"base_url": f"{base_url}/v1"},
        max_in_flight=max_in_flight,
        runs_dir=tmp,
        check_server=False,
    )
    host = RuntimeHost(spec, exit_when_finished=False)
    config = ConsoleConfig(**(ui_config or {}))
    if gc_tune:
        config.freeze_gc_after_start = True  # as run_console sets it
    app = ConsoleApp(host, config=config)
    ticks = 0
    orig_tick = app.tick

    def counted_tick() -> None:
        nonlocal ticks
        ticks += 1
        orig_tick()

    app.tick = counted_tick  # type: ignore[method-assign]
    tick_s = 0.0

    def timed_tick() -> None:
        nonlocal tick_s
        t0 = time.perf_counter()
        counted_tick()
        tick_s += time.perf_counter() - t0

    app.tick = timed_tick  # type: ignore[method-assign]
    cpu0, wall0 = time.thread_time(), time.perf_counter()
    try:
        with runtime_process_gc(gc_tune):
            async with app.run_test(size=(160, 45)):
                end = time.monotonic() + 600
                window: tuple[float, float] | None = None  # (UI thread CPU, wall) at the first item
                while len(TimedTerminalTasksEnv.sent_at) < n_groups and time.monotonic() < end:
                    if host.done.done():
                        break
                    if window is None and TimedTerminalTasksEnv.t_first_item is not None:
                        window = (time.thread_time(), time.perf_counter())
                    await asyncio.sleep(0.05)  # not pilot.pause: it forces a screen refresh each call
                if window is not None:
                    # The UI thread's CPU share while groups ran (its start-up excluded).
                    ui_stats.setdefault("ui_cpu_share_in_window", []).append(
                        (time.thread_time() - window[0]) / (time.perf_counter() - window[1])
                    )
                ui_stats["ticks"] = ui_stats.get("ticks", 0) + ticks
                ui_stats["events"] = ui_stats.get("events", 0) + app.state.events_applied
                # The UI thread's CPU share: it competes with the runtime thread for the GIL.
                ui_stats.setdefault("ui_thread_cpu_share", []).append(
                    (time.thread_time() - cpu0) / (time.perf_counter() - wall0)
                )
                ui_stats.setdefault("tick_ms_mean", []).append(1000 * tick_s / max(1, ticks))
                app.exit(0)
    finally:
        host.stop(1.0).result(timeout=60)
        host.join(10)
    rate = TimedTerminalTasksEnv.groups_per_s(n_groups)
    if rate is None:
        raise RuntimeError(
            f"console run finished only {len(TimedTerminalTasksEnv.sent_at)} of {n_groups} groups (fatal: {host.fatal})"
        )
    return rate


def run(
    quick: bool = False,
    *,
    groups: int | None = None,
    pairs: int | None = None,
    latency_ms: float = 20.0,
    ui_config: dict[str, Any] | None = None,
    gc_tune: bool = True,
) -> dict[str, Any]:
    from bench.tt_env import TimedTerminalTasksEnv

    groups = groups or (4 if quick else 24)
    pairs = pairs or (1 if quick else 5)
    tmp = bench_tmpdir("p1")
    load_before = load_average()
    bare: list[float] = []
    console: list[float] = []
    # CPU per group, the mechanism behind the ratio: the env is CPU-bound at 20 ms, so what
    # the console adds per group is what it costs in throughput, and CPU is far less
    # moved by the rest of a shared box than wall time.
    cpu: dict[str, list[float]] = {"bare": [], "console": []}
    ui_stats: dict[str, Any] = {}
    default_conc: float | None = None
    with SimProcess(latency_ms, solve_rate=0.6) as sim:
        url = sim.base_url
        asyncio.run(_bare(url, 1, tmp, "warm"))  # warm imports, tokenizer, sandbox root
        for i in range(pairs):
            # Alternate which goes first so a load spike does not always land on one side.
            order = ("bare", "console") if i % 2 == 0 else ("console", "bare")
            for which in order:
                if which == "bare":
                    bare.append(asyncio.run(_bare(url, groups, tmp, str(i))))
                else:
                    console.append(asyncio.run(_console(url, groups, tmp, str(i), 1, ui_stats, ui_config, gc_tune)))
                spent = TimedTerminalTasksEnv.cpu_ms_per_group(groups)
                if spent is not None:
                    cpu[which].append(spent)
        if not quick:
            default_conc = asyncio.run(_console(url, groups, tmp, "default", None, {}, ui_config, gc_tune))
    ratio = median(console) / median(bare)
    return {
        "groups_per_run": groups,
        "group_size": 4,
        "pairs": pairs,
        "latency_ms": latency_ms,
        "bare_groups_per_s": [rnd(x) for x in bare],
        "console_groups_per_s": [rnd(x) for x in console],
        "bare_median": rnd(median(bare)),
        "console_median": rnd(median(console)),
        "throughput_ratio": rnd(ratio, 4),
        "bare_cpu_ms_per_group_median": rnd(median(cpu["bare"]), 1) if cpu["bare"] else None,
        "console_cpu_ms_per_group_median": rnd(median(cpu["console"]), 1) if cpu["console"] else None,
        # bare CPU / console CPU per group: the throughput ratio a CPU-bound env would see
        "cpu_per_group_ratio": rnd(median(cpu["bare"]) / median(cpu["console"]), 4)
        if cpu["bare"] and cpu["console"]
        else None,
        "console_ui_ticks": ui_stats.get("ticks"),
        "console_events_applied": ui_stats.get("events"),
        "ui_thread_cpu_share_median": rnd(median(ui_stats.get("ui_thread_cpu_share", [])), 3),
        "ui_thread_cpu_share_while_running_median": rnd(median(ui_stats.get("ui_cpu_share_in_window", [])), 3),
        "ui_tick_ms_mean_median": rnd(median(ui_stats.get("tick_ms_mean", [])), 2),
        "console_default_max_in_flight_groups_per_s": rnd(default_conc),
        "console_default_vs_bare": rnd(default_conc / median(bare), 3) if default_conc else None,
        "ui_config": ui_config or "defaults",
        "console_gc": "as run_console (gc_tuning)" if gc_tune else "CPython defaults",
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "figures": [figure("P1 console/bare throughput", ratio, TARGET, "x", True)],
        "quick": quick,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.p1_overhead", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--groups", type=int, default=None)
    ap.add_argument("--pairs", type=int, default=None)
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--tick-hz", type=float, default=None, help="override ConsoleConfig.tick_hz")
    ap.add_argument("--ui-cpu-share", type=float, default=None, help="override ConsoleConfig.ui_cpu_share")
    ap.add_argument(
        "--no-gc-tune", action="store_true", help="console runs keep CPython's GC defaults (run_console tunes them)"
    )
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    overrides = (("tick_hz", args.tick_hz), ("ui_cpu_share", args.ui_cpu_share))
    ui_config = {k: v for k, v in overrides if v is not None} or None
    result = run(
        args.quick,
        groups=args.groups,
        pairs=args.pairs,
        latency_ms=args.latency_ms,
        ui_config=ui_config,
        gc_tune=not args.no_gc_tune,
    )
    publish(SECTION, result, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
