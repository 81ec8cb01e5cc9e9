"""Redraw work in a flood is O(what changed / what shows), not O(state): counted, never timed.

- The groups panel builds a row's cells only when that group changed (its age cell only
  when the shown age text changed); what it shows equals rows built from scratch.
- The turns stream, after a fold replaced the whole 5,000-entry ring buffer, indexes
  about a screen's worth of entries, not the deque; it shows the same lines as a full
  index of the same state, and scrolling up indexes more.
"""

from __future__ import annotations

from environments import events as ev
from hermes_console.runtime import events as rev
from hermes_console.ui.widgets.groups_table import GroupsTable
from hermes_console.ui.widgets.keyed_table import cell_key
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
            cell_key(c)
            for c in GroupsTable._row(
                g, app.now(), state.run.worker_timeout_s, state.history.group_label_of(g.group_id)
            )
        )
        for g in state.active_groups()
    }


def _shown_rows(table: GroupsTable) -> dict[str, tuple]:
    return {key: tuple(cell_key(c) for c in table.get_row(key)) for key in table.keys()}


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
