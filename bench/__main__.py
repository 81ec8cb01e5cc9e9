"""``python -m bench`` (``make bench``): every benchmark, a table of figures vs targets,
and bench/results.json (read-modify-write, one section per benchmark).

    python -m bench [--quick] [--only p1,p3] [--skip sim] [--no-write]

Each benchmark runs in a fresh interpreter so threads, pools and heap left by
one never weigh on the next. Full run: about 13 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

from bench.common import REPO, load_average, machine, write_results

# (key, module, results.json section)
BENCHES: list[tuple[str, str, str]] = [
    ("sim", "bench.bench_sim", "sim"),
    ("p1", "bench.p1_overhead", "p1_overhead"),
    ("p2", "bench.p2_efficiency", "p2_efficiency"),
    ("p2floor", "bench.p2_floor", "p2_floor"),
    ("p3", "bench.p3_responsiveness", "p3_responsiveness"),
    ("p4", "bench.p4_memory", "p4_memory"),
    ("p5", "bench.p5_startup", "p5_startup"),
    ("scaling", "bench.scaling", "scaling"),
    ("peers", "bench.p7_peers", "p7_peers"),
]


def _code(module: str, quick: bool) -> str:
    if module == "bench.bench_sim":  # the existing bench has its own entry point
        seconds = 1.0 if quick else 5.0
        call = f"r = m.run_bench(seconds={seconds}, concurrency=64 if {quick} else 256)"
        figs = (
            "r['figures'] = [figure('sim chat completions/s', r['chat_completions_per_s'], m.TARGET_PER_S, "
            "'req/s', True)]"
        )
        return (
            f"import json, {module} as m; from bench.common import figure; {call}; {figs}; "
            "print('RESULT' + json.dumps(r, default=str))"
        )
    return f"import json, {module} as m; print('RESULT' + json.dumps(m.run({quick}), default=str))"


def run_one(module: str, quick: bool, timeout: float = 1200) -> dict[str, Any]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _code(module, quick)], cwd=str(REPO), capture_output=True, text=True, timeout=timeout
    )
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("RESULT")), None)
    if line is None:
        tail = (proc.stderr or proc.stdout)[-3000:]
        return {
            "error": f"{module} failed (exit {proc.returncode})",
            "stderr_tail": tail,
            "figures": [],
            "bench_seconds": round(time.perf_counter() - t0, 1),
        }
    result = json.loads(line[len("RESULT") :])
    result["bench_seconds"] = round(time.perf_counter() - t0, 1)
    return result


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def table(results: dict[str, dict[str, Any]]) -> str:
    rows = [("figure", "value", "target", "verdict")]
    for key, res in results.items():
        if res.get("error"):
            rows.append((key, "ERROR", "", res["error"]))
        for f in res.get("figures", []):
            rows.append(
                (
                    f["name"],
                    f"{_fmt(f['value'])} {f['unit']}",
                    f"{f['op']} {_fmt(f['target'])} {f['unit']}",
                    f["verdict"],
                )
            )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--quick", action="store_true", help="tiny sizes (seconds, not minutes); figures are not meaningful"
    )
    ap.add_argument("--only", default="", help=f"comma-separated subset of {','.join(k for k, _, _ in BENCHES)}")
    ap.add_argument("--skip", default="", help="comma-separated benchmarks to leave out")
    ap.add_argument("--no-write", action="store_true", help="do not update bench/results.json")
    args = ap.parse_args(argv)
    only = {x for x in args.only.split(",") if x}
    skip = {x for x in args.skip.split(",") if x}
    unknown = (only | skip) - {k for k, _, _ in BENCHES}
    if unknown:
        ap.error(f"unknown benchmark(s) {sorted(unknown)}; expected some of {[k for k, _, _ in BENCHES]}")
    chosen = [b for b in BENCHES if (not only or b[0] in only) and b[0] not in skip]
    t0 = time.perf_counter()
    info = machine()
    print(
        f"machine: {info['nproc']} cpus ({info['cpu']}), {info['mem_gb']} GB, load average {info['load_average']}, "
        f"Python {info['python']}",
        flush=True,
    )
    results: dict[str, dict[str, Any]] = {}
    for key, module, section in chosen:
        print(f"running {key} ({module}{' --quick' if args.quick else ''}) ...", flush=True)
        res = run_one(module, args.quick, timeout=3600 if key == "peers" else 1200)  # peers: 18 runs, own processes
        results[key] = res
        for f in res.get("figures", []):
            print(
                f"  {f['name']}: {_fmt(f['value'])} {f['unit']} (target {f['op']} {_fmt(f['target'])}) {f['verdict']}",
                flush=True,
            )
        if res.get("error"):
            print(f"  ERROR: {res['error']}\n{res.get('stderr_tail', '')}", flush=True)
        print(f"  ({res['bench_seconds']}s, load average now {load_average()})", flush=True)
        if not args.no_write:
            write_results(section, res)
    info["load_average_after"] = load_average()
    info["total_seconds"] = round(time.perf_counter() - t0, 1)
    info["quick"] = args.quick
    if not args.no_write:
        full = not args.quick and not only and not skip
        # Only a full run describes the documented figures; a partial one is kept aside.
        write_results("machine" if full else "machine_last_partial_run", info)
        if full:
            from bench.report import update

            update()
    print()
    print(table(results))
    print(
        f"\ntotal {info['total_seconds']}s; load average before {info['load_average']} after {info['load_average_after']}"
    )
    return 1 if any(r.get("error") for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
