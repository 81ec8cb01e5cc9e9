"""Rollouts history (sort, filter, quick filters, from a group and from the reward histogram),
transcripts (prompt, expandable results, siblings, diff, reward details) and freeze.

Oracles: the reward histogram's own counts (ConsoleState.reward_histogram), the events fed
in (scores, drop reasons, prompts), Python's sorted() over the events' values."""

from __future__ import annotations

from textual.widgets import DataTable, RichLog, Static

from environments import events as ev
from hermes_console.runtime import events as rev
from hermes_console.runtime.state import ConsoleState
from hermes_console.ui.screens.main import MainScreen
from hermes_console.ui.screens.rollouts import RolloutsScreen
from hermes_console.ui.screens.transcript import TranscriptScreen
from hermes_console.ui.widgets.groups_table import GroupsTable
from hermes_console.ui.widgets.rewards_panel import RewardsPanel
from hermes_console_dev.fake_runtime import FakeRuntime
from tests.helpers.ui import log_text, press_on_selected
from tests.ui.eventlog import T0
from tests.ui.helpers import make_app, messages, scenario, settle


def _table_ids(app) -> list[str]:
    table = app.screen.query_one("#rollouts-table", DataTable)
    return [table.get_row_at(i)[0].plain for i in range(table.row_count)]


def _column(app, index: int) -> list[str]:
    table = app.screen.query_one("#rollouts-table", DataTable)
    return [
        str(getattr(table.get_row_at(i)[index], "plain", table.get_row_at(i)[index])) for i in range(table.row_count)
    ]


def _transcript_text(app) -> str:
    return log_text(app.screen.query_one("#transcript", RichLog))


async def test_history_sort_filter_quick_filters_and_transcript() -> None:
    events = scenario("small")
    finished = [e for e in events if isinstance(e, ev.RolloutFinished)]
    dropped_groups = {e.group_id: e.reason for e in events if isinstance(e, ev.ItemDropped)}
    app = make_app(FakeRuntime(events))
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        await pilot.press("h", "a")  # the focused group's rollouts, then all of them
        await settle(pilot)
        assert isinstance(app.screen, RolloutsScreen)
        # every finished rollout, newest first by default
        assert sorted(_table_ids(app)) == sorted(e.rollout_id for e in finished)
        # sort by score: click the header, then again for ascending
        await pilot.click("#rollouts-table", offset=(45, 0))  # the "score" header
        await settle(pilot)
        assert app.screen.query_spec.sort == "score"
        scores = [float(x) for x in _column(app, 2)]
        assert scores == sorted((e.reward for e in finished), reverse=True)
        await pilot.press("S")
        await settle(pilot)
        assert [float(x) for x in _column(app, 2)] == sorted(e.reward for e in finished)
        # quick filter: score == 0, again to clear
        await pilot.press("0")
        await settle(pilot)
        assert sorted(_table_ids(app)) == sorted(e.rollout_id for e in finished if e.reward == 0)
        await pilot.press("0")
        await settle(pilot)
        assert len(_table_ids(app)) == len(finished)
        # dropped: the rollouts of the dropped groups, with the reason in the outcome column
        await pilot.press("D")
        await settle(pilot)
        expected = sorted(e.rollout_id for e in finished if e.group_id in dropped_groups)
        assert expected and sorted(_table_ids(app)) == expected
        assert all(reason in cell for cell, reason in zip(_column(app, 7), ["identical_scores"] * len(expected)))
        await pilot.press("a")
        # text filter over task words
        await pilot.press("slash", *"fizzbuzz", "enter")
        await settle(pilot)
        expected = sorted(e.rollout_id for e in finished if "fizzbuzz" in e.group_id + _summary(events, e.group_id))
        assert expected and sorted(_table_ids(app)) == expected
        # enter opens the transcript of the row under the cursor
        table = app.screen.query_one("#rollouts-table", DataTable)
        first = table.get_row_at(table.cursor_row)[0].plain
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, TranscriptScreen)
        assert app.screen.rollout_id == first
        # siblings: n walks the group in start order and wraps
        group = first.rsplit("-r", 1)[0]
        seen = [app.screen.rollout_id]
        for _ in range(4):
            await pilot.press("n")
            await settle(pilot)
            seen.append(app.screen.rollout_id)
        assert seen[:4] == [f"{group}-r{(int(first[-1]) + i) % 4}" for i in range(4)] and seen[4] == seen[0]
        await pilot.press("N")
        await settle(pilot)
        assert app.screen.rollout_id == seen[3]
        # diff against the best sibling names it with its reward
        await pilot.press("v")
        await settle(pilot)
        best = max(
            (e for e in finished if e.group_id == group and e.rollout_id != seen[3]),
            key=lambda e: (e.reward, e.rollout_id),
        )
        assert f"--- {best.rollout_id} (best sibling, reward {best.reward:.3f})" in _transcript_text(app)
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, RolloutsScreen)


def _summary(events, group_id: str) -> str:
    return next((e.item_summary for e in events if isinstance(e, rev.ItemReceived) and e.group_id == group_id), "")


