"""Simulator throughput: chat completions per second at zero latency.

    python -m bench.bench_sim [--seconds S] [--concurrency C] [--no-write]

The server runs as ``SimServer`` (its own thread + uvloop) in this process; the
load generator runs in a separate process (2 cores here: client and server must
not share one event loop or one GIL). The client is raw aiohttp posting
pre-serialised request bodies — the openai client would be the bottleneck.
Requests mix a first turn and a later turn of a terminal task, with four tools.
The result goes to ``bench/results.json`` under ``"sim"`` (read-modify-write).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path
from typing import Any

TARGET_PER_S = 2000.0
RESULTS = Path(__file__).resolve().parent / "results.json"

_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "terminal",
            "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a text file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Write a text file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "patch",
            "description": "Replace text in a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    },
]
_TASK = (
    "The file log.txt holds a service log. Count the lines that contain the word ERROR and write just "
    "that number to error_count.txt."
)


def _bodies() -> list[bytes]:
    first = [
        {"role": "system", "content": "You are a careful agent working in a Linux terminal."},
        {"role": "user", "content": _TASK},
    ]
    later = first + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "terminal", "arguments": '{"command": "ls -la"}'},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_a",
            "content": '{"output": "log.txt\\n", "exit_code": 0, "error": null}',
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "terminal", "arguments": '{"command": "grep -c ERROR log.txt"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_b", "content": '{"output": "3\\n", "exit_code": 0, "error": null}'},
    ]
    return [
        json.dumps(
            {"model": "hermes-sim", "messages": m, "tools": _TOOLS, "temperature": 1.0, "max_tokens": 512}
        ).encode()
        for m in (first, later)
    ]


# --------------------------------------------------------------------------- client process


async def _load(url: str, seconds: float, concurrency: int, warmup: float) -> dict[str, Any]:
    import aiohttp

    bodies = _bodies()
    headers = {"Content-Type": "application/json", "Authorization": "Bearer x"}
    ok = errors = 0
    lat: list[float] = []
    t_start = time.perf_counter()
    t_measure = t_start + warmup
    t_end = t_measure + seconds
    conn = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=30)) as session:

        async def worker(i: int) -> None:
            nonlocal ok, errors
            k = i
            while True:
                t0 = time.perf_counter()
                if t0 >= t_end:
                    return
                try:
                    async with session.post(url, data=bodies[k % len(bodies)], headers=headers) as resp:
                        await resp.read()
                        good = resp.status == 200
                except aiohttp.ClientError:
                    good = False
                t1 = time.perf_counter()
                k += 1
                if t0 >= t_measure and t1 <= t_end:
                    if good:
                        ok += 1
                        lat.append(t1 - t0)
                    else:
                        errors += 1

        await asyncio.gather(*(worker(i) for i in range(concurrency)))
    lat.sort()
    return {
        "ok": ok,
        "errors": errors,
        "per_s": ok / seconds,
        "p50_ms": round(1000 * lat[len(lat) // 2], 2) if lat else None,
        "p99_ms": round(1000 * lat[int(len(lat) * 0.99)], 2) if lat else None,
    }


def _pin(cpu: int) -> None:
    # Keep client and server on different cores so a send does not wake the
    # peer onto our own core and stall us (measured: it matters on 2 vCPUs).
    try:
        n = os.cpu_count() or 1
        if n >= 2 and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {cpu % n})
    except OSError:
        pass


def _client_main(url: str, seconds: float, concurrency: int, warmup: float, out: Any) -> None:
    _pin(1)
    try:
        import uvloop

        result = uvloop.run(_load(url, seconds, concurrency, warmup))
    except ImportError:
        result = asyncio.run(_load(url, seconds, concurrency, warmup))
    out.put(result)


# --------------------------------------------------------------------------- driver


def _cpu_s() -> float:
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def run_bench(seconds: float = 5.0, concurrency: int = 256, warmup: float = 0.5) -> dict[str, Any]:
    from hermes_console.sim import SimConfig

    cfg = SimConfig(max_concurrency=max(concurrency, 1), seed=0)
    before = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    _pin(0)  # the server thread inherits this
    try:
        return _run_pinned(cfg, seconds, concurrency, warmup)
    finally:
        if before is not None:
            os.sched_setaffinity(0, before)


def _run_pinned(cfg: Any, seconds: float, concurrency: int, warmup: float) -> dict[str, Any]:
    from hermes_console.sim import SimServer

    with SimServer(cfg) as sim:
        url = f"{sim.base_url}/v1/chat/completions"
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        proc = ctx.Process(target=_client_main, args=(url, seconds, concurrency, warmup, q), daemon=True)
        proc.start()
        cpu0 = _cpu_s()
        try:
            load = q.get(timeout=seconds + warmup + 60)
            server_cpu_s = _cpu_s() - cpu0
        finally:
            proc.join(10)
            if proc.is_alive():
                proc.terminate()
        server_stats = sim.stats()
    served = server_stats["requests"]["chat_completions"]
    cpu_us = 1e6 * server_cpu_s / served if served else None
    return {
        "chat_completions_per_s": round(load["per_s"], 1),
        "target_per_s": TARGET_PER_S,
        "meets_target": load["per_s"] >= TARGET_PER_S,
        "ok": load["ok"],
        "errors": load["errors"],
        "p50_ms": load["p50_ms"],
        "p99_ms": load["p99_ms"],
        "seconds": seconds,
        "concurrency": concurrency,
        # CPU the server process spent per request (includes warmup): the capacity
        # of one free core is about 1e6 / this, whatever else the machine is doing.
        "server_cpu_us_per_request": round(cpu_us, 1) if cpu_us else None,
        "server_capacity_per_core_per_s": round(1e6 / cpu_us) if cpu_us else None,
        "load_average_1m": round(os.getloadavg()[0], 2),
        "client": "raw aiohttp in a separate process (uvloop), pre-serialised bodies",
        "server": "SimServer thread + uvloop, zero latency",
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "server_latency_ms": server_stats["latency_ms"],
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def write_result(result: dict[str, Any], path: Path = RESULTS) -> None:
    try:
        data = json.loads(path.read_text()) if path.exists() else {}
    except ValueError:
        data = {}
    if not isinstance(data, dict):
        data = {}
    data["sim"] = result
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.bench_sim", description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--warmup", type=float, default=0.5)
    ap.add_argument("--no-write", action="store_true", help="do not update bench/results.json")
    args = ap.parse_args(argv)
    result = run_bench(args.seconds, args.concurrency, args.warmup)
    rate = result["chat_completions_per_s"]
    verdict = "meets" if result["meets_target"] else "BELOW"
    print(
        f"sim: {rate:.0f} chat completions/s ({verdict} target {TARGET_PER_S:.0f}/s) "
        f"at concurrency {args.concurrency} over {args.seconds:g}s; ok={result['ok']} errors={result['errors']} "
        f"p50={result['p50_ms']}ms p99={result['p99_ms']}ms"
    )
    print(
        f"     server CPU {result['server_cpu_us_per_request']} us/request "
        f"(~{result['server_capacity_per_core_per_s']}/s per free core); load average {result['load_average_1m']}"
    )
    if not args.no_write:
        write_result(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
