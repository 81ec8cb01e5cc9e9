"""A/B in one run: a benchmark module at an older commit vs the working tree, alternated.

    python -m bench.ab --old 00440f7 --rounds 3 bench.p3_responsiveness -- --samples 8

The old side runs from a ``git archive`` copy of ``--old`` (same venv, same machine);
each run is a fresh interpreter with ``--no-write``. Rounds alternate which side goes
first; the report is the median of each numeric figure per side, with the load average
before and after every run (the box is shared: a single pair means little).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import load_average, median, rnd

ROOT = Path(__file__).resolve().parent.parent


def old_tree(rev: str) -> Path:
    """A pristine copy of ``rev`` (cached per commit under the temp dir)."""
    sha = subprocess.run(
        ["git", "rev-parse", "--short", rev], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()
    dest = Path(tempfile.gettempdir()) / f"hermes-bench-old-{sha}"
    if not (dest / "bench").is_dir():
        dest.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "archive", sha], cwd=ROOT, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def run_once(tree: Path, module: str, args: list[str], timeout_s: float) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.run(
        [sys.executable, "-m", module, "--no-write", *args],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    out = proc.stdout
    start = out.find("{")
    if proc.returncode != 0 or start < 0:
        raise RuntimeError(f"{module} in {tree} failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    figures, _ = json.JSONDecoder().raw_decode(out[start:])  # the first document (p2 prints its runs after it)
    return figures


def _flat(run: dict[str, Any]) -> dict[str, Any]:
    """Numeric figures one level down too (``cpu_ms_per_rollout.loop_thread_ms``)."""
    out = dict(run)
    for key, value in run.items():
        if isinstance(value, dict):
            out.update({f"{key}.{k}": v for k, v in value.items()})
    return out


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    runs = [_flat(r) for r in runs]
    keys = sorted({k for r in runs for k, v in r.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
    return {k: rnd(median([r[k] for r in runs if isinstance(r.get(k), (int, float))]), 4) for k in keys}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1 :]
        argv = argv[: argv.index("--")]
    ap = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.splitlines()[0])
    ap.add_argument("module")
    ap.add_argument("--old", required=True, help="commit for the A side")
    ap.add_argument("--new", default=None, help="commit for the B side (default: the working tree)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=900.0, help="per run, seconds")
    args = ap.parse_args(argv)
    sides = {"old": old_tree(args.old), "new": old_tree(args.new) if args.new else ROOT}
    runs: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
    loads: list[dict[str, Any]] = []
    for i in range(args.rounds):
        for side in ("old", "new") if i % 2 == 0 else ("new", "old"):
            before = load_average()
            runs[side].append(run_once(sides[side], args.module, extra, args.timeout))
            loads.append({"round": i, "side": side, "load_before": before, "load_after": load_average()})
            print(f"round {i} {side} done", file=sys.stderr, flush=True)
    report = {
        "module": args.module,
        "args": extra,
        "old": args.old,
        "new": args.new or "working tree",
        "rounds": args.rounds,
        "old_median": summarize(runs["old"]),
        "new_median": summarize(runs["new"]),
        "loads": loads,
        "runs": runs,
    }
    print(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
