"""Peer table: hermes-console as an operator runs it vs atroposlib's own ``process``.

    python -m bench.p7_peers [--quick] [--latencies 20,300,2000] [--rounds 1] [--no-write]

Same env (terminal_tasks, group size 4), same simulator process at a fixed latency per
call, side by side in one run, order alternated per latency:
- **atroposlib process**: ``BaseEnv.process_manager`` as atroposlib's ``process`` CLI
  runs it (one group at a time: it has no concurrency setting), no observer;
- **hermes-console**: ``RuntimeHost`` at its default concurrency (``max_in_flight``
  unset: the driver's default) with the Textual app attached (headless, 160×45).

Reported per runner and latency: rollouts/s over [first item, last group sent] (bench/tt_env)
and CPU per rollout: this process (user + system, all threads) and reaped children (sandbox
shells), over the whole run including setup. The simulator runs in its own process and is
not counted. atroposlib's ``serve`` mode needs a trainer API and is not measured here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

from bench.common import SimProcess, bench_tmpdir, load_average, median, rnd, write_results

SECTION = "p7_peers"
GROUP_SIZE = 4


def _groups_for(latency_ms: float, quick: bool) -> int:
    if quick:
        return 2
    return 16 if latency_ms <= 50 else 8 if latency_ms <= 500 else 4


def _cpu() -> tuple[float, float]:
    t = os.times()
    return t.user + t.system, t.children_user + t.children_system


def _one(which: str, url: str, groups: int, tmp: str, tag: str) -> dict[str, Any]:
    from bench.p1_overhead import _bare, _console

    self0, kids0 = _cpu()
    if which == "atroposlib process":
        groups_per_s = asyncio.run(_bare(url, groups, tmp, tag))
    else:
        groups_per_s = asyncio.run(_console(url, groups, tmp, tag, None, {}))
    self1, kids1 = _cpu()
    rollouts = groups * GROUP_SIZE
    return {
        "rollouts_per_s": groups_per_s * GROUP_SIZE,
        "cpu_ms_per_rollout_process": 1000 * (self1 - self0) / rollouts,
        "cpu_ms_per_rollout_children": 1000 * (kids1 - kids0) / rollouts,
    }


def run(quick: bool = False, *, latencies: list[float] | None = None, rounds: int = 1) -> dict[str, Any]:
    latencies = latencies or ([20.0] if quick else [20.0, 300.0, 2000.0])
    tmp = bench_tmpdir("p7")
    load_before = load_average()
    rows: list[dict[str, Any]] = []
    for li, latency in enumerate(latencies):
        groups = _groups_for(latency, quick)
        seen: dict[str, list[dict[str, Any]]] = {"atroposlib process": [], "hermes-console": []}
        with SimProcess(latency, solve_rate=0.6) as sim:
            from bench.p1_overhead import _bare

            asyncio.run(_bare(sim.base_url, 1, tmp, f"warm-{latency}"))  # imports, tokenizer, sandbox root
            for r in range(rounds):
                order = list(seen) if (li + r) % 2 == 0 else list(reversed(list(seen)))
                for which in order:
                    load = load_average()
                    m = _one(which, sim.base_url, groups, tmp, f"{latency}-{r}-{which.split()[0]}")
                    m["load_before"] = load
                    seen[which].append(m)
        for which, runs in seen.items():
            rows.append(
                {
                    "latency_ms": latency,
                    "runner": which,
                    "groups": groups,
                    "runs": len(runs),
                    "rollouts_per_s": rnd(median([m["rollouts_per_s"] for m in runs]), 3),
                    "cpu_ms_per_rollout_process": rnd(median([m["cpu_ms_per_rollout_process"] for m in runs]), 1),
                    "cpu_ms_per_rollout_children": rnd(median([m["cpu_ms_per_rollout_children"] for m in runs]), 1),
                    "loads": [m["load_before"] for m in runs],
                }
            )
    return {
        "rows": rows,
        "group_size": GROUP_SIZE,
        "rounds": rounds,
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "figures": [],
        "quick": quick,
    }


def table(result: dict[str, Any]) -> str:
    lines = [
        "| server latency | runner | groups | rollouts/s | CPU ms/rollout (process + children) |",
        "|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['latency_ms']:.0f} ms | {row['runner']} | {row['groups']} | {row['rollouts_per_s']} | "
            f"{row['cpu_ms_per_rollout_process']} + {row['cpu_ms_per_rollout_children']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.p7_peers", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--latencies", default=None, help="comma-separated ms, default 20,300,2000")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    latencies = [float(x) for x in args.latencies.split(",")] if args.latencies else None
    result = run(args.quick, latencies=latencies, rounds=args.rounds)
    print(table(result), file=sys.stderr)
    print(json.dumps(result, indent=1, default=str))
    if not args.no_write:
        write_results(SECTION, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
