"""CPU per Phase 1 chat call: the lean chat path vs the openai client, same server, same calls.

    python -m bench.chat_cpu [--calls 300] [--rounds 3] [--concurrency 32]

An atroposlib ServerManager with ``LeanOpenAIServer`` (``environments.lean_chat``) sends the
same multi-turn, tool-carrying chat request ``--calls`` times (``--concurrency`` at once) to
the simulator in its own process (latency 0); the openai-client side is the same server
object with ``HERMES_OPENAI_CLIENT=1`` (atroposlib's own path, with ``environments.patches``'
request fast path). Alternated rounds; CPU is this process's (``RUSAGE_SELF``), per call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
from typing import Any

from bench.common import SimProcess, load_average, median, rnd


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _request() -> dict[str, Any]:
    from environments.tools import get_tool_definitions

    tools = get_tool_definitions(enabled_toolsets=["terminal", "file"], quiet_mode=True)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful agent. " * 20},
        {"role": "user", "content": "Count the ERROR lines in app.log and write the count to error_count.txt."},
    ]
    for i in range(3):  # a conversation a few tool turns in
        call = {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "terminal", "arguments": '{"command": "ls"}'},
        }
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": json.dumps({"output": "x" * 400})})
    return {"messages": messages, "tools": tools, "n": 1, "temperature": 1.0, "max_tokens": 256}


async def _calls(manager: Any, request: dict[str, Any], calls: int, concurrency: int) -> float:
    sem = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with sem:
            reply = await manager.chat_completion(**request)
            assert reply.choices, "no choices"

    c0 = _cpu_s()
    await asyncio.gather(*(one() for _ in range(calls)))
    return 1000 * (_cpu_s() - c0) / calls


async def _measure(base_url: str, calls: int, rounds: int, concurrency: int) -> dict[str, list[float]]:
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig
    from atroposlib.envs.server_handling.server_manager import ServerManager

    import environments.hermes_base_env  # noqa: F401 - applies environments.patches as any env does
    from environments.lean_chat import OPT_OUT_VAR, LeanOpenAIServer

    config = APIServerConfig(
        base_url=f"{base_url}/v1", api_key="x", model_name="m", server_type="openai", health_check=False
    )
    manager = ServerManager([config], server_class=LeanOpenAIServer)
    request = _request()
    out: dict[str, list[float]] = {"lean_ms": [], "openai_client_ms": []}
    try:
        for side in ("lean_ms", "openai_client_ms"):  # warm both paths (pools, imports)
            os.environ[OPT_OUT_VAR] = "1" if side == "openai_client_ms" else "0"
            await _calls(manager, request, 20, concurrency)
        for i in range(rounds):
            for side in ("lean_ms", "openai_client_ms") if i % 2 == 0 else ("openai_client_ms", "lean_ms"):
                os.environ[OPT_OUT_VAR] = "1" if side == "openai_client_ms" else "0"
                out[side].append(await _calls(manager, request, calls, concurrency))
    finally:
        os.environ.pop(OPT_OUT_VAR, None)
        for server in manager.servers:
            await server.aclose()
            await server.openai.close()
    return out


def run(calls: int = 300, rounds: int = 3, concurrency: int = 32) -> dict[str, Any]:
    before = load_average()
    with SimProcess(0.0, solve_rate=1.0) as sim:
        runs = asyncio.run(_measure(sim.base_url, calls, rounds, concurrency))
    lean, client = median(runs["lean_ms"]), median(runs["openai_client_ms"])
    return {
        "calls": calls,
        "rounds": rounds,
        "concurrency": concurrency,
        "cpu_ms_per_call_lean": rnd(lean, 3),
        "cpu_ms_per_call_openai_client": rnd(client, 3),
        "lean_over_client": rnd(lean / client if client else None, 3),
        "runs": {k: [rnd(x, 3) for x in v] for k, v in runs.items()},
        "load_average_before": before,
        "load_average_after": load_average(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.chat_cpu", description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--no-write", action="store_true", help="accepted for bench.ab; nothing is written anyway")
    args = ap.parse_args(argv)
    print(json.dumps(run(args.calls, args.rounds, args.concurrency), indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
