"""P2 efficiency: many concurrent agent rollouts vs the latency-bound ideal.

    python -m bench.p2_efficiency [--quick] [--rollouts 256] [--latency-ms 1000] [--no-write]

Each rollout of terminal_tasks (4-tool-turn tasks, solve_rate 1) makes exactly
4 tool turns and a final answer: 5 LLM calls of fixed latency L. With every
rollout in parallel the ideal wall is one rollout's own wall time measured alone
(5·L + its tool and bookkeeping time). Efficiency = ideal / achieved wall
(= achieved rollouts/s over ideal rollouts/s). The simulator runs in its own
process like a real inference server. No observer is installed: this is the
env layer alone (P1 measures what the console adds).

The sandboxes (local backend, which passes the host's PATH through) run with the
PATH a bwrap sandbox gets (``SANDBOX_PATH``): the same commands on every box. On a
box whose PATH starts with pyenv's shims, ``python3`` (one task in ten) is a bash
script that runs pyenv before Python, ~8x the CPU of the system python3 -- the
box's, not the runtime's; each repeat also runs one batch with the host's PATH, and
reports it beside the headline figure.

The process's garbage collector is set as hermes-console's own processes set it (the console
and the headless runner: ``hermes_console/runtime/gc_tuning.py``, thresholds raised and what is
alive frozen once the env is loaded); ``--gc default`` keeps CPython's defaults (the A/B knob).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from bench.common import (
    SimProcess,
    bench_tmpdir,
    figure,
    four_turn_tasks_file,
    load_average,
    median,
    rnd,
    runtime_process_gc,
    write_results,
)
from environments.sandboxes.bwrap import SANDBOX_PATH  # what a bwrap sandbox's PATH is: the bench's sandboxes get it

TARGET = 0.90
# What an operator running 256 agent rollouts against one real inference server
# sees per turn (long prompts, a busy batch): seconds, not milliseconds.
DEFAULT_LATENCY_MS = 2000.0
SECTION = "p2_efficiency"


async def _solo(env: Any, items: list[Any]) -> float:
    t0 = time.perf_counter()
    scored, _ = await env.collect_trajectory(items[0])
    wall = time.perf_counter() - t0
    _check_turns([scored])
    return wall


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


@contextlib.contextmanager
def _sandbox_path(path: str | None) -> Iterator[None]:
    """Sandboxes made meanwhile get ``path`` (a local sandbox copies the host's PATH when it
    starts); None keeps the host's."""
    saved = os.environ.get("PATH")
    if path is not None:
        os.environ["PATH"] = path
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("PATH", None)
        else:
            os.environ["PATH"] = saved


# A persistent sandbox machine lives until its rollout's cleanup, then is SIGKILLed as a
# whole: its shell's and commands' CPU never reaches RUSAGE_CHILDREN (nobody waits for
# them). So, just before each cleanup, sum the CPU of the machine's live processes from
# /proc (own + reaped children) below the top process, which the console reaps itself.
_LIVE_MS: list[float] = [0.0]
_PROBE_MS: list[float] = [0.0]
_PROBE_LOOP_MS: list[float] = [0.0]  # the part of it on the event loop's thread (kill_now runs there)


def _machine_cpu_ms(box: Any) -> float:
    from environments.sandboxes import procfs

    top = {m.pid for m in (getattr(box, "_machine", None), getattr(box, "_vmachine", None)) if m is not None}
    tck = os.sysconf("SC_CLK_TCK")
    total = 0
    # The sandbox's group lists its processes in one read; a full /proc scan (the fallback)
    # costs ~20 ms with a thousand sandbox processes on the box, which would slow the run it measures.
    group = getattr(box, "_cgroup", None)
    members = group.pids() | top if group is not None and group.has_pids else procfs.sandbox_processes(None, (), top)
    for pid in members:
        if pid in top:
            continue
        try:
            with open(f"/proc/{pid}/stat") as fh:
                f = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(x) for x in f[11:15])  # utime stime cutime cstime
    return 1000.0 * total / tck


