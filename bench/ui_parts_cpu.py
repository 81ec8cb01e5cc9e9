"""Which part of a UI tick costs what: UI-thread CPU per drain step and per panel update.

    python -m bench.ui_parts_cpu [--rollouts 1024] [--seconds 20] [--gc-freeze]

The real ConsoleApp (headless, ``App.run_test``) over the real RuntimeHost running the
P3 synthetic flood (bench/synth_env.py, as bench/p3_responsiveness.py). Each part is
timed with ``time.thread_time()`` on the UI thread (CPU, so GIL waits are not counted):

- ``tick``: a whole drain/redraw tick; ``drain step``: ``ConsoleApp._drain_step``;
- each widget's ``update_from`` (groups, turns stream, tool calls, sandboxes, ...);
- Textual's compositor (``Compositor.render_update`` / ``render_full`` / ``reflow``);
- garbage collection pauses (``gc.callbacks``), by generation and by the thread that
  paid for them: a full (gen 2) collection lands on whichever part allocated last.

Prints p50 / p99 / max and the count per part; a diagnostic for before/after runs on a
quiet box (not a pass/fail figure, nothing is written to BENCHMARKS.md or results.json).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from bench.common import bench_tmpdir, load_average, pct
from bench.p3_responsiveness import _spec, _wait

Samples = dict[str, list[float]]


def _timed(samples: Samples, name: str, fn: Callable[..., Any], ui_thread: int) -> Callable[..., Any]:
    """``fn`` that adds its UI-thread CPU (ms) to ``samples[name]`` (calls on other threads are not timed)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() != ui_thread:
            return fn(*args, **kwargs)
        c0 = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            samples[name].append(1000 * (time.thread_time() - c0))

    return wrapper


def _patch_classes(samples: Samples, ui_thread: int) -> list[tuple[type, str, Any]]:
    """Wrap every panel's ``update_from`` and the compositor's render passes; returns what to undo."""
    from textual._compositor import Compositor

    from hermes_console.ui.widgets import (
        groups_table,
        rewards_panel,
        sandboxes_table,
        servers_table,
        status_bar,
        tool_calls_table,
        turns_stream,
    )

    targets: list[tuple[type, str, str]] = [
        (groups_table.GroupsTable, "update_from", "groups"),
        (turns_stream.TurnsStream, "update_from", "turns stream"),
        (tool_calls_table.ToolCallsTable, "update_from", "tool calls"),
        (sandboxes_table.SandboxesTable, "update_from", "sandboxes"),
        (rewards_panel.RewardsPanel, "update_from", "rewards"),
        (servers_table.ServersTable, "update_from", "servers"),
        (status_bar.StatusBar, "update_from", "status bar"),
        (turns_stream.TurnsStream, "render_line", "turns render_line"),
        (Compositor, "render_update", "compositor"),
        (Compositor, "render_full", "compositor"),
        (Compositor, "reflow", "compositor reflow"),
    ]
    undo = []
    for cls, attr, name in targets:
        original = cls.__dict__.get(attr)
        if original is None:
            continue
        undo.append((cls, attr, original))
        setattr(cls, attr, _timed(samples, name, original, ui_thread))
    return undo


def _gc_probe(pauses: Samples, ui_thread: int) -> Callable[[str, dict[str, Any]], None]:
    started: dict[int, float] = {}

    def callback(phase: str, info: dict[str, Any]) -> None:
        ident = threading.get_ident()
        if phase == "start":
            started[ident] = time.thread_time()
            return
        c0 = started.pop(ident, None)
        if c0 is not None:  # CPU of the collecting thread (it holds the GIL throughout: everyone waits)
            who = "UI" if ident == ui_thread else "other"
            pauses[f"gc gen{info.get('generation')} ({who} thread)"].append(1000 * (time.thread_time() - c0))

    return callback


