"""One way of running terminal_tasks for the peer table (``bench/p7_peers.py``), in a fresh
process of its own, as an operator would run it: the env process is what is measured.

    python -m bench.peers_worker RUNNER --sim URL --groups N [--api URL] [--listen ADDR --ready-file F]
    python -m bench.peers_worker attach --address ADDR --ready-file F

The env hands out exactly ``N`` items and then ``None`` (for atroposlib ``process`` and the
console's process mode that ends the run; in serve modes it means "nothing right now"), so
every runner does the same work and nothing is in flight when the N-th group is sent. The
window is [first ``get_next_item``, N-th ``handle_send_to_api`` returned]; at both ends the
env takes a snapshot of this process's CPU (all threads, by thread, reaped children, and the
live sandbox machines' CPU read from /proc before each cleanup, as P2 does) and, with
``--ready-file``, of the attached console process. Prints one ``RESULT {json}`` line.

``attach`` is the other side of ``--listen``: ``FleetConsoleApp`` (the console ``hermes-console
attach`` runs) headless at 160x45, following the host until ``READY_FILE.stop`` exists. Once it is connected it
writes its pid to the ready file; the host takes no item before that file exists.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.p7_peers import GROUP_SIZE, RUNNERS
from bench.tt_env import TimedTerminalTasksEnv, build_bare_env, env_overrides

_TCK = os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------- CPU snapshots


def _ticks_ms(stat_line: str, with_children: bool) -> float:
    f = stat_line.rsplit(")", 1)[1].split()
    fields = f[11:15] if with_children else f[11:13]  # utime stime [cutime cstime]
    return 1000.0 * sum(int(x) for x in fields) / _TCK


def _threads_ms() -> dict[int, float]:
    out: dict[int, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as fh:
                out[int(tid)] = _ticks_ms(fh.read(), False)
        except OSError:
            continue  # the thread ended meanwhile
    return out


def _pid_ms(pid: int | None) -> float | None:
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return _ticks_ms(fh.read(), True)
    except OSError:
        return None


def _rusage_ms(who: int) -> float:
    r = resource.getrusage(who)
    return 1000.0 * (r.ru_utime + r.ru_stime)


def snapshot(attach_pid: int | None) -> dict[str, Any]:
    from bench.p2_efficiency import _LIVE_MS, _PROBE_MS

    return {
        "t": time.perf_counter(),
        "process_ms": _rusage_ms(resource.RUSAGE_SELF),
        "children_ms": _rusage_ms(resource.RUSAGE_CHILDREN),
        "live_sandbox_ms": _LIVE_MS[0],
        "probe_ms": _PROBE_MS[0],
        "threads_ms": _threads_ms(),
        "attach_ms": _pid_ms(attach_pid),
        "names": {t.native_id: t.name for t in threading.enumerate()},  # while they still run
    }


# --------------------------------------------------------------------------- the env


class PeerTasksEnv(TimedTerminalTasksEnv):
    """terminal_tasks with a fixed number of items and CPU snapshots at the window's ends."""

    name = "terminal-tasks-peers"
    item_limit = 0
    items_given = 0
    ready_file: str | None = None
    attach_pid: int | None = None
    loop_tid: int | None = None
    start: dict[str, Any] | None = None
    end: dict[str, Any] | None = None
    finished = threading.Event()

    async def get_next_item(self) -> dict[str, Any] | None:
        cls = type(self)
        if cls.items_given >= cls.item_limit:
            return None
        if cls.items_given == 0:
            await _wait_ready(cls)
            cls.loop_tid = threading.get_native_id()
            cls.start = snapshot(cls.attach_pid)
        cls.items_given += 1
        return await super().get_next_item()

    async def handle_send_to_api(self, *args: Any, **kwargs: Any) -> None:
        await super().handle_send_to_api(*args, **kwargs)
        cls = type(self)
        if len(cls.sent_at) == cls.item_limit and cls.end is None:
            cls.end = snapshot(cls.attach_pid)
            cls.finished.set()


async def _wait_ready(cls: type[PeerTasksEnv]) -> None:
    """With an attached console: take no item before it is connected (its pid in the file)."""
    if not cls.ready_file:
        return
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        text = Path(cls.ready_file).read_text().strip() if Path(cls.ready_file).exists() else ""
        if text:
            cls.attach_pid = int(text)
            return
        await asyncio.sleep(0.05)
    raise RuntimeError(f"no attached console wrote {cls.ready_file} within 120 s")