def _count_machine_cpu() -> Callable[[], None]:
    """Wrap every sandbox's first kill (``kill_now``, when the rollout ends) and its cleanup
    with the probe: whichever comes first while the machine still lives reads it. Returns
    the undo (the smoke test runs this bench inside pytest: the wrapper must not outlive the run)."""
    from environments.sandboxes.base import BashSessionSandbox

    originals = {name: getattr(BashSessionSandbox, name) for name in ("kill_now", "cleanup")}
    if any(getattr(f, "_bench_wrapped", False) for f in originals.values()):
        return lambda: None

    def probed(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any) -> Any:
            if not self.closed:
                t0 = time.thread_time()
                _LIVE_MS[0] += _machine_cpu_ms(self)
                spent = 1000 * (time.thread_time() - t0)  # the bench's own /proc scan: not the env's
                _PROBE_MS[0] += spent
                if threading.current_thread() is threading.main_thread():
                    _PROBE_LOOP_MS[0] += spent
            return original(self)

        wrapper._bench_wrapped = True  # type: ignore[attr-defined]
        return wrapper

    for name, original in originals.items():
        setattr(BashSessionSandbox, name, probed(original))

    def undo() -> None:
        for name, original in originals.items():
            setattr(BashSessionSandbox, name, original)

    return undo


async def _concurrent(
    env: Any, items: list[Any], n: int, cpu: dict[str, list[float]], probed: bool = False
) -> tuple[float, list[Any]]:
    """One batch of ``n`` rollouts: its wall and results, its CPU per rollout into ``cpu``. With
    ``probed`` the sandboxes' live processes are read before each cleanup (the bench's own work,
    on the event loop at each rollout's end); without, the sandbox CPU figures are left out."""
    if probed:
        undo = _count_machine_cpu()
        try:
            return await _concurrent(env, items, n, cpu)
        finally:
            undo()
    p0, c0, m0, l0, b0, bl0 = (
        _cpu(resource.RUSAGE_SELF),
        _cpu(resource.RUSAGE_CHILDREN),
        time.thread_time(),
        _LIVE_MS[0],
        _PROBE_MS[0],
        _PROBE_LOOP_MS[0],
    )
    t0 = time.perf_counter()
    results = await asyncio.gather(*(env.collect_trajectory(items[i % len(items)]) for i in range(n)))
    wall = time.perf_counter() - t0
    # CPU per rollout: this process (all threads), its loop thread, and the bash children it waited for.
    probe = (_PROBE_MS[0] - b0) / n
    cpu.setdefault("process_ms", []).append(1000 * (_cpu(resource.RUSAGE_SELF) - p0) / n - probe)
    cpu.setdefault("bench_probe_ms", []).append(probe)
    probe_on_loop = (_PROBE_LOOP_MS[0] - bl0) / n
    cpu.setdefault("loop_thread_ms", []).append(1000 * (time.thread_time() - m0) / n - probe_on_loop)
    if _probe_installed():  # sandbox processes: those reaped by the console + the machines' own, read before cleanup
        reaped = 1000 * (_cpu(resource.RUSAGE_CHILDREN) - c0) / n
        live = (_LIVE_MS[0] - l0) / n
        cpu.setdefault("bash_children_ms", []).append(reaped + live)
        cpu.setdefault("sandbox_live_ms", []).append(live)
    return wall, [r[0] for r in results]


def _probe_installed() -> bool:
    from environments.sandboxes.base import BashSessionSandbox

    return bool(getattr(BashSessionSandbox.cleanup, "_bench_wrapped", False))


def _split(cpu_ms: dict[str, Any]) -> dict[str, Any]:
    """The split the issue asks for: event loop / other threads (tool pool) / child processes."""
    if cpu_ms.get("process_ms") is not None and cpu_ms.get("loop_thread_ms") is not None:
        cpu_ms["other_threads_ms"] = rnd(cpu_ms["process_ms"] - cpu_ms["loop_thread_ms"], 1)
        if cpu_ms.get("bash_children_ms") is not None:  # a probed batch's (the others' sandbox CPU is not read)
            cpu_ms["total_ms"] = rnd(cpu_ms["process_ms"] + cpu_ms["bash_children_ms"], 1)
    return cpu_ms


