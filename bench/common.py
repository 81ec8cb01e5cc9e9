"""Shared bench helpers: machine facts, medians, RSS, results.json read-modify-write,
the simulator in its own process, and terminal_tasks configs for both runners.

Rules every benchmark follows: targets are RATIOS or latencies measured side by
side in one run, alternated and reported as medians; nothing here asserts timing.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results.json"
REPO = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------- numbers


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def pct(values: Iterable[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); nan for no values."""
    data = sorted(values)
    if not data:
        return float("nan")
    k = min(len(data) - 1, max(0, math.ceil(q / 100.0 * len(data)) - 1))
    return float(data[k])


def rnd(x: float | None, nd: int = 3) -> float | None:
    if x is None or x != x:  # None or nan
        return None
    return round(float(x), nd)


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def rss_mb() -> float:
    """VmRSS of this process after a full collection (what the P4 target is about)."""
    gc.collect()
    with open("/proc/self/status") as fp:
        for line in fp:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def machine() -> dict[str, Any]:
    mem_total = None
    try:
        with open("/proc/meminfo") as fp:
            for line in fp:
                if line.startswith("MemTotal:"):
                    mem_total = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    cpu = ""
    try:
        with open("/proc/cpuinfo") as fp:
            m = re.search(r"model name\s*:\s*(.+)", fp.read())
            cpu = m.group(1).strip() if m else ""
    except OSError:
        pass
    versions: dict[str, str] = {}
    from importlib import metadata

    for dist in ("atroposlib", "textual", "openai", "aiohttp", "uvloop", "transformers", "pydantic"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "-"
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "mem_gb": mem_total,
        "load_average": load_average(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "versions": versions,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


# --------------------------------------------------------------------------- results.json


def publish(section: str, result: dict[str, Any], write: bool) -> None:
    """A bench's command line ends here: the result on stdout, and in results.json unless
    ``--no-write``."""
    print(json.dumps(result, indent=1, default=str))
    if write:
        write_results(section, result)


def write_results(section: str, result: dict[str, Any], path: Path = RESULTS) -> None:
    """Read-modify-write one section (the same protocol bench_sim uses)."""
    try:
        data = json.loads(path.read_text()) if path.exists() else {}
    except ValueError:
        data = {}
    if not isinstance(data, dict):
        data = {}
    data[section] = result
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    os.replace(tmp, path)


def verdict(value: float | None, target: float, higher_is_better: bool) -> str:
    if value is None or value != value:
        return "n/a"
    ok = value >= target if higher_is_better else value < target
    return "PASS" if ok else "MISS"


def figure(name: str, value: float | None, target: float, unit: str, higher_is_better: bool) -> dict[str, Any]:
    """One reported figure with its target and verdict (what the summary table prints)."""
    return {
        "name": name,
        "value": rnd(value, 4),
        "target": target,
        "unit": unit,
        "op": ">=" if higher_is_better else "<",
        "verdict": verdict(value, target, higher_is_better),
    }


# --------------------------------------------------------------------------- simulator process


class SimProcess:
    """The simulator in its own process, like a real inference server: the
    process under test does not pay its CPU or share its GIL."""

    def __init__(self, latency_ms: float, *, solve_rate: float = 1.0, concurrency: int = 4096, seed: int = 0) -> None:
        self.args = [
            sys.executable,
            "-m",
            "hermes_console.sim",
            "--port",
            "0",
            "--latency-ms",
            str(latency_ms),
            "--solve-rate",
            str(solve_rate),
            "--concurrency",
            str(concurrency),
            "--seed",
            str(seed),
        ]
        self.proc: subprocess.Popen[str] | None = None
        self.base_url = ""

    def start(self, timeout: float = 60.0) -> str:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            self.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=str(REPO), env=env
        )
        end = time.monotonic() + timeout
        assert self.proc.stdout is not None
        while time.monotonic() < end:
            line = self.proc.stdout.readline()
            if not line:
                break
            m = re.search(r"(http://127\.0\.0\.1:\d+)", line)
            if m:
                self.base_url = m.group(1)
                # keep reading its output off the pipe so it never blocks
                import threading

                threading.Thread(target=self._drain, daemon=True).start()
                return self.base_url
        self.stop()
        raise RuntimeError(f"simulator did not start: {' '.join(self.args)}")

    def _drain(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for _ in self.proc.stdout:
            pass

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def __enter__(self) -> SimProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --------------------------------------------------------------------------- terminal_tasks data

# Tasks whose script is inspect -> compute -> write -> verify -> answer: with
# solve_rate=1 every rollout makes exactly 4 tool turns and a final answer.
FOUR_TOOL_TURN_TASKS = (
    "count_errors",
    "sort_unique",
    "csv_sum",
    "word_count",
    "extract_column",
    "reverse_lines",
    "uppercase",
    "line_count_total",
    "json_count",
    "largest_file",
)


def four_turn_tasks_file(directory: str | None = None) -> str:
    """A tasks.jsonl with only the 4-tool-turn tasks (all in the train split)."""
    from environments.terminal_tasks.tasks import DEFAULT_TASKS_PATH

    rows = []
    for line in Path(DEFAULT_TASKS_PATH).read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        if row["task_id"] in FOUR_TOOL_TURN_TASKS:
            row["split"] = "train"
            rows.append(row)
    out_dir = Path(directory or tempfile.mkdtemp(prefix="hc-bench-tasks-"))
    out = out_dir / "tasks_4turn.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(out)


def bench_tmpdir(prefix: str) -> str:
    return tempfile.mkdtemp(prefix=f"hc-bench-{prefix}-")


# --------------------------------------------------------------------------- old code side by side


def old_package_dir(rev: str, package: str = "environments") -> str:
    """``package`` as of git ``rev``, extracted (``git archive``) into a fresh temp dir: put it
    first on PYTHONPATH to run the old code beside this checkout's."""
    out = tempfile.mkdtemp(prefix="hermes-bench-old-")
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, package], capture_output=True, check=True, timeout=60
    )
    subprocess.run(["tar", "-x", "-C", out], input=archive.stdout, check=True, timeout=60)
    return out


def run_child_result(code: str, args: Sequence[str], pythonpath: str, timeout: float = 600) -> dict[str, Any]:
    """Run ``python -c code *args`` with ``pythonpath`` first (cwd there too); the JSON of its
    last line starting with ``RESULT``."""
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=pythonpath),
        timeout=timeout,
        cwd=pythonpath,
    )
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT")]
    if not line:
        raise RuntimeError(f"bench child failed ({pythonpath} {' '.join(args)}): {proc.stderr[-1500:]}")
    return json.loads(line[-1][len("RESULT") :])


def runtime_process_gc(tune: bool) -> contextlib.AbstractContextManager[None]:
    """The garbage-collector setup of a hermes-console process (``run_console``, the headless
    runner: thresholds raised, what is alive frozen); CPython's defaults back afterwards, so
    what runs next in the same process (a bare atroposlib side, a test) gets what it would."""
    if not tune:
        return contextlib.nullcontext()
    from hermes_console.runtime import gc_tuning

    return gc_tuning.tuned()
