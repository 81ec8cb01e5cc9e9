"""P2's floor on this box: the same batch run by the least a Python runtime must do.

    python -m bench.p2_floor [--rollouts 256] [--latency-ms 2000] [--repeats 2] [--uvloop] [--no-write]

P2 (``bench.p2_efficiency``) asks 256 concurrent 4-tool-turn rollouts to reach 0.90 of the
latency-bound ideal. Part of each turn's burst is the sandboxes' own commands (``ls``,
``grep``, ``python3 -c``...), which no runtime can make cheaper. This bench runs the same
batch with nothing else: the same simulator in its own process, the same prompts, tool
schemas and replies (so the same commands), each rollout with one plain persistent ``bash``
in a temp dir (the task's setup commands sent while the first call is out, as the env does),
``read_file``/``write_file`` done on the host, the check file compared for a reward, the
shell killed and the dir removed at the end. No sandbox machine (no cgroups, no frame
protocol, no verifier runner), no events, no trainer tokens, no atroposlib, no retries.

Its efficiency (its own solo wall over its batch wall, as P2 computes ours) is about the best an
in-process Python runtime can reach on this box: a runtime that must also isolate its sandboxes
and make trainer data does more work in the same bursts, never less. ``--uvloop`` runs it (and
the env) on uvloop's loop; ``--builtin-commands`` runs ``:`` in place of each command. It runs
alternated with P2's own measurement of the env, in one process, so both see the same box.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

import aiohttp

from bench.common import (
    SimProcess,
    bench_tmpdir,
    figure,
    four_turn_tasks_file,
    load_average,
    median,
    rnd,
    write_results,
)
from environments.sandboxes.bwrap import SANDBOX_PATH

SECTION = "p2_floor"
TARGET = 0.90
MAX_TURNS = 10


class PlainShell:
    """One ``bash`` kept open; a command's output ends at a random marker line."""

    def __init__(self, workdir: str) -> None:
        env = {"PATH": SANDBOX_PATH, "HOME": workdir, "LANG": "C.UTF-8", "TERM": "dumb"}
        self.proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=workdir,
            env=env,
            start_new_session=True,
        )
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self._out = self.proc.stdout.fileno()
        os.set_blocking(self._out, False)
        self._marker = f"__floor_{secrets.token_hex(8)}__"
        self._buffer = b""

    async def run(self, command: str) -> tuple[str, int]:
        assert self.proc.stdin is not None
        line = f"{{ {command}\n}} </dev/null 2>&1; printf '\\n%s %d\\n' {self._marker} $?\n"
        self.proc.stdin.write(line.encode())
        self.proc.stdin.flush()
        loop = asyncio.get_running_loop()
        marker = f"\n{self._marker} ".encode()
        while marker not in self._buffer:
            ready: asyncio.Future[None] = loop.create_future()
            loop.add_reader(self._out, _wake, ready)
            try:
                await ready
            finally:
                loop.remove_reader(self._out)
            chunk = os.read(self._out, 65536)
            if not chunk:
                raise RuntimeError("the shell ended")
            self._buffer += chunk
        out, rest = self._buffer.split(marker, 1)
        status, _, self._buffer = rest.partition(b"\n")
        return out.decode(errors="replace"), int(status or b"0")

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


def _wake(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)


def _host_path(root: str, path: str) -> str:
    full = os.path.normpath(os.path.join(root, path))
    if not full.startswith(root + os.sep) and full != root:
        raise ValueError(f"{path!r} is outside the workspace")
    return full


async def _tool(shell: PlainShell, root: str, name: str, args: dict[str, Any], builtin_only: bool = False) -> str:
    if name == "terminal":
        # builtin_only: the same round trip through the shell, without the command's own process
        output, code = await shell.run(":" if builtin_only else str(args.get("command", "")))
        return json.dumps({"output": output, "exit_code": code, "error": None})
    if name == "read_file":
        try:
            with open(_host_path(root, str(args["path"])), encoding="utf-8", errors="replace") as fh:
                lines = fh.read().splitlines()
        except (OSError, ValueError) as exc:
            return json.dumps({"error": str(exc)})
        return json.dumps({"content": "\n".join(f"{i + 1:6}|{line}" for i, line in enumerate(lines))})
    if name == "write_file":
        try:
            with open(_host_path(root, str(args["path"])), "w", encoding="utf-8") as fh:
                fh.write(str(args.get("content", "")))
        except (OSError, ValueError) as exc:
            return json.dumps({"error": str(exc)})
        return json.dumps({"bytes_written": len(str(args.get("content", "")))})
    return json.dumps({"error": f"unknown tool {name}"})