def _check_turns(scored: list[Any]) -> dict[str, Any]:
    """How many LLM calls each rollout made (should be 5) and its reward."""
    turns = [sum(1 for m in s["messages"] if m.get("role") == "assistant") for s in scored]
    return {
        "rollouts": len(scored),
        "five_llm_calls": sum(1 for t in turns if t == 5),
        "mean_reward": rnd(sum(s["scores"] for s in scored) / max(1, len(scored)), 3),
    }


async def _measure(
    base_url: str, rollouts: int, repeats: int, tool_pool: int, tmp: str, compare_full: bool, gc_tuned: bool = True
) -> dict[str, Any]:
    from bench.tt_env import TimedTerminalTasksEnv, build_bare_env, env_overrides

    tasks = four_turn_tasks_file(tmp)
    overrides = env_overrides(
        tasks, os.path.join(tmp, "groups.jsonl"), total_steps=1, extra={"tool_pool_size": tool_pool}
    )
    env = build_bare_env(TimedTerminalTasksEnv, base_url, overrides)
    await env.setup()
    items = env.train_items
    await _solo(env, items)  # warm: imports, tokenizer, connection pool
    with runtime_process_gc(gc_tuned):  # as the runtime's processes do once the env is loaded
        return await _batches(env, items, rollouts, repeats, compare_full)


async def _batches(env: Any, items: list[Any], rollouts: int, repeats: int, compare_full: bool) -> dict[str, Any]:
    from environments.lean_chat import OPT_OUT_VAR as LEAN_OPT_OUT
    from environments.lean_chat import lean_chat_enabled

    solos: list[float] = []
    walls: list[float] = []
    checks: dict[str, Any] = {}
    cpu: dict[str, list[float]] = {}
    full_walls: list[float] = []
    full_cpu: dict[str, list[float]] = {}
    host_walls: list[float] = []
    host_cpu: dict[str, list[float]] = {}
    probed_walls: list[float] = []
    for _ in range(repeats):  # alternate: solo, concurrent, probed, [concurrent without the fix], solo, ...
        with _sandbox_path(SANDBOX_PATH):
            solos.append(await _solo(env, items))
            # The headline batch runs the env alone; the CPU split (with the sandboxes' own CPU,
            # which the probe reads at each rollout's end, on the loop) comes from the next one.
            wall, scored = await _concurrent(env, items, rollouts, {})
            walls.append(wall)
            checks = _check_turns(scored)
            probed_walls.append((await _concurrent(env, items, rollouts, cpu, probed=True))[0])
            if compare_full and lean_chat_enabled():
                os.environ[LEAN_OPT_OUT] = "1"  # the same env through the openai client (before the lean path)
                try:
                    full_walls.append((await _concurrent(env, items, rollouts, full_cpu))[0])
                finally:
                    del os.environ[LEAN_OPT_OUT]
        if compare_full:  # the same batch with the host's PATH in the sandboxes (pyenv's shims, on the bench box)
            host_walls.append((await _concurrent(env, items, rollouts, host_cpu))[0])
    cpu_ms = _split({k: rnd(median(v), 1) for k, v in cpu.items()})
    return {
        "solo_walls_s": [rnd(x) for x in solos],
        "concurrent_walls_s": [rnd(x) for x in walls],
        "concurrent_walls_probed_s": [rnd(x) for x in probed_walls],
        "check": checks,
        "cpu_ms_per_rollout": cpu_ms,
        "concurrent_walls_openai_client_s": [rnd(x) for x in full_walls],
        "cpu_ms_per_rollout_openai_client": _split({k: rnd(median(v), 1) for k, v in full_cpu.items()}),
        "concurrent_walls_host_path_s": [rnd(x) for x in host_walls],
        "cpu_ms_per_rollout_host_path": _split({k: rnd(median(v), 1) for k, v in host_cpu.items()}),
    }


