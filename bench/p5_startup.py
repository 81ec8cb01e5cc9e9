"""P5 startup: ``hermes-console demo`` process start -> first frame, and -> first rollout finished.

    python -m bench.p5_startup [--quick] [--runs 3] [--no-write]

Each run is a fresh ``python`` process that executes ``hermes-console demo``
(``hermes_console.cli.main(["demo", ...])``) exactly as the entry point does,
with the smallest hook the UI lacks, applied from here and not from the ui
package: Textual runs headless, ``on_mount`` asks for a callback after the first
refresh (the first frame), and the drain tick notes when the state first shows
a finished rollout, then quits. Times are wall-clock (time.time()) from just
before ``Popen`` in this process, so interpreter start and every import count.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

from bench.common import REPO, bench_tmpdir, figure, load_average, median, publish, rnd

SECTION = "p5_startup"
TARGET_FIRST_FRAME_S = 1.0

# Runs in the child. HERMES_BENCH_TRACE names the JSON file it writes.
_CHILD = r"""
import json, os, sys, time
marks = {"main": time.time()}
path = os.environ["HERMES_BENCH_TRACE"]

def save():
    with open(path, "w") as fp:
        json.dump(marks, fp)

from hermes_console.ui import app as ui_app
marks["ui_imported"] = time.time()
App = ui_app.ConsoleApp
orig_mount, orig_tick, orig_run = App.on_mount, App.tick, App.run

def on_mount(self):
    orig_mount(self)
    def first_frame():
        marks.setdefault("first_frame", time.time())
        save()
    self.call_after_refresh(first_frame)

def tick(self):
    orig_tick(self)
    if "first_rollout" not in marks and self.state.rollouts_finished >= 1:
        marks["first_rollout"] = time.time()
        save()
        self.exit(0)

def run(self, *a, **kw):
    kw.setdefault("headless", True)
    kw.setdefault("size", (160, 45))
    return orig_run(self, *a, **kw)

App.on_mount, App.tick, App.run = on_mount, tick, run

# The simulator is hooked when the demo first imports it (it does so on the runtime
# thread since the P5 fix): importing it here would put its cost back before the UI.
import builtins
orig_import = builtins.__import__

def hook_sim(sim_server):
    orig_sim_start = sim_server.SimServer.start
    orig_sim_init = sim_server.SimServer.__init__

    def sim_start(self, *a, **kw):
        marks["sim_start_called"] = time.time()
        url = orig_sim_start(self, *a, **kw)
        marks["sim_started"] = time.time()
        return url

    def sim_init(self, *a, **kw):
        marks.setdefault("sim_ctor_start", time.time())
        orig_sim_init(self, *a, **kw)
        marks.setdefault("sim_ctor_end", time.time())

    sim_server.SimServer.start = sim_start
    sim_server.SimServer.__init__ = sim_init

def importing(name, *a, **kw):
    module = orig_import(name, *a, **kw)
    sim_server = sys.modules.get("hermes_console.sim.server")
    # hasattr: a nested import of the module's own imports sees it half-initialised
    if sim_server is not None and hasattr(sim_server, "SimServer") and not getattr(sim_server, "_bench_hooked", False):
        sim_server._bench_hooked = True
        builtins.__import__ = orig_import
        hook_sim(sim_server)
    return module

builtins.__import__ = importing
orig_init = App.__init__

def init(self, *a, **kw):
    marks.setdefault("app_created", time.time())
    orig_init(self, *a, **kw)

App.__init__ = init
from hermes_console import cli
orig_demo = cli._demo

def demo(*a, **kw):
    marks["demo_entered"] = time.time()
    return orig_demo(*a, **kw)

cli._demo = demo
code = cli.main(sys.argv[1:])
marks["exited"] = time.time()
save()
"""


def _one(tmp: str, i: int, timeout: float) -> dict[str, Any]:
    trace = os.path.join(tmp, f"trace-{i}.json")
    env = dict(os.environ, HERMES_BENCH_TRACE=trace)
    args = [
        sys.executable,
        "-c",
        _CHILD,
        "demo",
        "--runs-dir",
        os.path.join(tmp, f"runs-{i}"),
        "--drain-deadline",
        "0.5",
    ]
    t0 = time.time()
    proc = subprocess.run(args, cwd=str(REPO), env=env, capture_output=True, text=True, timeout=timeout)
    try:
        with open(trace) as fp:
            marks = json.load(fp)
    except (OSError, ValueError):
        raise RuntimeError(f"demo run {i} wrote no trace (exit {proc.returncode}): {proc.stderr[-1500:]}") from None
    out = {k: round(v - t0, 3) for k, v in marks.items()}
    out["exit_code"] = proc.returncode
    return out


def run(quick: bool = False, *, runs: int | None = None, warm: bool = True) -> dict[str, Any]:
    runs = runs or (1 if quick else 3)
    tmp = bench_tmpdir("p5")
    load_before = load_average()
    if warm:
        _one(tmp, -1, 180)  # warm the page cache and the tokenizer cache: we measure a warm start
    samples = [_one(tmp, i, 180) for i in range(runs)]

    def med(key: str) -> float | None:
        vals = [s[key] for s in samples if key in s]
        return median(vals) if vals else None

    first_frame = med("first_frame")
    # What `demo` does before the UI exists (its own imports, run spec, host): demo entered
    # -> ConsoleApp created. The simulator is built and started on the runtime thread.
    setup = [s["app_created"] - s["demo_entered"] for s in samples if "app_created" in s and "demo_entered" in s]
    return {
        "runs": runs,
        "command": "hermes-console demo (default: lognormal 300 ms latency, demo faults on), headless Textual",
        "interpreter_to_main_s": rnd(med("main")),
        "ui_imported_s": rnd(med("ui_imported")),
        "first_frame_s": rnd(first_frame),
        "first_rollout_finished_s": rnd(med("first_rollout")),
        "demo_setup_before_ui_s": rnd(median(setup)) if setup else None,
        "sim_started_s": rnd(med("sim_started")),  # on the runtime thread, after the UI started
        "samples": samples,
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "figures": [figure("P5 process start -> first frame", first_frame, TARGET_FIRST_FRAME_S, "s", False)],
        "quick": quick,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.p5_startup", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    result = run(args.quick, runs=args.runs)
    publish(SECTION, result, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