async def test_history_of_the_focused_group_and_of_a_histogram_bin() -> None:
    events = scenario("small")
    app = make_app(FakeRuntime(events))
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        group_id = await press_on_selected(pilot, GroupsTable, "h")
        finished_here = [e.rollout_id for e in events if isinstance(e, ev.RolloutFinished) and e.group_id == group_id]
        assert sorted(_table_ids(app)) == sorted(finished_here)
        await pilot.press("escape")
        await settle(pilot)
        # the histogram: every bin opens exactly the rollouts the histogram counted in it
        panel = app.screen.query_one(RewardsPanel)
        panel.focus()
        await settle(pilot)
        state: ConsoleState = app.state
        rewards = list(state.recent_rewards)
        counts = state.reward_histogram(10, min([0.0, *rewards]), max([1.0, *rewards]))
        # the first, the last and the fullest bin (each push costs a screen: not all ten)
        fullest = max(range(len(counts)), key=lambda i: counts[i])
        for index in sorted({0, len(counts) - 1, fullest}):
            count = counts[index]
            panel.query_one("#reward-histogram").select(0)
            await pilot.press(*["right"] * index, "enter")
            await settle(pilot)
            assert isinstance(app.screen, RolloutsScreen)
            assert len(_table_ids(app)) == count, f"bin {index}"
            await pilot.press("escape")
            await settle(pilot)
        assert isinstance(app.screen, MainScreen)


def _rollout_with_prompt_and_details() -> list:
    t = T0
    long_result = "line\n" * 300
    return [
        rev.RuntimeStatus(ts=t, status="running"),
        rev.ItemReceived(ts=t, group_id="3f2a9c1d0b7e", item_summary="count lines"),
        ev.GroupStarted(ts=t + 1, group_id="3f2a9c1d0b7e", item_summary="count lines", group_size=2, phase=1),
        ev.RolloutStarted(
            ts=t + 1,
            rollout_id="7d1c-uuid-a",
            group_id="3f2a9c1d0b7e",
            item_summary="count lines",
            system_prompt="You are a careful shell agent.",
            prompt="Count the lines in data.txt",
        ),
        ev.RolloutStarted(ts=t + 1, rollout_id="9e0f-uuid-b", group_id="3f2a9c1d0b7e", item_summary="count lines"),
        ev.SandboxCreated(ts=t + 1, task_id="9e0f-uuid-b", backend="local", lifetime_s=300.0),
        ev.TurnStarted(ts=t + 2, rollout_id="7d1c-uuid-a", turn=1),
        ev.TurnFinished(ts=t + 4, rollout_id="7d1c-uuid-a", turn=1, latency_s=2.0, tool_calls=1),
        ev.ToolCallStarted(
            ts=t + 4,
            rollout_id="7d1c-uuid-a",
            turn=1,
            call_id="c1",
            tool_name="terminal",
            args_head='{"command": "cat data.txt"}',
        ),
        ev.ToolCallFinished(
            ts=t + 7,
            rollout_id="7d1c-uuid-a",
            turn=1,
            call_id="c1",
            tool_name="terminal",
            duration_s=3.0,
            result_head=long_result[:200],
            result_text=long_result,
        ),
        ev.TurnStarted(ts=t + 7, rollout_id="7d1c-uuid-a", turn=2),
        ev.TurnFinished(ts=t + 8, rollout_id="7d1c-uuid-a", turn=2, latency_s=1.0, content="300 lines"),
        ev.RolloutFinished(
            ts=t + 9,
            rollout_id="7d1c-uuid-a",
            group_id="3f2a9c1d0b7e",
            reward=0.5,
            turns_used=2,
            finished_naturally=True,
            duration_s=8.0,
            reward_s=0.5,
            trainable_tokens=60,
            reward_details={"tests passed": "1/2", "format_ok": True},
        ),
    ]


async def test_transcript_shows_real_prompt_full_results_reward_details_and_readable_ids() -> None:
    app = make_app(FakeRuntime(_rollout_with_prompt_and_details()))
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        # uuid-style ids get readable, linked labels: g0001 and g0001-r0 / -r1 by start order
        assert app.state.history.label_of("7d1c-uuid-a") == "g0001-r0"
        assert app.state.history.label_of("9e0f-uuid-b") == "g0001-r1"
        # the linked ids show where the rollouts are: groups table and the rollout's sandbox row
        from hermes_console.ui.widgets.sandboxes_table import SandboxesTable

        assert app.screen.query_one(GroupsTable).get_row("3f2a9c1d0b7e")[0].plain == "g0001"
        assert app.screen.query_one(SandboxesTable).get_row("9e0f-uuid-b")[0].plain == "g0001-r1"
        app.push_screen(TranscriptScreen("g0001-r0"))  # a label opens the rollout too
        await settle(pilot)
        text = _transcript_text(app)
        assert "system     You are a careful shell agent." in text
        assert "user       Count the lines in data.txt" in text
        assert "t: expand" in text and text.count("line") < 60
        header = str(app.screen.query_one("#rollout-header", Static).render())
        assert "tests passed: 1/2" in header and "format_ok: True" in header
        # the time split from the events: 3 s of generation, 3 s in tools, 0.5 s reward, rest other
        assert "generation 3s (2 calls)" in header and "tools 3s" in header and "reward 500ms" in header
        assert "other 1.5s" in header and "20 tok/s" in header
        await pilot.press("t")
        await settle(pilot)
        assert _transcript_text(app).count("           line") == 300  # every line of the result


