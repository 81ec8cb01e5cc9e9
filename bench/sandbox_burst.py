"""Sandbox burst: host CPU per command when hundreds of rollouts run commands at once.

    python -m bench.sandbox_burst [--threads 256] [--commands 6] [--rounds 3] [--rev 6d081a8]
                                  [--command 'sleep 1'] [--solo-commands N]

P2's rollouts make their tool calls together (each LLM turn ends at the same moment), each
in a tool thread of its own. A command's host side is a few system calls, and under that
load every one of them is a release and a re-take of the GIL, so a command's host CPU
grows with the threads running commands (BENCHMARKS.md, session 19). Here: ``--threads``
threads, each with its own local sandbox (machine started beforehand), run ``--commands``
commands (``cat /etc/hostname``: one exec; ``--command`` another, e.g. ``sleep 1`` for
commands that keep their threads waiting) all at once, then alone with one thread. Host
CPU (this process: user + system) per command, voluntary context switches per command,
wall. "old" is the sandbox package at ``--rev`` (``git archive``), "new" this checkout;
each run is a fresh process, old and new alternated, medians.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from bench.common import REPO, median, old_package_dir, run_child_result

_CHILD = r"""
import json, resource, sys, tempfile, threading, time
from environments.sandboxes.local import LocalSandbox
from environments.sandboxes.settings import SandboxSettings
threads, commands, command = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
root = tempfile.mkdtemp()
boxes = [LocalSandbox(f"burst{i}", SandboxSettings(sandbox_root=root)) for i in range(threads)]
for box in boxes:
    box.execute("true", 30)
gate = threading.Barrier(threads + 1)
def work(box):
    gate.wait()
    for _ in range(commands):
        box.execute(command, 30)
    gate.wait()
pool = [threading.Thread(target=work, args=(b,)) for b in boxes]
for t in pool:
    t.start()
r0, w0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
gate.wait(); gate.wait()
r1, w1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
for t in pool:
    t.join()
for box in boxes:
    box.cleanup()
n = threads * commands
cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
print("RESULT" + json.dumps({
    "host_cpu_ms": 1000 * cpu / n,
    "system_ms": 1000 * (r1.ru_stime - r0.ru_stime) / n,
    "switches": (r1.ru_nvcsw - r0.ru_nvcsw) / n,
    "wall_s": w1 - w0,
}))
"""


def _run(pythonpath: str, threads: int, commands: int, command: str) -> dict[str, float]:
    return run_child_result(_CHILD, [str(threads), str(commands), command], pythonpath)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="python -m bench.sandbox_burst", description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=256)
    ap.add_argument("--commands", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rev", default="6d081a8", help="the old side (default: before session 19's change)")
    ap.add_argument("--command", default="cat /etc/hostname", help="what each command runs")
    ap.add_argument(
        "--solo-commands", type=int, default=0, help="commands of the one-thread run (0: threads*commands/8)"
    )
    args = ap.parse_args(argv)
    solo = args.solo_commands or args.threads * args.commands // 8
    old_dir = old_package_dir(args.rev)
    out: dict[str, Any] = {"load_before": list(os.getloadavg())}
    for threads, commands in ((args.threads, args.commands), (1, solo)):
        runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
        for i in range(args.rounds):
            order = (("old", old_dir), ("new", str(REPO))) if i % 2 == 0 else (("new", str(REPO)), ("old", old_dir))
            for side, path in order:
                runs[side].append(_run(path, threads, commands, args.command))
        med = {side: {k: round(median([r[k] for r in rs]), 3) for k in rs[0]} for side, rs in runs.items()}
        out[f"{threads} threads"] = {"median": med, "runs": runs}
        print(f"{threads} thread(s) x {commands} commands of {args.command!r} ({args.rounds} rounds, medians)")
        print(f"  {'side':5} {'host CPU ms/cmd':>16} {'of it system':>13} {'switches/cmd':>13} {'wall s':>8}")
        for side in ("old", "new"):
            m = med[side]
            print(
                f"  {side:5} {m['host_cpu_ms']:16.3f} {m['system_ms']:13.3f} {m['switches']:13.1f} {m['wall_s']:8.2f}"
            )
        print(f"  new/old host CPU: {med['new']['host_cpu_ms'] / med['old']['host_cpu_ms']:.2f}")
    out["load_after"] = list(os.getloadavg())
    print("load average before", out["load_before"], "after", out["load_after"])
    return out


if __name__ == "__main__":
    main()