def run(
    quick: bool = False,
    *,
    rollouts: int | None = None,
    latency_ms: float | None = None,
    tool_pool: int = 256,
    repeats: int | None = None,
    full_transform: bool = False,
    gc_tuned: bool = True,
) -> dict[str, Any]:
    rollouts = rollouts or (32 if quick else 256)
    latency_ms = latency_ms if latency_ms is not None else (100.0 if quick else DEFAULT_LATENCY_MS)
    repeats = repeats or (1 if quick else 2)
    tmp = bench_tmpdir("p2")
    import environments.hermes_base_env  # noqa: F401 - applies environments.patches as any env does
    from bench import lean_openai
    from environments.lean_chat import lean_chat_enabled

    if full_transform:  # A/B: the env without the openai request fast path
        lean_openai.remove()
    load_before = load_average()
    with SimProcess(latency_ms, solve_rate=1.0) as sim:
        m = asyncio.run(
            _measure(sim.base_url, rollouts, repeats, tool_pool, tmp, compare_full=not quick, gc_tuned=gc_tuned)
        )
    solo = median(m["solo_walls_s"])
    wall = median(m["concurrent_walls_s"])
    efficiency = solo / wall if wall else float("nan")
    formula_ideal = 5 * latency_ms / 1000.0
    host_walls = m["concurrent_walls_host_path_s"]
    host_eff = solo / median(host_walls) if host_walls else None
    result = {
        "rollouts": rollouts,
        "latency_ms": latency_ms,
        "tool_pool_size": tool_pool,
        "openai_request_transform": "lean (environments.patches)" if lean_openai.active() else "full (openai's own)",
        "chat_path": "lean (environments.lean_chat)" if lean_chat_enabled() else "openai client",
        "repeats": repeats,
        "gc": "as hermes-console's processes (runtime/gc_tuning)" if gc_tuned else "CPython defaults",
        "ideal_wall_s": rnd(solo),
        "ideal_5L_s": rnd(formula_ideal),
        "tool_and_overhead_s_per_rollout": rnd(solo - formula_ideal),
        "achieved_wall_s": rnd(wall),
        "achieved_rollouts_per_s": rnd(rollouts / wall if wall else None, 2),
        "ideal_rollouts_per_s": rnd(rollouts / solo if solo else None, 2),
        "efficiency": rnd(efficiency, 4),
        "efficiency_vs_5L_only": rnd(formula_ideal / wall if wall else None, 4),
        # The batch the CPU split comes from, with the bench's probe of sandbox CPU on the loop.
        "efficiency_probed_batch": rnd(solo / median(m["concurrent_walls_probed_s"]), 4),
        # Side by side in the same run: the env through the openai client (before the lean chat path).
        "efficiency_with_openai_client": rnd(solo / median(m["concurrent_walls_openai_client_s"]), 4)
        if m["concurrent_walls_openai_client_s"]
        else None,
        "sandbox_path": SANDBOX_PATH,
        "host_path": os.environ.get("PATH", ""),
        # The same batch with the host's PATH in the sandboxes (a pyenv shim for python3 on the bench box).
        "efficiency_with_host_path": rnd(host_eff, 4),
        "cpu_ms_per_rollout": m["cpu_ms_per_rollout"],
        # CPU the rollouts need per second of ideal wall: > cores available means CPU-bound.
        "cpu_cores_needed_at_ideal": rnd(
            rollouts
            * (m["cpu_ms_per_rollout"].get("process_ms", 0) + m["cpu_ms_per_rollout"].get("bash_children_ms", 0))
            / 1000
            / max(solo, 1e-9),
            2,
        ),
        "runs": m,
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "figures": [figure("P2 efficiency (achieved / latency-bound ideal)", efficiency, TARGET, "x", True)]
        + ([figure("P2 efficiency, sandboxes with the host's PATH", host_eff, TARGET, "x", True)] if host_eff else []),
        "quick": quick,
    }
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.p2_efficiency", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rollouts", type=int, default=None)
    ap.add_argument("--latency-ms", type=float, default=None)
    ap.add_argument("--tool-pool", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument(
        "--full-transform", action="store_true", help="A/B: run without environments.patches' openai request fast path"
    )
    ap.add_argument(
        "--gc",
        choices=("runtime", "default"),
        default="runtime",
        help="the garbage collector as hermes-console's processes set it (default) or CPython's defaults",
    )
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    result = run(
        args.quick,
        rollouts=args.rollouts,
        latency_ms=args.latency_ms,
        tool_pool=args.tool_pool,
        repeats=args.repeats,
        full_transform=args.full_transform,
        gc_tuned=args.gc == "runtime",
    )
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=1, default=str))
    print(json.dumps(result["runs"], default=str))
    if not args.no_write:
        write_results(SECTION, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