def _overrides(args: argparse.Namespace, serve: bool) -> dict[str, Any]:
    out = env_overrides(
        "",
        os.path.join(args.tmp, "groups.jsonl"),
        total_steps=10_000 if serve else args.groups,  # serve: trainer steps; the item limit ends the work
        group_size=GROUP_SIZE,
    )
    out.pop("dataset_name")
    if serve:
        out["rollout_server_url"] = args.api
    return out


# --------------------------------------------------------------------------- runners


async def _atroposlib(args: argparse.Namespace, serve: bool) -> None:
    env = build_bare_env(PeerTasksEnv, args.sim, _overrides(args, serve))
    if not serve:
        await env.process_manager()  # what atroposlib's `process` runs: one group at a time
        return
    env.process_mode = False  # what atroposlib's `serve` runs: env_manager at max_num_workers
    task = asyncio.get_running_loop().create_task(env.env_manager())
    while not PeerTasksEnv.finished.is_set() and not task.done():
        await asyncio.sleep(0.05)
    if task.done():
        task.result()  # raises what ended it early
    task.cancel()
    for worker in list(env.workers):
        worker.cancel()
    await asyncio.gather(task, *env.workers, return_exceptions=True)


def _spec(args: argparse.Namespace, serve: bool) -> Any:
    from hermes_console.runtime.config import RunSpec

    return RunSpec(
        env=PeerTasksEnv,
        mode="serve" if serve else "process",
        env_overrides=_overrides(args, serve),
        openai_overrides={"base_url": f"{args.sim}/v1"},
        runs_dir=args.tmp,
        check_server=False,
    )  # max_in_flight unset: the console's default concurrency


async def _console_ui(args: argparse.Namespace, serve: bool, stats: dict[str, Any]) -> None:
    from hermes_console.runtime.host import RuntimeHost
    from hermes_console.ui.app import ConsoleApp
    from hermes_console.ui.config import ConsoleConfig

    host = RuntimeHost(_spec(args, serve), exit_when_finished=False)
    app = ConsoleApp(host, config=ConsoleConfig())
    try:
        async with app.run_test(size=(160, 45)):
            end = time.monotonic() + args.timeout
            while not PeerTasksEnv.finished.is_set() and time.monotonic() < end and not host.done.done():
                await asyncio.sleep(0.05)  # not pilot.pause: it forces a screen refresh each call
            stats["fatal"] = repr(host.fatal) if host.fatal else None
            app.exit(0)
    finally:
        host.stop(1.0).result(timeout=60)
        host.join(10)


def _console_headless(args: argparse.Namespace) -> None:
    from rich.console import Console

    from hermes_console.runtime.headless import run_headless
    from hermes_console.runtime.host import RuntimeHost

    host = RuntimeHost(_spec(args, False), exit_when_finished=True)
    listener = None
    if args.listen:
        from hermes_console.runtime.listener import start_listener

        listener = start_listener(host, args.listen, None, lambda text: print(text, file=sys.stderr))
    try:
        with open(os.devnull, "w") as sink:  # a terminal would show it; its drawing is not the env's
            code = run_headless(host, console=Console(file=sink, width=160))
        if code != 0:
            raise RuntimeError(f"headless run exited {code} (fatal: {host.fatal})")
    finally:
        if listener is not None:
            listener.stop()


def run_env(args: argparse.Namespace) -> dict[str, Any]:
    from bench.p2_efficiency import _count_machine_cpu

    PeerTasksEnv.item_limit = args.groups
    PeerTasksEnv.ready_file = args.ready_file
    _count_machine_cpu()  # live sandbox machines' CPU, read before each cleanup
    stats: dict[str, Any] = {}
    runner = args.runner
    if runner.startswith("atroposlib"):
        asyncio.run(_atroposlib(args, runner.endswith("serve")))
    elif runner.endswith("with UI"):
        asyncio.run(_console_ui(args, "serve" in runner, stats))
    else:
        _console_headless(args)
    return _figures(args, stats)


