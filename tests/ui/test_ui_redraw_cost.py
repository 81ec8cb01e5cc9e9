"""Redraw work in a flood is O(what changed / what shows), not O(state): counted, never timed.

- The groups panel builds a row's cells only when that group changed (its age cell only
  when the shown age text changed); what it shows equals rows built from scratch.
- The sandboxes panel likewise builds a row only when what it shows changed.
- The turns stream, after a fold replaced the whole 5,000-entry ring buffer, indexes
  about a screen's worth of entries, not the deque; it shows the same lines as a full
  index of the same state, and scrolling up indexes more.
"""

from __future__ import annotations

from environments import events as ev
from hermes_console.runtime import events as rev
from hermes_console.runtime.coalesce import Coalesced
from hermes_console.runtime.state import MAX_STREAM
from hermes_console.ui.widgets.groups_table import GroupsTable
from hermes_console.ui.widgets.keyed_table import cell_look
from hermes_console.ui.widgets.sandboxes_table import SandboxesTable
from hermes_console.ui.widgets.turns_stream import TAIL_ENTRIES, TurnsStream
from hermes_console_dev.fake_runtime import FakeRuntime
from tests.ui.helpers import NOW, make_app, settle

GROUPS = 128


def _groups(n: int) -> list:
    out: list = [
        rev.RunConfigured(
            ts=NOW - 100,
            env_name="flood",
            mode="process",
            phase=1,
            group_size=4,
            max_in_flight=GROUPS,
            worker_timeout_s=600.0,
        )
    ]
    for i in range(n):
        gid = f"grp{i:03d}"
        out.append(rev.ItemReceived(ts=NOW - 90 + i * 0.1, group_id=gid, item_summary=f"task {i}"))
        out.append(
            ev.GroupStarted(ts=NOW - 90 + i * 0.1, group_id=gid, item_summary=f"task {i}", group_size=4, phase=1)
        )
    return out


def _fresh_rows(app, table: GroupsTable) -> dict[str, tuple]:
    """The oracle: every active group's row built from scratch, as cell keys."""
    state = app.state
    return {
        g.group_id: tuple(
            cell_look(c)
            for c in GroupsTable._row(
                g, app.now(), state.run.worker_timeout_s, state.history.group_label_of(g.group_id)
            )
        )
        for g in state.active_groups()
    }


def _shown_rows(table: GroupsTable) -> dict[str, tuple]:
    return {key: tuple(cell_look(c) for c in table.get_row(key)) for key in table.keys()}


async def test_groups_table_rebuilds_only_rows_whose_group_changed() -> None:
    runtime = FakeRuntime(_groups(GROUPS))
    app = make_app(runtime)  # a fixed clock: ages do not move between redraws
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(GroupsTable)
        assert len(table.keys()) == GROUPS
        assert _shown_rows(table) == _fresh_rows(app, table)
        builds, ages = table.cell_builds, table.age_builds
        # Two groups change (a rollout finishes in each); every other row is left alone.
        before = _fresh_rows(app, table)
        runtime.feed(
            [
                e
                for gid in ("grp005", "grp077")
                for e in (
                    ev.RolloutStarted(ts=NOW, rollout_id=f"{gid}-r0", group_id=gid),
                    ev.RolloutFinished(
                        ts=NOW, rollout_id=f"{gid}-r0", group_id=gid, reward=1.0, turns_used=1, finished_naturally=True
                    ),
                )
            ]
        )
        for _ in range(200):
            await settle(pilot)
            if table.cell_builds != builds:
                break
        after = _fresh_rows(app, table)
        changed = {k for k in after if after[k][:-1] != before[k][:-1]}
        assert changed == {"grp005", "grp077"}, changed  # the oracle agrees on which rows changed
        assert table.cell_builds - builds == len(changed)
        assert table.age_builds == ages  # the same second: no age cell was rebuilt
        assert _shown_rows(table) == after
        # A redraw with nothing changed builds nothing.
        builds = table.cell_builds
        table.update_from(app.state, app.now())
        assert table.cell_builds == builds
        # The clock moves on: ages are rebuilt (the shown second changed), the other cells not.
        table.update_from(app.state, app.now() + 5.0)
        assert table.cell_builds == builds and table.age_builds > ages
        shown = _shown_rows(table)
        assert shown != after and all(shown[k][:-1] == after[k][:-1] for k in after)
        # Groups that finish leave in one pass (DataTable.remove_row re-indexes every row per call).
        one_by_one: list[object] = []
        table.remove_row = one_by_one.append  # type: ignore[method-assign,assignment]
        app.state.apply_all(
            [rev.ItemCompleted(ts=NOW, group_id=f"grp{i:03d}", scores=[1.0], step=i + 1) for i in range(0, GROUPS, 2)]
        )
        table.update_from(app.state, app.now())
        assert not one_by_one
        assert table.keys() == [g.group_id for g in app.state.active_groups()] and len(table.keys()) == GROUPS // 2
        assert _shown_rows(table) == _fresh_rows(app, table)


