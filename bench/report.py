"""Render bench/results.json into BENCHMARKS.md (the block between the markers).

python -m bench.report        # after python -m bench; `python -m bench` calls it on full runs
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench.common import REPO, RESULTS

DOC = REPO / "BENCHMARKS.md"
START, END = "<!-- figures:start -->", "<!-- figures:end -->"
ORDER = ["sim", "p1_overhead", "p2_efficiency", "p2_floor", "p3_responsiveness", "p4_memory", "p5_startup"]


def _num(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"
    return str(v)


def _machine(m: dict[str, Any]) -> list[str]:
    v = m.get("versions", {})
    return [
        f"- measured {m.get('measured_at', '?')}{' (quick run)' if m.get('quick') else ''}, "
        f"`python -m bench` took {m.get('total_seconds', '?')} s",
        f"- {m.get('nproc')} CPUs ({m.get('cpu')}), {m.get('mem_gb')} GB RAM, shared with other sessions: "
        f"load average {m.get('load_average')} before, {m.get('load_average_after')} after",
        f"- Python {m.get('python')} on {m.get('platform')}",
        "- " + ", ".join(f"{k} {val}" for k, val in v.items()),
    ]


def render(results: dict[str, Any]) -> str:
    lines: list[str] = []
    if "machine" in results:
        lines += _machine(results["machine"]) + [""]
    lines += ["| figure | value | target | verdict |", "|---|---|---|---|"]
    for section in ORDER:
        res = results.get(section)
        if not res:
            continue
        figs = res.get("figures") or []
        if section == "sim" and not figs and "chat_completions_per_s" in res:
            figs = [
                {
                    "name": "sim chat completions/s",
                    "value": res["chat_completions_per_s"],
                    "unit": "req/s",
                    "op": ">=",
                    "target": res.get("target_per_s"),
                    "verdict": "PASS" if res.get("meets_target") else "MISS",
                }
            ]
        for f in figs:
            lines.append(
                f"| {f['name']} | {_num(f['value'])} {f['unit']} | {f['op']} {_num(f['target'])} {f['unit']} "
                f"| **{f['verdict']}** |"
            )
    sc = results.get("scaling")
    if sc:
        lines += [
            "",
            f"Scaling ({sc.get('env')}; {sc.get('turns_per_rollout')} turns of {sc.get('turn_sleep_s')} s; "
            f"reducer alone {sc.get('reducer_only_us_per_event')} µs/event):",
            "",
            "| concurrent rollouts | rollouts/s | ideal | efficiency | events/s | CPU µs/event | CPU cores | max queue |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for row in sc.get("curve", []):
            lines.append(
                f"| {row['concurrency']} | {_num(row['rollouts_per_s'])} | {_num(row['ideal_rollouts_per_s'])} "
                f"| {_num(row['efficiency'])} | {_num(row['events_per_s'])} | {_num(row['cpu_us_per_event'])} "
                f"| {_num(row['cpu_cores_used'])} | {_num(row['max_queue_depth'])} |"
            )
    return "\n".join(lines)


def update(doc: Path = DOC, results_path: Path = RESULTS) -> bool:
    if not doc.exists() or not results_path.exists():
        return False
    text = doc.read_text()
    if START not in text or END not in text:
        return False
    results = json.loads(results_path.read_text())
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    doc.write_text(f"{head}{START}\n{render(results)}\n{END}{tail}")
    return True


def main(argv: list[str] | None = None) -> int:
    ok = update()
    print("BENCHMARKS.md updated" if ok else "BENCHMARKS.md or bench/results.json missing (or no markers)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