def _figures(args: argparse.Namespace, stats: dict[str, Any]) -> dict[str, Any]:
    s, e = PeerTasksEnv.start, PeerTasksEnv.end
    if s is None or e is None:
        raise RuntimeError(
            f"{args.runner}: sent {len(PeerTasksEnv.sent_at)} of {args.groups} groups ({stats.get('fatal')})"
        )
    rollouts = args.groups * GROUP_SIZE
    per = 1.0 / rollouts
    probe = e["probe_ms"] - s["probe_ms"]  # the bench's own /proc reads: not the env's
    process = e["process_ms"] - s["process_ms"] - probe
    threads = {t: e["threads_ms"][t] - s["threads_ms"].get(t, 0.0) for t in e["threads_ms"]}
    main_tid = threading.main_thread().native_id
    loop = threads.get(PeerTasksEnv.loop_tid or -1, 0.0)
    main = threads.get(main_tid, 0.0) if main_tid != PeerTasksEnv.loop_tid else 0.0
    named = {tid: re.sub(r"[-_]?\d+(_\d+)?$", "", name) for tid, name in {**s["names"], **e["names"]}.items()}
    by_name: dict[str, float] = {}
    for tid, ms in threads.items():
        if tid not in (PeerTasksEnv.loop_tid, main_tid) and ms > 0:
            key = named.get(tid, "(ended or unnamed)")
            by_name[key] = by_name.get(key, 0.0) + ms * per
    attach = None if s["attach_ms"] is None or e["attach_ms"] is None else e["attach_ms"] - s["attach_ms"]
    return {
        "runner": args.runner,
        "groups": args.groups,
        "rollouts": rollouts,
        "window_s": e["t"] - s["t"],
        "rollouts_per_s": rollouts / (e["t"] - s["t"]),
        "cpu_ms_per_rollout": {
            "process": process * per,
            "of_it_env_loop": loop * per,
            # the UI in-process; the progress printer headless; nothing for atroposlib (its loop is the main thread)
            "of_it_main_thread": main * per,
            "of_it_other_threads": (process - loop - main) * per,  # tool pool, listener, trainer poller
            "sandbox_children": (e["children_ms"] - s["children_ms"] + e["live_sandbox_ms"] - s["live_sandbox_ms"])
            * per,
            "attached_console_process": None if attach is None else attach * per,
        },
        "other_threads_ms_per_rollout_by_name": {k: round(v, 1) for k, v in sorted(by_name.items())},
    }


# --------------------------------------------------------------------------- the attached console


async def _attach(address: str, ready_file: str) -> dict[str, Any]:
    from hermes_console.remote.client import FleetRuntime, parse_targets
    from hermes_console.remote.fleet import FleetConsoleApp
    from hermes_console.ui.config import ConsoleConfig

    stop = Path(ready_file + ".stop")  # a file, not a signal: Textual's driver takes SIGTERM over
    fleet = FleetRuntime(parse_targets([address]))
    app = FleetConsoleApp(fleet, config=ConsoleConfig())
    written = False
    async with app.run_test(size=(160, 45)):
        while not stop.exists():
            if not written and fleet.hosts[0].connected:
                tmp = Path(ready_file + ".tmp")
                tmp.write_text(str(os.getpid()))
                os.replace(tmp, ready_file)  # whole, never half-written
                written = True
            await asyncio.sleep(0.05)
        events = app.state.events_applied
        app.exit(0)
    fleet.stop()
    fleet.join(10.0)
    return {"events_applied": events, "cpu_ms": _rusage_ms(resource.RUSAGE_SELF)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.peers_worker", description=__doc__.splitlines()[0])
    ap.add_argument("runner", choices=[*RUNNERS, "attach"])
    ap.add_argument("--sim", help="simulator base URL")
    ap.add_argument("--api", help="run-api base URL (serve runners)")
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--tmp", default=None, help="run directory (default: a fresh temp dir)")
    ap.add_argument("--listen", default=None, help="host: --listen ADDR; attach: the address to follow")
    ap.add_argument("--ready-file", default=None)
    ap.add_argument("--timeout", type=float, default=900.0)
    args = ap.parse_args(argv)
    if args.runner == "attach":
        result = asyncio.run(_attach(args.listen, args.ready_file))
    else:
        if args.tmp is None:
            from bench.common import bench_tmpdir

            args.tmp = bench_tmpdir("peer")
        result = run_env(args)
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
