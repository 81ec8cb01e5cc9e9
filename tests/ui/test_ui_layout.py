"""Layout at 120–160 columns: the status and timeout columns are the last to go; the free-text
columns (item, command, arguments) shrink first. Oracle: each table's own column widths
against the width its panel really got on screen."""

from __future__ import annotations

import pytest
from textual.widget import Widget

from hermes_console_dev.fake_runtime import FakeRuntime
from tests.ui.helpers import make_app, scenario, settle

# table id -> the columns that must stay whole on screen
MUST_SHOW = {"groups": ("stage", "age"), "tools": ("dur", "status"), "sandboxes": ("state", "elapsed", "idle")}


def _right_edge(table, column: str) -> int:  # a DataTable, or the tool calls' LineTable (same columns API)
    edge = 0
    for key, col in table.columns.items():
        edge += col.get_render_width(table)
        if key.value == column:
            return edge
    raise AssertionError(f"{table.id} has no column {column!r}")


@pytest.mark.parametrize("size", [(120, 40), (160, 45)])  # 200x50: the snapshots
async def test_status_and_timeout_columns_stay_on_screen(size) -> None:
    app = make_app(FakeRuntime(scenario("small")))
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        for table_id, columns in MUST_SHOW.items():
            table = app.screen.query_one(f"#{table_id}", Widget)
            visible = table.scrollable_content_region.width
            for column in columns:
                assert _right_edge(table, column) <= visible, f"{size}: {table_id}.{column} is cut ({visible} wide)"