def _flood_segments(segments: int, per_segment: int, rollout_id: str = "g0034-r1") -> list[Coalesced]:
    """Folded segments as a flooded queue hands them over: each keeps its newest lines, the rest is a count."""
    out = []
    for k in range(segments):
        seg = Coalesced()
        for i in range(per_segment):
            seg.add(
                ev.TurnFinished(
                    ts=NOW, rollout_id=rollout_id, turn=1000 + i, latency_s=0.1, content=f"fl{k:03d}.{i:04d}"
                )
            )
        out.append(seg)
    return out


def _expected_lines(state) -> list[str]:
    """The oracle, straight from the state: what each line of the stream must show, oldest first
    (collapsed mode, no filter): a gap line where sequence numbers jump, then the entry's text."""
    out: list[str] = []
    previous = None
    for entry in state.stream:
        if previous is not None and entry.seq - previous > 1:
            out.append(f"… {entry.seq - previous - 1} lines not shown")
        previous = entry.seq
        out.append(entry.text)
    return out


def _screen(stream: TurnsStream) -> list[str]:
    """The stream's lines on screen now (its content region, as the compositor asks for them)."""
    return [stream.render_line(y).text for y in range(stream.scrollable_content_region.height)]


def _matches(shown: list[str], expected: list[str]) -> bool:
    return len(shown) == len(expected) and all(want in got for got, want in zip(shown, expected))


async def test_stream_replaced_whole_indexes_a_few_screens_and_shows_the_same_lines(main_events) -> None:
    app = make_app(FakeRuntime(main_events))
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        stream = app.screen.query_one(TurnsStream)
        height = stream.scrollable_content_region.height
        assert stream.following and height > 5
        # A flood: 30 folded segments of 500 lines (200 kept each) replace the whole 5,000-entry ring buffer.
        before = stream.indexed_entries
        app.apply_events(_flood_segments(30, 500), force=True)
        await settle(pilot)
        state = app.state
        assert len(state.stream) == MAX_STREAM
        expected = _expected_lines(state)
        assert any("lines not shown" in line for line in expected)
        # Indexed: a few screens' worth of entries, not the ring buffer.
        indexed = stream.indexed_entries - before
        assert indexed <= max(TAIL_ENTRIES, 4 * stream.size.height), indexed
        assert indexed < MAX_STREAM // 10
        # The same screen as a full index: the scroll range covers every line, the tail shows the newest.
        assert stream.line_count == len(expected) == stream.virtual_size.height
        assert stream.is_vertical_scroll_end
        assert _matches(_screen(stream), expected[-height:])
        # A few more lines push the oldest (never indexed) entries out: still the state's lines.
        app.apply_events(_flood_segments(1, 50), force=True)
        await settle(pilot)
        expected = _expected_lines(state)
        assert stream.line_count == len(expected)
        assert _matches(_screen(stream), expected[-height:])
        assert stream.indexed_entries - before < MAX_STREAM // 5
        # Scrolling up indexes older entries as they come into view: a page up shows the lines above.
        stream.focus()
        await pilot.press("pageup")
        await settle(pilot)
        top = round(stream.scroll_y)
        assert not stream.following and top < len(expected) - height
        assert _matches(_screen(stream), expected[top : top + height])
        # Home: the oldest lines; every line is the state's.
        await pilot.press("home")
        await settle(pilot)
        assert round(stream.scroll_y) == 0
        assert _matches(_screen(stream), expected[:height])
        assert _matches([strip.text for strip in stream.lines], expected)


def _sandbox_rows(app, table: SandboxesTable, fresh: bool) -> dict[str, tuple]:
    if not fresh:
        return {key: tuple(cell_look(c) for c in table.get_row(key)) for key in table.keys()}
    labels = app.state.history.label_of
    return {
        sb.task_id: tuple(cell_look(c) for c in SandboxesTable._row(sb, app.now(), labels(sb.task_id)))
        for sb in app.state.live_sandboxes()
    }


async def test_sandboxes_table_rebuilds_only_rows_whose_sandbox_changed() -> None:
    opened = [
        ev.SandboxCreated(ts=NOW - 50 - i, task_id=f"box{i:03d}", backend="local", lifetime_s=300.0) for i in range(100)
    ]
    runtime = FakeRuntime(opened)
    app = make_app(runtime)  # a fixed clock
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(SandboxesTable)
        assert len(table.keys()) == 100
        assert _sandbox_rows(app, table, False) == _sandbox_rows(app, table, True)
        builds = table.row_builds
        runtime.feed([ev.SandboxCommandStarted(ts=NOW, task_id="box007", command="make test", timeout_s=30.0)])
        for _ in range(200):
            await settle(pilot)
            if table.row_builds != builds:
                break
        assert table.row_builds - builds == 1  # only the sandbox whose command started
        assert _sandbox_rows(app, table, False) == _sandbox_rows(app, table, True)
        # Time moves on: rows change (elapsed, idle countdown) and equal rows built from scratch.
        table.update_from(app.state, app.now() + 7.0)
        labels = app.state.history.label_of
        assert _sandbox_rows(app, table, False) == {
            sb.task_id: tuple(cell_look(c) for c in SandboxesTable._row(sb, app.now() + 7.0, labels(sb.task_id)))
            for sb in app.state.live_sandboxes()
        }