async def rollout(
    session: aiohttp.ClientSession,
    url: str,
    model: str,
    item: dict[str, Any],
    prompt: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    tmp: str,
    builtin_only: bool = False,
) -> tuple[float, int]:
    """(reward, model calls) for one task, everything a rollout needs and nothing else."""
    root = tempfile.mkdtemp(dir=tmp)
    shell = PlainShell(root)
    try:
        setup = asyncio.ensure_future(shell.run(" && ".join(item.get("setup") or [":"])))
        messages = list(prompt)
        calls = 0
        for _ in range(MAX_TURNS):
            body = {"model": model, "messages": messages, "tools": tools, "temperature": 1.0, "max_tokens": 2048}
            async with session.post(url, data=json.dumps(body), headers={"Content-Type": "application/json"}) as resp:
                reply = json.loads(await resp.read())
            calls += 1
            message = reply["choices"][0]["message"]
            tool_calls = message.get("tool_calls") or []
            messages.append(
                {
                    "role": "assistant",
                    "content": message.get("content") or "",
                    **({"tool_calls": tool_calls} if tool_calls else {}),
                }
            )
            if not tool_calls:
                break
            await setup
            for call in tool_calls:
                args = json.loads(call["function"].get("arguments") or "{}")
                result = await _tool(shell, root, call["function"]["name"], args, builtin_only)
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        await setup
        check = item["check"]
        try:
            with open(_host_path(root, check["path"]), encoding="utf-8") as fh:
                got = fh.read().strip()
        except (OSError, ValueError):
            got = None
        expected = str(check["expected"]).strip()
        reward = float(got is not None and (got == expected if check["type"] == "file_equals" else expected in got))
        return reward, calls
    finally:
        shell.kill()
        shutil.rmtree(root, ignore_errors=True)


async def _measure(
    base_url: str, rollouts: int, repeats: int, tmp: str, with_env: bool, builtin_only: bool
) -> dict[str, Any]:
    from bench.p2_efficiency import _concurrent, _cpu, _sandbox_path, _solo
    from bench.tt_env import TimedTerminalTasksEnv, build_bare_env, env_overrides

    tasks_path = four_turn_tasks_file(tmp)
    env = build_bare_env(
        TimedTerminalTasksEnv,
        base_url,
        env_overrides(tasks_path, os.path.join(tmp, "groups.jsonl"), total_steps=1, extra={"tool_pool_size": 256}),
    )
    await env.setup()
    tools, _ = env._resolve_tools_for_group()
    prompts = [env._build_messages(item) for item in env.train_items]
    raw = list(env.train_items)
    model = env.server.servers[0].config.model_name
    url = f"{base_url}/v1/chat/completions"
    out: dict[str, list[float]] = {
        "floor_solo": [],
        "floor_batch": [],
        "env_solo": [],
        "env_batch": [],
        "floor_reward": [],
        "floor_process_cpu_ms": [],
        "floor_children_cpu_ms": [],
    }
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def floor_batch(n: int) -> float:
            p0, c0, t0 = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN), time.perf_counter()
            results = await asyncio.gather(
                *(
                    rollout(session, url, model, raw[i % len(raw)], prompts[i % len(prompts)], tools, tmp, builtin_only)
                    for i in range(n)
                )
            )
            wall = time.perf_counter() - t0
            if n > 1:  # the shells are reaped by the time a rollout returns: their CPU is in CHILDREN
                out["floor_process_cpu_ms"].append(1000 * (_cpu(resource.RUSAGE_SELF) - p0) / n)
                out["floor_children_cpu_ms"].append(1000 * (_cpu(resource.RUSAGE_CHILDREN) - c0) / n)
            bad = [r for r in results if r[1] != 5]
            if bad:
                raise RuntimeError(f"{len(bad)} floor rollouts did not make 5 model calls: {bad[:3]}")
            out["floor_reward"].append(sum(r[0] for r in results) / n)
            return wall

        await floor_batch(1)  # warm: connections, the page cache
        if with_env:
            await _solo(env, env.train_items)
        for _ in range(repeats):  # alternated: floor solo, floor batch, env solo, env batch
            with _sandbox_path(SANDBOX_PATH):
                out["floor_solo"].append(await floor_batch(1))
                out["floor_batch"].append(await floor_batch(rollouts))
                if with_env:
                    out["env_solo"].append(await _solo(env, env.train_items))
                    out["env_batch"].append((await _concurrent(env, env.train_items, rollouts, {}))[0])
    return out