async def _measure(
    rollouts: int, seconds: float, warm_s: float, gc_freeze: bool, gc_types: int = 0
) -> tuple[Samples, dict[str, Any]]:
    from hermes_console.runtime.host import RuntimeHost
    from hermes_console.ui.app import ConsoleApp
    from hermes_console.ui.config import ConsoleConfig

    tmp = bench_tmpdir("ui_parts")
    group_size = 8
    host = RuntimeHost(_spec(rollouts, group_size, 0.1, tmp), exit_when_finished=False)
    app = ConsoleApp(host, config=ConsoleConfig())
    ui_thread = threading.get_ident()  # run_test runs the app on this thread's loop
    samples: Samples = defaultdict(list)
    recording = [False]
    live: Samples = defaultdict(list)

    def sink() -> Samples:
        return samples if recording[0] else live  # start-up costs are not the flood's

    class Router(dict):  # samples go to the flood's table only while recording
        def __missing__(self, key: str) -> list[float]:
            return sink()[key]

    router: Samples = Router()
    undo = _patch_classes(router, ui_thread)
    for attr, name in (("tick", "tick"), ("_drain_step", "drain step"), ("_redraw", "redraw (all panels)")):
        setattr(app, attr, _timed(router, name, getattr(app, attr), ui_thread))
    gc_cb = _gc_probe(router, ui_thread)
    gc.callbacks.append(gc_cb)
    info: dict[str, Any] = {}
    try:
        async with app.run_test(size=(160, 45)):
            if not await _wait(lambda: app.state.status == "running" and host.queue.pushed > 0, 120):
                raise RuntimeError(f"runtime did not start: {app.state.status} {app.state.status_detail}")
            await asyncio.sleep(warm_s)
            if gc_freeze:
                gc.collect()
                gc.freeze()  # everything alive now (imports, widgets) is never scanned again
            p0, a0, t0, c0 = host.queue.pushed, app.state.events_applied, time.perf_counter(), time.thread_time()
            recording[0] = True
            await asyncio.sleep(seconds)
            recording[0] = False
            span = time.perf_counter() - t0
            info = {
                "events_per_s": (host.queue.pushed - p0) / span,
                "applied_per_s": (app.state.events_applied - a0) / span,
                "ui_thread_share": (time.thread_time() - c0) / span,
                "queue_depth_end": len(host.queue),
                "gc_tracked_objects": len(gc.get_objects()),
            }
            if gc_types:  # what a full collection has to walk, by type (the largest first)
                by_type: dict[str, int] = defaultdict(int)
                for obj in gc.get_objects():
                    by_type[f"{type(obj).__module__}.{type(obj).__qualname__}"] += 1
                info["top_types"] = sorted(by_type.items(), key=lambda kv: -kv[1])[:gc_types]
            app.exit(0)
    finally:
        gc.callbacks.remove(gc_cb)
        for cls, attr, original in undo:
            setattr(cls, attr, original)
        host.stop(0.5).result(timeout=120)
        host.join(10)
    return samples, info


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rollouts", type=int, default=1024)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warm", type=float, default=3.0)
    parser.add_argument("--gc-freeze", action="store_true", help="gc.freeze() after warm-up (diagnostic)")
    parser.add_argument("--gc-threshold", type=int, default=0, help="gc.set_threshold(N, 10, 10) first (diagnostic)")
    parser.add_argument("--gc-types", type=int, default=0, help="print the N most numerous GC-tracked types")
    args = parser.parse_args(argv)
    if args.gc_threshold:
        gc.set_threshold(args.gc_threshold, 10, 10)
    load0 = load_average()
    samples, info = asyncio.run(_measure(args.rollouts, args.seconds, args.warm, args.gc_freeze, args.gc_types))
    top = info.pop("top_types", [])
    print(f"load average {load0} -> {load_average()}; " + ", ".join(f"{k} {v:,.2f}" for k, v in info.items()))
    for name, n in top:
        print(f"  tracked {n:>8,}  {name}")
    print(f"{'part (thread CPU)':<34} {'n':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'sum ms':>9}")
    for name in sorted(samples, key=lambda k: -max(samples[k] or [0])):
        v = samples[name]
        print(f"{name:<34} {len(v):>6} {pct(v, 50):>8.1f} {pct(v, 99):>8.1f} {max(v):>8.1f} {sum(v):>9.0f}")


if __name__ == "__main__":
    main()
