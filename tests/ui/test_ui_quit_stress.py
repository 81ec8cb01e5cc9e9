"""The quit path 20x under load, through the CLI's real front end (``cli._front_end``:
the console, then ``wait_for_stop`` -> ``runtime.stop``) over a real RuntimeHost, the
embedded simulator and local sandboxes running a slow command.

Half the runs press ``q`` ``y`` then ``q`` again while STOPPING (the drain is cut, the
stop is never cancelled); the other half quit with a short drain deadline, so the
countdown runs out and in-flight groups are cancelled (the force path). After every run:
exit code 0 (outcome: nothing failed), no traceback anywhere (stderr, logging, threads),
the runtime thread gone, no child processes (/proc), no sandbox or workspace dir left on
disk, and the run's outputs (groups.jsonl with the finished group, groups.html) written.

The app runs under Textual's Pilot in place of ``app.run()`` (``run_console`` is swapped);
everything after the screen closes is the CLI's own code.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import random
import threading
import time
from contextlib import redirect_stderr
from pathlib import Path
from typing import Any

import pytest

from hermes_console import cli
from hermes_console.runtime.config import RunSpec
from hermes_console.runtime.host import RuntimeHost
from hermes_console.sim.config import LatencyConfig, SimConfig
from hermes_console.sim.server import SimServer
from hermes_console.ui.app import ConsoleApp
from hermes_console.ui.config import ConsoleConfig
from hermes_console.ui.screens.confirm import ConfirmModal
from tests.faults.faults_helpers import live_sandboxes, restore_env, snapshot_env
from tests.runtime.runtime_helpers import child_pids, our_threads, wait_no_children

RUNS = 20
SLOW = "Run this command: sleep 30"  # far longer than any run: only a cut drain or a cancel ends it
FAST = "Run this command: echo fast"


def _tasks(path: Path, n: int = 6) -> str:
    """The env's first item (its order is a seeded shuffle) is fast, every other one hangs."""
    order = list(range(n))
    random.Random(0).shuffle(order)  # terminal_tasks' own first-epoch order
    prompts = [SLOW] * n
    prompts[order[0]] = FAST
    rows = [
        {
            "task_id": f"t{i}",
            "split": "train",
            "prompt": p,
            "setup": [],
            "check": {"type": "command_exit_zero", "command": "true"},
        }
        for i, p in enumerate(prompts)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _spec(sim: SimServer, run_dir: Path, tasks: str) -> RunSpec:
    flags = [
        "--openai.base_url",
        f"{sim.base_url}/v1",
        "--env.data_path_to_save_groups",
        str(run_dir / "groups.jsonl"),
        "--env.dataset_name",
        tasks,
        "--env.group_size",
        "2",
        "--env.max_agent_turns",
        "4",
        "--env.total_steps",
        "100",
    ]
    return RunSpec(
        env="environments.terminal_tasks",
        flags=flags,
        runs_dir=str(run_dir.parent),
        max_in_flight=3,
        heartbeat_s=0.1,
        stats_interval_s=0.25,
    )


class _Traces(logging.Handler):
    """Every log record with an exception or a traceback in its text, from any logger."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.found: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info or "Traceback" in text:
            self.found.append(f"{record.name}: {text[:300]}")


def _under_load(state: Any) -> bool:
    """A group finished (outputs to write) and slow commands running (a drain to wait for)."""
    running = any(t.status == "running" and t.tool_name == "terminal" for t in state.tool_rows)
    return state.accounting.completed >= 1 and state.accounting.in_flight >= 1 and running


async def _drive(app: ConsoleApp, second_q: bool, seen: dict[str, Any]) -> None:
    async with app.run_test(size=(160, 45)) as pilot:
        end = time.monotonic() + 120  # a ceiling: normally a second or two
        while not _under_load(app.state):
            assert time.monotonic() < end, f"never under load: {app.state.status} {app.state.accounting}"
            await pilot.pause(0.05)
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmModal), "quit with groups in flight must ask first"
        await pilot.press("y")
        await pilot.pause()
        assert app.stopping
        notes = {app.stop_note()}
        if second_q:
            await pilot.press("q")  # again, while STOPPING: leave now, the stop goes on
        end = time.monotonic() + 90
        while app.is_running and time.monotonic() < end:
            notes.add(app.stop_note())
            await pilot.pause(0.05)
        assert not app.is_running, f"the app did not exit after quit: {app.stop_note()}"
        # what the status bar said meanwhile: the countdown, then cleanup (how many of each a
        # loaded machine draws is timing; the countdown's text has its own test in test_ui_quit)
        odd = [n for n in notes if not n.startswith(("draining ", "cleaning up sandboxes"))]
        assert not odd, odd
        seen["cancelled"] = app.state.accounting.cancelled  # + those the app left before reading
        seen["logs"] = list(app.state.logs)  # the runtime's log records (LogBridge), as the console got them


def _console(second_q: bool, seen: dict[str, Any]) -> Any:
    def run_console(runtime: Any, *, config: ConsoleConfig, **_: Any) -> int:
        config.ui_cpu_share = 0.0  # the screen follows state at once
        app = ConsoleApp(runtime, config=config)
        asyncio.run(_drive(app, second_q, seen))
        seen["app_code"] = app.return_code
        return int(app.return_code or 0)  # as ui.app.run_console does

    return run_console


def _leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


def _wait(pred: Any, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout  # returns as soon as cleanup threads are done
    while not pred() and time.monotonic() < end:
        time.sleep(0.05)


@pytest.mark.timeout(600)  # a hang detector; each wait's own ceiling fails first, naming the step
def test_quit_twenty_times_under_load_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import hermes_console.ui.app as ui_app

    sandboxes = tmp_path / "sandboxes"
    monkeypatch.setenv("TERMINAL_SANDBOX_ROOT", str(sandboxes))
    monkeypatch.setenv("HOME", str(tmp_path))  # no operator keymap from ~/.config
    tasks = _tasks(tmp_path / "tasks.jsonl")
    traces = _Traces()
    for name in ("", "atroposlib"):  # atroposlib's logger does not propagate once tamed
        logging.getLogger(name).addHandler(traces)
    thread_errors: list[str] = []
    monkeypatch.setattr(threading, "excepthook", lambda a: thread_errors.append(f"{a.thread}: {a.exc_value!r}"))
    saved = snapshot_env()
    sim = SimServer(SimConfig(seed=7, latency=LatencyConfig(mode="fixed", mean_ms=5.0)))
    sim.start()
    threads_before = set(our_threads())
    try:
        for run in range(RUNS):
            second_q = run % 2 == 0
            deadline = 30.0 if second_q else 0.5  # a short deadline: the countdown runs out, groups are cancelled
            run_dir = tmp_path / f"run{run:02d}"
            seen: dict[str, Any] = {}
            monkeypatch.setattr(ui_app, "run_console", _console(second_q, seen))
            host = RuntimeHost(_spec(sim, run_dir, tasks), exit_when_finished=False)
            err = io.StringIO()
            with redirect_stderr(err):
                code = cli._front_end(host, headless=False, drain_deadline_s=deadline)
            where = f"run {run} ({'second q' if second_q else 'deadline passes'})"
            assert code == 0 and seen.get("app_code") == 0, f"{where}: exit {code}, stderr {err.getvalue()!r}"
            assert "Traceback" not in err.getvalue() and "Error" not in err.getvalue(), f"{where}: {err.getvalue()}"
            # the slow groups never finish by themselves: the second q or the deadline cancelled them
            rest = host.drain()  # what came after the screen closed
            cancelled = seen["cancelled"] + sum(1 for e in rest if e.kind == "item_cancelled")
            assert cancelled >= 1, f"{where}: {seen['cancelled']}"
            logs = seen["logs"] + [e for e in rest if e.kind == "log_record"]
            bad = [f"{e.level} {e.logger}: {e.message}" for e in logs if e.level in ("ERROR", "CRITICAL")]
            assert not bad and not [e for e in logs if "Traceback" in e.message], f"{where}: {bad}"
            assert host.done.done() and host.done.exception() is None, where
            assert not [t for t in threading.enumerate() if t.name == "hermes-runtime"], where
            assert wait_no_children(30) == [], f"{where}: child processes left: {child_pids()}"
            assert live_sandboxes() == [], f"{where}: sandboxes left open: {live_sandboxes()}"
            _wait(lambda: not _leftovers(sandboxes))
            assert _leftovers(sandboxes) == [], f"{where}: left on disk: {_leftovers(sandboxes)}"
            assert (run_dir / "groups.html").is_file(), f"{where}: no groups.html in {sorted(run_dir.iterdir())}"
            groups = [json.loads(x) for x in (run_dir / "groups.jsonl").read_text().splitlines() if x.strip()]
            assert groups and all(len(g["tokens"]) == 2 for g in groups), where
            _wait(lambda: set(our_threads()) <= threads_before)
            assert set(our_threads()) <= threads_before, f"{where}: threads left: {set(our_threads()) - threads_before}"
        assert not traces.found, traces.found
        assert not thread_errors, thread_errors
    finally:
        for name in ("", "atroposlib"):
            logging.getLogger(name).removeHandler(traces)
        sim.stop()
        restore_env(saved)