async def test_freeze_keeps_the_screen_while_events_are_read() -> None:
    events = scenario("small")
    runtime = FakeRuntime(events[:50])
    app = make_app(runtime)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        await pilot.press("z")
        before = app.screen.query_one(GroupsTable).keys()
        runtime.feed(events[50:])
        await settle(pilot, 6)
        assert app.state.events_applied == len(events)  # still read
        assert app.screen.query_one(GroupsTable).keys() == before  # not drawn
        # said by a badge in the status bar, not by a toast that stays on screen
        assert "FROZEN" in _status_text(app) and not messages(app)
        await pilot.press("z")
        await settle(pilot)
        assert app.screen.query_one(GroupsTable).keys() != before
        assert "FROZEN" not in _status_text(app)


def _status_text(app) -> str:
    from hermes_console.ui.widgets.status_bar import StatusBar

    return str(app.screen.query_one(StatusBar).render())


async def test_main_tables_sort_by_a_clicked_header_and_keep_the_cursor_on_its_row() -> None:
    events = scenario("small")
    runtime = FakeRuntime(events[:-40])
    app = make_app(runtime)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        groups = app.screen.query_one(GroupsTable)
        groups.focus()
        await settle(pilot)
        # enter is in the footer while a table has focus
        assert any(
            b.binding.key == "enter" and b.binding.show and b.binding.description == "Open"
            for b in app.screen.active_bindings.values()
        )
        started = {e.group_id: e.ts for e in events if isinstance(e, rev.ItemReceived)}
        # the age column: click once = ascending age (youngest first), twice = oldest first
        age_x = sum(c.get_render_width(groups) for c in list(groups.columns.values())[:4]) + 2
        await pilot.click(GroupsTable, offset=(age_x, 1))
        await settle(pilot)
        assert groups.sort_column == "age", (groups.sort_column, age_x)
        keys = [groups.coordinate_to_cell_key((i, 0)).row_key.value for i in range(groups.row_count)]
        assert keys == sorted(keys, key=lambda k: -started[k])
        await pilot.click(GroupsTable, offset=(age_x, 1))
        await settle(pilot)
        keys = [groups.coordinate_to_cell_key((i, 0)).row_key.value for i in range(groups.row_count)]
        assert keys == sorted(keys, key=lambda k: started[k])
        # data updates keep the order and the cursor on its group
        groups.move_cursor(row=2)
        chosen = groups.selected_key()
        runtime.feed(events[-40:])
        await settle(pilot, 5)
        keys = [groups.coordinate_to_cell_key((i, 0)).row_key.value for i in range(groups.row_count)]
        assert keys == sorted(keys, key=lambda k: started[k])
        assert groups.selected_key() == chosen


def _uuid_ids(events: list) -> list:
    """The scenario with opaque ids (as real runs have) instead of its readable ones."""
    import dataclasses
    import hashlib

    def opaque(x: str, n: int) -> str:
        return hashlib.sha1(x.encode()).hexdigest()[:n]

    out = []
    for e in events:
        changes = {}
        for name, n in (("group_id", 12), ("rollout_id", 32), ("task_id", 32)):
            value = getattr(e, name, None)
            if isinstance(value, str) and value.startswith("g"):
                changes[name] = opaque(value, n)
        out.append(dataclasses.replace(e, **changes) if changes else e)
    return out


async def test_turns_stream_and_tool_calls_show_readable_rollout_ids() -> None:
    events = _uuid_ids(scenario("small"))
    # Oracle from the events: the i-th group started is g{i:04d}; a rollout's index is its start order in the group.
    group_no = {}
    members: dict = {}
    label = {}
    for e in events:
        if isinstance(e, ev.GroupStarted):
            group_no.setdefault(e.group_id, len(group_no) + 1)
        if isinstance(e, ev.RolloutStarted):
            rollouts = members.setdefault(e.group_id, [])
            label[e.rollout_id] = f"g{group_no[e.group_id]:04d}-r{len(rollouts)}"
            rollouts.append(e.rollout_id)
    app = make_app(FakeRuntime(events))
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        from hermes_console.ui.widgets.tool_calls_table import ToolCallsTable
        from hermes_console.ui.widgets.turns_stream import TurnsStream

        stream = app.screen.query_one("#turns", TurnsStream)
        text = "\n".join(strip.text for strip in stream.lines)
        assert text.strip()
        assert not any(rid[:12] in text for rid in label), "a raw rollout id in the turns stream"
        assert any(lbl in text for lbl in label.values()), text[-500:]
        tools = app.screen.query_one("#tools", ToolCallsTable)
        cells = [tools.get_row_at(i)[1].plain for i in range(tools.row_count)]
        assert cells and set(cells) <= set(label.values()), cells[:5]
