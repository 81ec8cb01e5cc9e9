"""The cursor stays on the same item while rows come and go around it."""

from __future__ import annotations

from textual.app import App, ComposeResult

from hermes_console.ui.widgets.keyed_table import KeyedTable


class _Table(KeyedTable):
    COLUMNS = (("name", "name", 10),)


class _Host(App):
    def compose(self) -> ComposeResult:
        yield _Table()


async def test_selection_stays_on_its_item_when_rows_above_it_go() -> None:
    app = _Host()
    async with app.run_test() as pilot:
        table = app.query_one(_Table)
        table.sync({k: (k,) for k in ("a", "b", "c", "d")})
        table.move_cursor(row=2)
        await pilot.pause()
        assert table.selected_key() == "c"
        table.sync({k: (k,) for k in ("b", "c", "d", "e")})  # "a" finished and left
        await pilot.pause()
        assert table.selected_key() == "c"
        table.sync({k: (k + "!",) for k in ("c", "d", "e")})  # cells change, "b" leaves
        await pilot.pause()
        assert table.selected_key() == "c"
        table.sync({k: (k,) for k in ("d", "e")})  # the selected item itself leaves: stay near
        await pilot.pause()
        assert table.selected_key() in ("d", "e")
