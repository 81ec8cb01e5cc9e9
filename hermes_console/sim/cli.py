"""``hermes-console sim`` / ``python -m hermes_console.sim``: run the simulator until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from typing import Any

from pydantic import ValidationError

from hermes_console.sim.config import FAULT_KINDS, LatencyConfig, SimConfig


def build_parser(prog: str = "hermes-console sim") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Run the embedded inference simulator on 127.0.0.1.")
    p.add_argument("--port", type=int, default=0, help="port to bind (0 = any free port; default 0)")
    p.add_argument("--phase2", action="store_true", help="print Phase 2 (vLLM/SGLang /generate) connection hints")
    p.add_argument("--latency-ms", type=float, default=0.0, help="mean time to first token in ms (default 0)")
    p.add_argument(
        "--latency-sigma",
        type=float,
        default=None,
        help="lognormal shape; when given, latency is lognormal with --latency-ms as its mean",
    )
    p.add_argument("--tokens-per-s", type=float, default=0.0, help="generation rate; 0 = instant (default)")
    p.add_argument("--concurrency", type=int, default=256, help="requests served at once; the rest queue")
    p.add_argument("--solve-rate", type=float, default=0.6, help="share of episodes the policy solves (default 0.6)")
    p.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="KIND=RATE",
        help=f"inject a fault by rate, repeatable; kinds: {', '.join(FAULT_KINDS)}",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", default="hermes-sim", help="model name reported by /v1/models")
    p.add_argument("--tool-format", default="hermes", help="tool-call parser format for Phase 2 text")
    return p


def parse_faults(specs: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for spec in specs:
        kind, sep, rate = spec.partition("=")
        if not sep:
            raise ValueError(f"--fault {spec!r}: expected KIND=RATE, e.g. http_500=0.1")
        try:
            out[kind.strip()] = float(rate)
        except ValueError:
            raise ValueError(f"--fault {spec!r}: rate {rate!r} is not a number") from None
    return out


def config_from_args(args: argparse.Namespace) -> SimConfig:
    latency = LatencyConfig(
        mode="lognormal" if args.latency_sigma is not None else "fixed",
        mean_ms=args.latency_ms,
        sigma=args.latency_sigma if args.latency_sigma is not None else 0.5,
        tokens_per_s=args.tokens_per_s,
    )
    return SimConfig(
        port=args.port,
        seed=args.seed,
        model_name=args.model,
        latency=latency,
        max_concurrency=args.concurrency,
        solve_rate=args.solve_rate,
        faults=parse_faults(args.fault),
        tool_call_format=args.tool_format,
    )


def _hints(url: str, config: SimConfig, phase2: bool) -> str:
    lines = [
        f"hermes-sim listening on {url}",
        f"  OpenAI base_url: {url}/v1   (model {config.model_name!r}, any api_key)",
        f"  health: {url}/health   stats: {url}/stats   faults: POST {url}/admin/faults",
    ]
    if phase2:
        from environments.tokenizer import local_tokenizer_path

        lines += [
            "  Phase 2: APIServerConfig(server_type='vllm' (or 'sglang'),",
            f"           base_url='{url}/v1', tokenizer_name='{local_tokenizer_path()}', api_key='x')",
            f"           and set server_manager.tool_parser = {config.tool_call_format!r}",
        ]
    lines.append("Ctrl-C to stop.")
    return "\n".join(lines)


async def _serve(config: SimConfig, phase2: bool) -> None:
    from hermes_console.sim.server import SimServer

    server = SimServer(config)
    url = await server.start_async()
    print(_hints(url, config, phase2), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await server.stop_async()
        print("hermes-sim stopped.", flush=True)


def _run(coro: Any, use_uvloop: bool) -> None:
    if use_uvloop:
        try:
            import uvloop

            uvloop.run(coro)
            return
        except ImportError:
            pass
    asyncio.run(coro)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = config_from_args(args)
    except ValidationError as exc:
        for err in exc.errors(include_url=False):
            where = ".".join(str(p) for p in err["loc"])
            print(f"hermes-console sim: {where}: {err['msg'].removeprefix('Value error, ')}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"hermes-console sim: {exc}", file=sys.stderr)
        return 2
    try:
        _run(_serve(config, args.phase2), config.use_uvloop)
    except OSError as exc:  # e.g. port already in use
        print(f"hermes-console sim: cannot listen on port {config.port}: {exc}", file=sys.stderr)
        return 1
    return 0
