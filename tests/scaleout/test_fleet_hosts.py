"""Issue 14, fleet console: which host each row comes from. Two hosts may use the same ids
(the same host attached twice, replayed runs): the merged console keeps them apart by
tagging every id with its host (``ID@LABEL``), routes sandbox commands to the right host
with the host's own id, and the main screen's panels show a host column only when more
than one host is attached. Also the per-host trainer staleness (steps since the last
confirmed group). In-process listeners over stand-in runtimes (no env, no event bus)."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import Future
from typing import Any

import pytest

from environments import events as ev
from hermes_console.remote.client import (
    ConfirmClock,
    FleetRuntime,
    host_key,
    parse_targets,
    split_host_key,
    tag_event,
    wait_until,
)
from hermes_console.runtime import events as rev
from hermes_console.runtime.listener import Listener, parse_address
from hermes_console.runtime.payloads import SandboxDetails
from hermes_console.runtime.queue import EventQueue
from hermes_console.runtime.state import ConsoleState
from hermes_console_dev.fake_runtime import sample_details

pytestmark = pytest.mark.timeout(60)
TOKEN = "t0ken-for-fleet-hosts"


# --------------------------------------------------------------------------- pure: keys


def test_ids_are_tagged_with_their_host_and_read_back() -> None:
    labels = {"h0", "node-7"}
    assert host_key("g0001", "h0") == "g0001@h0" and host_key("", "h0") == ""
    assert split_host_key("g0001@node-7", labels) == ("node-7", "g0001")
    # an id that itself holds the separator: only the last one names the host
    assert split_host_key("a@b@h0", labels) == ("h0", "a@b")
    # not a known host, or nothing before the separator: not a tagged key
    assert split_host_key("g0001@h9", labels) == (None, "g0001@h9")
    assert split_host_key("@h0", labels) == (None, "@h0")
    assert split_host_key("g0001", labels) == (None, "g0001")

    rf = ev.RolloutFinished(rollout_id="r1", group_id="eval-1-abc", reward=1.0, turns_used=1, finished_naturally=True)
    tagged = tag_event(rf, "h0")
    assert (tagged.rollout_id, tagged.group_id) == ("r1@h0", "eval-1-abc@h0")
    assert tagged.group_id.startswith("eval-")  # the state's eval-group rule still holds
    assert (tagged.reward, tagged.ts) == (rf.reward, rf.ts)
    assert tag_event(ev.SandboxClosed(task_id="r1", reason="exit"), "h1").task_id == "r1@h1"
    assert tag_event(rev.EvalStarted(eval_id="eval-1-x"), "h1").eval_id == "eval-1-x@h1"
    lag = rev.LoopLag(lag_ms=3.0)
    assert tag_event(lag, "h0") is lag  # no ids: the same event


def test_staleness_counts_trainer_steps_since_the_last_confirmed_group() -> None:
    def status(step: int, sent: int, ts: float) -> rev.TrainerStatus:
        return rev.TrainerStatus(state="running", current_step=step, groups_sent=sent, ts=ts)

    clock = ConfirmClock()
    assert clock.staleness(None) is None
    clock.observe(status(0, 0, 100.0))
    assert clock.staleness(status(0, 0, 100.0)) is None  # nothing confirmed yet: "never"
    for t in (status(1, 2, 101.0), status(2, 4, 102.0)):
        clock.observe(t)
    assert clock.staleness(status(2, 4, 102.0)) == (0, 0.0, True)
    for t in (status(3, 4, 110.0), status(5, 4, 112.5)):  # the trainer moves on without this host
        clock.observe(t)
    assert clock.staleness(status(5, 4, 112.5)) == (3, 10.5, True)
    clock.observe(status(6, 5, 113.0))
    assert clock.staleness(status(6, 5, 113.0)) == (0, 0.0, True)

    late = ConfirmClock()  # attached after groups were confirmed: "at least"
    late.observe(status(7, 9, 50.0))
    late.observe(status(9, 9, 60.0))
    assert late.staleness(status(9, 9, 60.0)) == (2, 10.0, False)


# --------------------------------------------------------------------------- in-process hosts


class StandIn:
    """The part of RuntimeHost the listener uses; records the sandbox commands it gets."""

    def __init__(self) -> None:
        self.queue = EventQueue()
        self.calls: list[tuple[str, str]] = []
        self.driver = None

    def _done(self, result: Any) -> Future[Any]:
        f: Future[Any] = Future()
        f.set_result(result)
        return f

    def kill_sandbox(self, task_id: str) -> Future[bool]:
        self.calls.append(("kill_sandbox", task_id))
        return self._done(True)

    def sandbox_details(self, task_id: str) -> Future[SandboxDetails]:
        self.calls.append(("sandbox_details", task_id))
        return self._done(sample_details(task_id))


# The same ids on both hosts: one finished group, one running group with a rollout, a tool
# call that failed, a live sandbox. Each host's item text says which host it is.
def _same_ids_run(q: EventQueue, name: str) -> None:
    q.push(rev.RuntimeStatus(status="running"))
    q.push(rev.ItemReceived(group_id="g0001", item_summary=f"{name} item 1"))
    q.push(rev.ItemCompleted(group_id="g0001", scores=[1.0]))
    q.push(rev.ItemReceived(group_id="g0002", item_summary=f"{name} item 2"))
    q.push(ev.GroupStarted(group_id="g0002", item_summary=f"{name} item 2", group_size=1, phase=1))
    q.push(ev.RolloutStarted(rollout_id="r-shared", group_id="g0002"))
    q.push(ev.SandboxCreated(task_id="r-shared", backend="local", lifetime_s=60.0))
    q.push(ev.TurnStarted(rollout_id="r-shared", turn=1))
    q.push(ev.TurnFinished(rollout_id="r-shared", turn=1, latency_s=0.1, content=f"{name} says hi", tool_calls=1))
    q.push(
        ev.ToolCallStarted(rollout_id="r-shared", turn=1, call_id="c1", tool_name="terminal", args_head=f"echo {name}")
    )
    q.push(
        ev.ToolCallFinished(
            rollout_id="r-shared",
            turn=1,
            call_id="c1",
            tool_name="terminal",
            duration_s=0.1,
            error="boom",
            error_kind="tool_error",
        )
    )


class _Hosts:
    def __init__(self, n: int) -> None:
        self.rts: list[StandIn] = []
        self.listeners: list[Listener] = []
        self.addrs: list[str] = []
        for _ in range(n):
            rt = StandIn()
            listener = Listener(rt, parse_address("127.0.0.1:0"), token=TOKEN)
            listener.attach()
            self.addrs.append(listener.start())
            self.rts.append(rt)
            self.listeners.append(listener)

    def stop(self) -> None:
        for listener in self.listeners:
            listener.stop()


@pytest.fixture
def two_hosts():
    hosts = _Hosts(2)
    for rt, name in zip(hosts.rts, ("alpha", "beta")):
        _same_ids_run(rt.queue, name)
    # trainer: host 0's last group was confirmed at step 1, the trainer is at step 4 (12 s
    # later on host 0's clock); host 1 never had one confirmed
    for step, sent, ts in ((0, 0, 1000.0), (1, 1, 1001.0), (4, 1, 1013.0)):
        hosts.rts[0].queue.push(rev.TrainerStatus(state="running", current_step=step, groups_sent=sent, ts=ts))
    hosts.rts[1].queue.push(rev.TrainerStatus(state="running", current_step=4, groups_sent=0, ts=1013.0))
    yield hosts
    hosts.stop()


def test_two_hosts_with_the_same_ids_stay_apart(two_hosts: _Hosts) -> None:
    fleet = FleetRuntime(parse_targets([f"a={two_hosts.addrs[0]}", f"b={two_hosts.addrs[1]}"]), token=TOKEN)
    merged = ConsoleState()
    fleet.start()
    try:
        assert wait_until(
            lambda: (merged.apply_all(fleet.drain()), merged.accounting.received == 4 and len(merged.sandboxes) == 2)[
                1
            ],
            20,
        )
        a, b = fleet.hosts
        # each host's own view keeps the host's ids; the merged one has both, tagged
        assert set(a.state.groups) == set(b.state.groups) == {"g0001", "g0002"}
        assert set(merged.groups) == {"g0001@a", "g0002@a", "g0001@b", "g0002@b"}
        assert merged.groups["g0002@b"].item_summary == "beta item 2"
        assert merged.groups["g0002@a"].rollout_ids == ["r-shared@a"]
        acc = merged.accounting
        assert (acc.received, acc.completed, acc.in_flight) == (4, 2, 2)
        assert set(merged.sandboxes) == {"r-shared@a", "r-shared@b"}
        assert [(v.rollout_id, v.args_head) for v in merged.tool_rows] in (
            [("r-shared@a", "echo alpha"), ("r-shared@b", "echo beta")],
            [("r-shared@b", "echo beta"), ("r-shared@a", "echo alpha")],
        )
        assert merged.tool_errors_total == 2
        assert {fleet.host_of(k) for k in merged.groups} == {"a", "b"}
        assert fleet.host_of("g0002@b") == "b" and fleet.host_of("g0002") == ""
        # a sandbox command goes to the host the row came from, with that host's own id
        assert fleet.kill_sandbox("r-shared@b").result(10) is True
        assert two_hosts.rts[0].calls == [] and two_hosts.rts[1].calls == [("kill_sandbox", "r-shared")]
        fleet.selected = 0  # filtered to host a: its untagged ids are its own
        assert fleet.host_of("g0002") == "a"
        # the model crossed the wire as JSON and came back as the same model
        assert fleet.sandbox_details("r-shared").result(10) == sample_details("r-shared")
        assert two_hosts.rts[0].calls == [("sandbox_details", "r-shared")]
    finally:
        fleet.stop().result(10)


def test_one_attached_host_keeps_its_ids() -> None:
    hosts = _Hosts(1)
    _same_ids_run(hosts.rts[0].queue, "alpha")
    fleet = FleetRuntime(parse_targets(hosts.addrs), token=TOKEN)
    merged = ConsoleState()
    fleet.start()
    try:
        assert wait_until(lambda: (merged.apply_all(fleet.drain()), merged.accounting.received == 2)[1], 20)
        assert not fleet.multi_host and set(merged.groups) == {"g0001", "g0002"}
        assert set(merged.sandboxes) == {"r-shared"}
        assert fleet.kill_sandbox("r-shared").result(10) is True
        assert hosts.rts[0].calls == [("kill_sandbox", "r-shared")]
    finally:
        fleet.stop().result(10)
        hosts.stop()


# --------------------------------------------------------------------------- the console (Pilot)


def _cells(table: Any, key: str) -> list[str]:
    return [getattr(c, "plain", str(c)) for c in table.get_row(key)]


def _column_labels(table: Any) -> list[str]:
    return [str(c.label.plain).split(" ")[0] for c in table.columns.values()]


def test_main_screen_host_column(two_hosts: _Hosts) -> None:
    """Attached to two hosts, the groups, tool calls, sandboxes and turns panels say which
    host each row is from; the Hosts screen's trainer table shows each host's staleness."""
    from hermes_console.remote.fleet import FleetConsoleApp, TrainerHostsTable
    from hermes_console.ui.config import ConsoleConfig
    from hermes_console.ui.widgets.groups_table import GroupsTable
    from hermes_console.ui.widgets.sandboxes_table import SandboxesTable
    from hermes_console.ui.widgets.tool_calls_table import ToolCallsTable
    from hermes_console.ui.widgets.turns_stream import TurnsStream

    fleet = FleetRuntime(parse_targets([f"a={two_hosts.addrs[0]}", f"b={two_hosts.addrs[1]}"]), token=TOKEN)
    app = FleetConsoleApp(fleet, config=ConsoleConfig(ui_cpu_share=0.0))  # unthrottled: the test reads the screen
    seen: dict[str, Any] = {}

    async def until(pilot: Any, pred: Any, what: str) -> None:
        end = time.monotonic() + 30
        while time.monotonic() < end and not pred():
            await pilot.pause(0.1)
        assert pred(), f"timed out waiting for {what}"

    async def drive() -> None:
        async with app.run_test(size=(200, 50)) as pilot:
            screen = app.screen
            groups, sandboxes = screen.query_one(GroupsTable), screen.query_one(SandboxesTable)
            tools, turns = screen.query_one(ToolCallsTable), screen.query_one(TurnsStream)
            await until(
                pilot,
                lambda: len(groups.keys()) == 2 and len(sandboxes.keys()) == 2 and tools.row_count == 2,
                "both hosts' rows",
            )
            seen["groups"] = {k: _cells(groups, k) for k in groups.keys()}
            seen["sandboxes"] = {k: _cells(sandboxes, k) for k in sandboxes.keys()}
            seen["tools"] = sorted(_cells(tools, str(k.value)) for k in tools.rows)
            seen["turns"] = [strip.text for strip in turns.lines]
            seen["columns"] = {
                "groups": _column_labels(groups),
                "tools": _column_labels(tools),
                "sandboxes": _column_labels(sandboxes),
            }
            await pilot.press("H")
            await pilot.pause(0.2)
            trainer = app.screen.query_one(TrainerHostsTable)
            seen["stale"] = {k: _cells(trainer, k)[-1] for k in trainer.keys()}
            seen["stale_help"] = str(trainer.border_subtitle)
            await pilot.press("escape", "q")

    asyncio.run(drive())
    fleet.join(10)
    groups = seen["groups"]
    assert set(groups) == {"g0002@a", "g0002@b"}
    assert groups["g0002@a"][0] == "a" and "alpha item 2" in groups["g0002@a"][2]
    assert groups["g0002@b"][0] == "b" and "beta item 2" in groups["g0002@b"][2]
    assert {k: v[0] for k, v in seen["sandboxes"].items()} == {"r-shared@a": "a", "r-shared@b": "b"}
    assert [(row[0], row[4]) for row in seen["tools"]] == [("a", "echo alpha"), ("b", "echo beta")]
    said = [line for line in seen["turns"] if " says hi" in line]
    assert sorted(line.split()[1] + " " + line.split()[-3] for line in said) == ["a alpha", "b beta"], said
    assert seen["columns"]["groups"][:2] == ["host", "group"]
    assert seen["columns"]["tools"][:2] == ["host", "time"]
    assert seen["columns"]["sandboxes"][:2] == ["host", "task"]
    assert seen["stale"] == {"a": "3 · 12s", "b": "never"}
    assert "trainer steps" in seen["stale_help"]


def test_one_attached_host_has_no_host_column() -> None:
    from hermes_console.remote.fleet import FleetConsoleApp
    from hermes_console.ui.config import ConsoleConfig
    from hermes_console.ui.widgets.groups_table import GroupsTable
    from hermes_console.ui.widgets.sandboxes_table import SandboxesTable
    from hermes_console.ui.widgets.tool_calls_table import ToolCallsTable

    fleet = FleetRuntime(parse_targets(["unix:/nonexistent/hermes.sock"]))
    app = FleetConsoleApp(fleet, config=ConsoleConfig(ui_cpu_share=0.0))  # unthrottled: the test reads the screen
    labels: dict[str, list[str]] = {}

    async def drive() -> None:
        async with app.run_test(size=(200, 50)) as pilot:
            for table in (GroupsTable, ToolCallsTable, SandboxesTable):
                labels[table.__name__] = _column_labels(app.screen.query_one(table))
            await pilot.press("q")

    asyncio.run(drive())
    fleet.join(10)
    assert app.host_column is None
    assert labels == {
        "GroupsTable": ["group", "item", "done", "stage", "age"],
        "ToolCallsTable": ["time", "rollout", "tool", "arguments", "dur", "status"],
        "SandboxesTable": ["task", "backend", "state", "running", "elapsed/timeout", "idle"],
    }