def run(
    quick: bool = False,
    *,
    rollouts: int | None = None,
    latency_ms: float | None = None,
    repeats: int | None = None,
    with_env: bool = True,
    builtin_only: bool = False,
    use_uvloop: bool = False,
) -> dict[str, Any]:
    rollouts = rollouts or (32 if quick else 256)
    latency_ms = latency_ms if latency_ms is not None else (100.0 if quick else 2000.0)
    repeats = repeats or (1 if quick else 2)
    import environments.hermes_base_env  # noqa: F401 - applies environments.patches as any env does
    from bench.common import runtime_process_gc

    tmp = bench_tmpdir("p2floor")
    load_before = load_average()
    try:
        with SimProcess(latency_ms, solve_rate=1.0) as sim, runtime_process_gc(True):
            loop_factory = None
            if use_uvloop:  # the fastest event loop there is for Python: does the floor move?
                import uvloop

                loop_factory = uvloop.new_event_loop
            with asyncio.Runner(loop_factory=loop_factory) as runner:
                m = runner.run(_measure(sim.base_url, rollouts, repeats, tmp, with_env, builtin_only))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    floor = median(m["floor_solo"]) / median(m["floor_batch"])
    env_eff = median(m["env_solo"]) / median(m["env_batch"]) if m["env_batch"] else None
    return {
        "rollouts": rollouts,
        "latency_ms": latency_ms,
        "repeats": repeats,
        "floor_efficiency": rnd(floor, 4),
        "env_efficiency": rnd(env_eff, 4),
        "env_share_of_floor": rnd(env_eff / floor, 4) if env_eff else None,
        "floor_mean_reward": rnd(median(m["floor_reward"]), 3),
        "floor_commands": "the builtin ':' in their place" if builtin_only else "the tasks' own",
        "event_loop": "uvloop" if use_uvloop else "asyncio",
        "floor_cpu_ms_per_rollout": {
            "process": rnd(median(m["floor_process_cpu_ms"]), 2),
            "shells_and_commands": rnd(median(m["floor_children_cpu_ms"]), 2),
        },
        "runs": {k: [rnd(x) for x in v] for k, v in m.items()},
        "load_average_before": load_before,
        "load_average_after": load_average(),
        # P2's target against what the least runtime reaches on this box: a MISS here means even
        # a runtime that does nothing else misses P2 on this box (the commands and the simulator
        # need the cores).
        "figures": [figure("P2 floor: the least runtime on this box (achieved / ideal)", floor, TARGET, "x", True)],
        "quick": quick,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.p2_floor", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rollouts", type=int, default=None)
    ap.add_argument("--latency-ms", type=float, default=None)
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--floor-only", action="store_true", help="skip the env's side-by-side batches")
    ap.add_argument(
        "--builtin-commands",
        action="store_true",
        help="the floor runs ':' instead of each terminal command (what the commands' own processes cost)",
    )
    ap.add_argument("--uvloop", action="store_true", help="run both sides on uvloop's event loop")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    result = run(
        args.quick,
        rollouts=args.rollouts,
        latency_ms=args.latency_ms,
        repeats=args.repeats,
        with_env=not args.floor_only,
        builtin_only=args.builtin_commands,
        use_uvloop=args.uvloop,
    )
    print(json.dumps(result, indent=1, default=str))
    if not args.no_write:
        write_results(SECTION, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
