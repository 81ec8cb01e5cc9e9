"""P3 responsiveness: key press -> runtime ack while 1024 rollouts flood events.

    python -m bench.p3_responsiveness [--quick] [--rollouts 1024] [--samples 20] [--no-write]

The real ConsoleApp (headless, ``App.run_test``) over the real RuntimeHost running
the synthetic event-heavy env (bench/synth_env.py: the events of real agent
rollouts without HTTP or sandboxes) with ``rollouts`` in flight. Measured:
- pause latency: ``Pilot.press("p")`` -> the Future of ``RuntimeAPI.pause``
  resolving (the driver's gate is closed by then); p50/p99 over ``samples``;
  between samples the bench resumes directly and waits for the UI to show
  "running" again, so every press is a real pause;
- UI refresh: duration of each drain tick (drain + reducer + widget refresh), p50/p99;
- UI loop lag: how late a 10 ms timer on the UI loop fires (what a key waits for);
- event rate and the largest depth the runtime's event queue reached.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

from bench.common import bench_tmpdir, figure, load_average, pct, publish, rnd

SECTION = "p3_responsiveness"
TARGET_PAUSE_P99_MS = 100.0
TARGET_REFRESH_P99_MS = 50.0
TARGET_EVENTS_PER_S = 20_000.0


def _spec(rollouts: int, group_size: int, turn_sleep_s: float, tmp: str) -> Any:
    from bench.synth_env import SynthEnv
    from hermes_console.runtime.config import RunSpec

    return RunSpec(
        env=SynthEnv,
        mode="process",
        runs_dir=tmp,
        check_server=False,
        max_in_flight=max(1, rollouts // group_size),
        env_overrides={
            "group_size": group_size,
            "total_steps": 10**9,
            "turns_per_rollout": 4,
            "turn_sleep_s": turn_sleep_s,
            "data_path_to_save_groups": f"{tmp}/groups.jsonl",
        },
    )


async def _wait(pred: Any, timeout: float, step: float = 0.01) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        await asyncio.sleep(step)
    return bool(pred())


async def _measure(
    rollouts: int,
    samples: int,
    turn_sleep_s: float,
    warm_s: float,
    config_overrides: dict[str, Any],
    coalesce: bool = True,
) -> dict[str, Any]:
    from hermes_console.runtime.host import RuntimeHost
    from hermes_console.ui.app import ConsoleApp
    from hermes_console.ui.config import ConsoleConfig

    tmp = bench_tmpdir("p3")
    group_size = 8
    host = RuntimeHost(_spec(rollouts, group_size, turn_sleep_s, tmp), exit_when_finished=False)
    if not coalesce:  # A/B: the queue as before (every event queued one by one)
        host.queue.coalesce_at = host.queue.max_depth
    config = ConsoleConfig(**config_overrides)
    if hasattr(config, "freeze_gc_after_start"):  # as run_console sets it (tuned at the top of main)
        import gc

        config.freeze_gc_after_start = gc.get_threshold()[0] != 700
    app = ConsoleApp(host, config=config)

    tick_ms: list[float] = []
    tick_cpu_ms: list[float] = []  # UI thread CPU of each tick: GIL waits and starvation excluded
    depth: list[int] = []
    acks: list[float] = []
    orig_tick = app.tick

    in_tick = False

    def timed_tick() -> None:
        nonlocal in_tick
        depth.append(len(host.queue))
        t0, c0 = time.perf_counter(), time.thread_time()
        in_tick = True
        try:
            orig_tick()
        finally:
            in_tick = False
        tick_ms.append(1000 * (time.perf_counter() - t0))
        tick_cpu_ms.append(1000 * (time.thread_time() - c0))

    app.tick = timed_tick  # type: ignore[method-assign]

    # The tick hands catching up and a redraw after a drain to callbacks of their own: each is
    # a stretch the UI loop is blocked, so each counts as one "tick" here too (not when the
    # tick ran it inline: it is inside the tick's own figure then).
    def timed(callback: Any) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            if in_tick:
                return callback(*args, **kwargs)
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return callback(*args, **kwargs)
            finally:
                tick_ms.append(1000 * (time.perf_counter() - t0))
                tick_cpu_ms.append(1000 * (time.thread_time() - c0))

        return run

    for name in ("_redraw", "_catch_up"):
        if hasattr(app, name):
            setattr(app, name, timed(getattr(app, name)))
    orig_pause = host.pause

    def pause() -> Any:
        fut = orig_pause()
        fut.add_done_callback(lambda _f: acks.append(time.perf_counter()))
        return fut

    host.pause = pause  # type: ignore[method-assign]

    lag_ms: list[float] = []
    stop_lag = asyncio.Event()

    async def lag_probe() -> None:
        while not stop_lag.is_set():
            t0 = time.perf_counter()
            await asyncio.sleep(0.01)
            lag_ms.append(max(0.0, 1000 * (time.perf_counter() - t0) - 10.0))

    ui_cpu_per_1k: float | None = None
    latencies: list[float] = []
    missed = 0
    rate = 0.0
    ui_share = 0.0
    in_flight_seen = 0
    try:
        async with app.run_test(size=(160, 45)) as pilot:
            probe = asyncio.create_task(lag_probe())
            if not await _wait(lambda: app.state.status == "running" and host.queue.pushed > 0, 120):
                raise RuntimeError(f"runtime did not start: {app.state.status} {app.state.status_detail}")
            await asyncio.sleep(warm_s)  # let all rollouts get going
            p0, t0, c0 = host.queue.pushed, time.perf_counter(), time.thread_time()
            await asyncio.sleep(2.0)
            # This coroutine runs on the UI's loop: thread_time() is the UI thread's CPU.
            ui_share = (time.thread_time() - c0) / (time.perf_counter() - t0)
            rate = (host.queue.pushed - p0) / (time.perf_counter() - t0)
            in_flight_seen = len(host.driver.in_flight) * group_size if host.driver else 0
            tick_ms.clear()  # refresh figures cover the flood, not start-up
            tick_cpu_ms.clear()
            flood_cpu0, applied0 = time.thread_time(), app.state.events_applied
            depth.clear()
            lag_ms.clear()
            for _ in range(samples):
                if not await _wait(lambda: app.state.status == "running", 30):
                    missed += 1
                    continue
                n_before = len(acks)
                t_press = time.perf_counter()
                await pilot.press("p")
                if await _wait(lambda n=n_before: len(acks) > n, 10, 0.001):
                    latencies.append(1000 * (acks[n_before] - t_press))
                else:
                    missed += 1
                host.resume().result(timeout=10)
                await asyncio.sleep(0.6)  # the flood comes back before the next press
            stop_lag.set()
            await probe
            # UI thread CPU (drain, reducer, widgets and Textual's compositor) per 1,000 events
            # applied over the sampling period: a cost figure that load inflates far less than latency.
            applied = app.state.events_applied - applied0
            ui_cpu_per_1k = 1e6 * (time.thread_time() - flood_cpu0) / applied if applied else None
            app.exit(0)
    finally:
        host.stop(0.5).result(timeout=120)
        host.join(10)
    return {
        "latencies_ms": latencies,
        "missed": missed,
        "tick_ms": tick_ms,
        "tick_cpu_ms": tick_cpu_ms,
        "ui_cpu_ms_per_1k_events": ui_cpu_per_1k,
        "depth": depth,
        "lag_ms": lag_ms,
        "events_per_s": rate,
        "rollouts_in_flight": in_flight_seen,
        "queue_dropped": host.queue.dropped,
        "events_applied": app.state.events_applied,
        "ui_thread_cpu_share": ui_share,
        "queue_coalesced": host.queue.coalesced,
        "queue_pushed": host.queue.pushed,
        "queue_max_depth_seen": host.queue.max_depth_seen,
        "ui_throttled_note": app.ui_note(),
    }


def run(
    quick: bool = False,
    *,
    rollouts: int | None = None,
    samples: int | None = None,
    turn_sleep_s: float = 0.1,
    config_overrides: dict[str, Any] | None = None,
    coalesce: bool = True,
) -> dict[str, Any]:
    rollouts = rollouts or (64 if quick else 1024)
    samples = samples or (3 if quick else 20)
    load_before = load_average()
    m = asyncio.run(_measure(rollouts, samples, turn_sleep_s, 0.5 if quick else 2.0, config_overrides or {}, coalesce))
    lat, ticks = m["latencies_ms"], m["tick_ms"]
    pause_p99 = pct(lat, 99)
    refresh_p99 = pct(ticks, 99)
    return {
        "rollouts": rollouts,
        "rollouts_in_flight_seen": m["rollouts_in_flight"],
        "env": "bench.synth_env.SynthEnv (synthetic: real event mix, no HTTP/sandboxes)",
        "turn_sleep_s": turn_sleep_s,
        "events_per_s": rnd(m["events_per_s"], 0),
        "samples": len(lat),
        "missed_samples": m["missed"],
        "pause_ack_ms_p50": rnd(pct(lat, 50), 1),
        "pause_ack_ms_p99": rnd(pause_p99, 1),
        "pause_ack_ms_max": rnd(max(lat) if lat else None, 1),
        "ui_tick_ms_p50": rnd(pct(ticks, 50), 2),
        "ui_tick_ms_p99": rnd(refresh_p99, 2),
        "ui_tick_ms_max": rnd(max(ticks) if ticks else None, 2),
        "ui_ticks": len(ticks),
        "ui_tick_cpu_ms_p50": rnd(pct(m["tick_cpu_ms"], 50), 2),
        "ui_tick_cpu_ms_p99": rnd(pct(m["tick_cpu_ms"], 99), 2),
        "ui_cpu_ms_per_1k_events": rnd(m["ui_cpu_ms_per_1k_events"], 2),
        "ui_loop_lag_ms_p50": rnd(pct(m["lag_ms"], 50), 1),
        "ui_loop_lag_ms_p99": rnd(pct(m["lag_ms"], 99), 1),
        "event_queue_max_depth": max(m["depth"]) if m["depth"] else None,
        "event_queue_last_depth": m["depth"][-1] if m["depth"] else None,
        "event_queue_dropped": m["queue_dropped"],
        "event_queue_max_depth_seen": m["queue_max_depth_seen"],
        "events_coalesced_share": rnd(m["queue_coalesced"] / m["queue_pushed"], 3) if m["queue_pushed"] else None,
        "coalescing": coalesce,
        "ui_thread_cpu_share_flood": rnd(m["ui_thread_cpu_share"], 3),
        "ui_note_at_end": m["ui_throttled_note"],
        "ui_config": config_overrides or "defaults",
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "figures": [
            figure("P3 event rate", m["events_per_s"], TARGET_EVENTS_PER_S, "events/s", True),
            figure("P3 key->pause ack p99", pause_p99, TARGET_PAUSE_P99_MS, "ms", False),
            figure("P3 UI refresh (tick) p99", refresh_p99, TARGET_REFRESH_P99_MS, "ms", False),
        ],
        "quick": quick,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.p3_responsiveness", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rollouts", type=int, default=None)
    ap.add_argument("--samples", type=int, default=None)
    ap.add_argument("--turn-sleep", type=float, default=0.1)
    ap.add_argument("--max-events-per-tick", type=int, default=None, help="override ConsoleConfig.max_events_per_tick")
    ap.add_argument("--tick-hz", type=float, default=None, help="override ConsoleConfig.tick_hz")
    ap.add_argument("--ui-cpu-share", type=float, default=None, help="override ConsoleConfig.ui_cpu_share (0: off)")
    ap.add_argument("--no-coalesce", action="store_true", help="queue every event one by one (A/B)")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument(
        "--no-gc-tune", action="store_true", help="keep CPython's GC defaults (the console process tunes them)"
    )
    args = ap.parse_args(argv)
    if not args.no_gc_tune:
        try:  # as run_console does for the console's process (absent in old checkouts of an A/B)
            from hermes_console.runtime import gc_tuning
        except ImportError:
            gc_tuning = None  # type: ignore[assignment]
        if gc_tuning is not None:
            gc_tuning.tune()
    overrides = {
        k: v
        for k, v in (
            ("max_events_per_tick", args.max_events_per_tick),
            ("tick_hz", args.tick_hz),
            ("ui_cpu_share", args.ui_cpu_share),
        )
        if v is not None
    } or None
    result = run(
        args.quick,
        rollouts=args.rollouts,
        samples=args.samples,
        turn_sleep_s=args.turn_sleep,
        config_overrides=overrides,
        coalesce=not args.no_coalesce,
    )
    publish(SECTION, result, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
