"""Helpers for live-runtime tests (imported by tests and conftest)."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from environments.events import Event
from hermes_console.runtime.config import RunSpec
from hermes_console.runtime.state import ConsoleState
from hermes_console.sim.server import SimServer

# Threads that are not the run's: the test's own simulator and tqdm's monitor.
# (Tool pools and the sandbox reaper must be gone after stop.)
FOREIGN_THREAD_PREFIXES = ("tqdm_monitor", "hermes-sim")


class Pump:
    """Drives a host from the test thread like the UI would."""

    def __init__(self, host: Any) -> None:
        self.host = host
        self.state = ConsoleState()
        self.events: list[Event] = []

    def pump(self) -> None:
        batch = self.host.drain()
        self.events.extend(batch)
        self.state.apply_all(batch)

    def until(self, pred: Callable[[ConsoleState], bool], timeout: float = 30.0, what: str = "") -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.pump()
            if pred(self.state):
                return
            if self.host.done.done():
                self.pump()
                if pred(self.state):
                    return
                raise AssertionError(f"runtime ended ({self.state.status}: {self.state.status_detail}) before: {what}")
            time.sleep(0.02)
        raise AssertionError(
            f"timed out after {timeout}s waiting for: {what}; status={self.state.status} acc={self.state.accounting}"
        )

    def sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.pump()
            time.sleep(0.02)

    def stop(self, deadline: float = 5.0) -> None:
        self.host.stop(deadline).result(timeout=deadline + 30)
        assert self.host.join(10)
        self.pump()

    def of(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.kind == kind]


def make_spec(sim: SimServer, tmp_path: Any, *flags: str, **kw: Any) -> RunSpec:
    base = [
        "--openai.base_url",
        f"{sim.base_url}/v1",
        "--env.data_path_to_save_groups",
        str(tmp_path / "run" / "groups.jsonl"),
    ]
    return RunSpec(
        env=kw.pop("env", "environments.terminal_tasks"), flags=[*base, *flags], runs_dir=str(tmp_path), **kw
    )


def our_threads() -> list[str]:
    return sorted(
        t.name
        for t in threading.enumerate()
        if t is not threading.main_thread() and not t.name.startswith(FOREIGN_THREAD_PREFIXES)
    )


def child_pids() -> list[int]:
    """Live children of this process, from /proc (no psutil)."""
    me = os.getpid()
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fp:
                stat = fp.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and fields[0] != "Z" and int(fields[1]) == me:
            out.append(int(name))
    return out


def wait_no_children(timeout: float = 5.0) -> list[int]:
    end = time.monotonic() + timeout
    pids = child_pids()
    while pids and time.monotonic() < end:
        time.sleep(0.05)
        pids = child_pids()
    return pids


# The events that end an item, and the Accounting field each one counts in.
ITEM_END_KINDS = {
    "item_completed": "completed",
    "item_dropped": "dropped",
    "item_failed": "failed",
    "item_cancelled": "cancelled",
}


def identity(state: ConsoleState, events: Sequence[Event]) -> str | None:
    """Check the console's accounting against a count made here, item by item, from the
    event stream: each item_received starts an item, its first end event ends it. The
    items started and not ended are the in-flight ones; the console's ``in_flight`` (the
    remainder of its counters) must equal that number, and every counter must match.
    None when all agree, else what differs."""
    started: set[str] = set()
    ended: dict[str, str] = {}  # group_id -> the Accounting field of its first end event
    problems: list[str] = []
    for e in events:
        if e.kind == "item_received":
            if e.group_id in started:
                problems.append(f"item {e.group_id} received twice")
            started.add(e.group_id)
        elif e.kind in ITEM_END_KINDS:
            if e.group_id not in started:
                problems.append(f"item {e.group_id} ended ({e.kind}) without being received")
            ended.setdefault(e.group_id, ITEM_END_KINDS[e.kind])
    a = state.accounting
    counted = Counter(field for gid, field in ended.items() if gid in started)
    in_flight = len(started - ended.keys())
    for name, mine, theirs in (
        ("received", len(started), a.received),
        ("in_flight", in_flight, a.in_flight),
        ("completed", counted["completed"], a.completed),
        ("dropped", counted["dropped"], a.dropped_total),
        ("failed", counted["failed"], a.failed),
        ("cancelled", counted["cancelled"], a.cancelled),
    ):
        if mine != theirs:
            problems.append(f"{name}: {mine} counted from the events, {theirs} in the console")
    return "; ".join(problems) + f" ({a})" if problems else None
