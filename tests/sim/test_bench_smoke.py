"""The simulator bench runs end to end and reports a rate (no timing assertion)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.bench_sim import run_bench, write_result


def test_bench_reports_a_positive_rate(tmp_path: Path):
    result = run_bench(seconds=1.0, concurrency=4, warmup=0.2)
    assert result["chat_completions_per_s"] > 0 and result["ok"] > 0
    assert result["errors"] == 0
    out = tmp_path / "results.json"
    out.write_text(json.dumps({"other": {"x": 1}}))
    write_result(result, out)
    data = json.loads(out.read_text())
    assert data["other"] == {"x": 1} and data["sim"]["ok"] == result["ok"]  # read-modify-write
