"""Verdicts reach the driver directly, never through the event bus (issue 17).

The env reports each rollout's failure into the group's ``environments.verdicts.GroupReport``;
events are display only. So a bus that repeats what it carries (a relay re-publishing events)
or loses some (a lossy tap) must not change how any item is accounted. The oracle is the env's
own record of which groups it made fail, and the run's ``dropped.jsonl`` on disk.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from environments import events
from environments.terminal_tasks.env import TerminalTasksEnv
from tests.runtime.runtime_helpers import make_spec

ITEMS = 4
BAD_GROUPS = 3  # the first three groups: every rollout fails; the fourth works
GROUP_SIZE = 2  # 6 failed rollouts in a row: below the fatal streak of 8


class FailFirstGroupsEnv(TerminalTasksEnv):
    """The real env; every rollout of its first BAD_GROUPS groups fails before the agent starts."""

    name = "terminal-tasks-fail-first"

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.groups = 0
        self.bad: set[str] = set()

    async def collect_trajectories(self, item):
        self.groups += 1
        if self.groups <= BAD_GROUPS:
            self.bad.add(events.current_group_id.get() or "")
        return await super().collect_trajectories(item)

    async def prepare_rollout(self, item, ctx) -> None:
        if events.current_group_id.get() in self.bad:
            raise RuntimeError("sandbox setup failed (test)")


@contextlib.contextmanager
def repeating_relay() -> Iterator[None]:
    """A subscriber that re-publishes every rollout/tool/item-end event once (like a relay would)."""
    kinds = {"rollout_finished", "tool_call_finished", "item_dropped", "item_failed"}
    local = threading.local()

    def relay(event: events.Event) -> None:
        if event.kind in kinds and not getattr(local, "busy", False):
            local.busy = True
            try:
                events.emit(event)
            finally:
                local.busy = False

    events.add_observer(relay)
    try:
        yield
    finally:
        events.remove_observer(relay)


@contextlib.contextmanager
def lossy_bus(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A bus that loses every rollout and tool-call end (as an overflowing tap would)."""
    emit = events.emit

    def lossy(event: events.Event) -> None:
        if event.kind not in ("rollout_finished", "tool_call_finished"):
            emit(event)

    monkeypatch.setattr(events, "emit", lossy)
    yield


@pytest.mark.parametrize("bus", ["repeating", "lossy"])
def test_a_repeating_or_lossy_event_bus_does_not_change_the_accounting(bus, sim, tmp_path, live, monkeypatch):
    tamper = repeating_relay() if bus == "repeating" else lossy_bus(monkeypatch)
    spec = make_spec(
        sim,
        tmp_path,
        "--env.total_steps",
        str(ITEMS),
        "--env.group_size",
        str(GROUP_SIZE),
        "--env.max_agent_turns",
        "2",
        env=FailFirstGroupsEnv,
        max_in_flight=1,  # one group at a time: the failures come in a row
    )
    with tamper:
        p = live(spec, exit_when_finished=True)
        p.until(lambda s: s.status in ("finished", "error"), 90, "the run to end")
    assert p.state.status == "finished", p.state.status_detail  # never "the backend looks unusable"
    env, driver = p.host.env, p.host.driver
    assert len(env.bad) == BAD_GROUPS
    assert (driver.received, driver.done) == (ITEMS, ITEMS)
    dropped = Path(driver.dropped.path)
    reasons: dict[str, str] = {}
    for line in dropped.read_text().splitlines() if dropped.exists() else []:
        record = json.loads(line)
        assert reasons.setdefault(record["group_id"], record["reason"]) == record["reason"]
    # Exactly the groups the env made fail are dropped for it, each once; the working one is not.
    assert {g for g, r in reasons.items() if r == "rollout_error"} == env.bad, reasons
    assert driver.completed + len(reasons) - BAD_GROUPS == ITEMS - BAD_GROUPS
