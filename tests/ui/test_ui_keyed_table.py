"""The cursor stays on the same item while rows come and go around it."""

from __future__ import annotations

from rich.text import Text
from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.pilot import Pilot
from textual.widgets import DataTable

from hermes_console.ui.widgets.keyed_table import KeyedTable
from tests.helpers.ui import layout_passes, settle


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


class _Pair(App):
    def compose(self) -> ComposeResult:
        yield _Table(id="bulk")
        yield _Table(id="plain")


async def test_bulk_add_and_remove_equal_textual_row_by_row() -> None:
    """add_keyed_rows / remove_rows / set_cell (one pass each) leave the table exactly as
    DataTable's own add_row / remove_row / update_cell do, sorted or not (the oracle is Textual)."""
    app = _Pair()
    async with app.run_test(size=(40, 30)) as pilot:
        bulk, plain = app.query_one("#bulk", _Table), app.query_one("#plain", _Table)

        def shown(table: _Table) -> list[tuple[str, str]]:
            return [
                (str(table.coordinate_to_cell_key((i, 0)).row_key.value), str(table.get_row_at(i)[0]))
                for i in range(table.row_count)
            ]

        keys = [f"k{i:03d}" for i in range(60)]
        bulk.add_keyed_rows([(k, (f"v{(i * 37) % 60:02d}",)) for i, k in enumerate(keys)])
        for i, k in enumerate(keys):
            plain.add_row(f"v{(i * 37) % 60:02d}", key=k)
        assert shown(bulk) == shown(plain) and bulk.row_count == 60
        gone = keys[:10] + keys[25:40:3] + [keys[-1]]
        bulk.remove_rows(gone)
        for k in gone:
            plain.remove_row(k)
        assert shown(bulk) == shown(plain)
        bulk.set_cell(keys[20], "name", "changed")
        bulk.flush_cells()
        plain.update_cell(keys[20], "name", "changed")
        bulk.sort("name")
        plain.sort("name")
        bulk.remove_rows(keys[12:20])  # removing from a sorted table keeps its order
        for k in keys[12:20]:
            plain.remove_row(k)
        bulk.add_keyed_rows([("new1", ("a",)), ("new2", ("zz",))])
        plain.add_row("a", key="new1")
        plain.add_row("zz", key="new2")
        await pilot.pause()
        assert shown(bulk) == shown(plain)
        assert bulk.virtual_size == plain.virtual_size
        bulk.move_cursor(row=bulk.row_count - 1)
        plain.move_cursor(row=plain.row_count - 1)
        assert bulk.selected_key() == plain.selected_key() == "new2"


async def _eight_lines_high(pilot: Pilot, rows: list[str]) -> _Table:
    """The host's table, eight lines high (the header and seven rows), holding ``rows``,
    focused and settled: the focus the app gives it restyles its scrollbar (a layout pass),
    which on a loaded box could land after one pause, inside a count."""
    table = pilot.app.query_one(_Table)
    table.styles.height = 8
    table.focus()
    table.sync({k: (k,) for k in rows})
    await settle(pilot)
    return table


async def test_rows_coming_and_going_at_a_steady_count_ask_for_no_layout_pass() -> None:
    """A layout pass re-arranges the whole screen (~19 ms at 160x45): a redraw where one row
    leaves and another comes (the row count, so the table's virtual size, unchanged) must
    repaint the table only; a shrinking table still gets its new size (and scrollbars)."""
    app = _Host()
    async with app.run_test(size=(40, 12)) as pilot:
        rows = [f"r{i:02d}" for i in range(20)]
        table = await _eight_lines_high(pilot, rows)
        with layout_passes() as layouts:
            for i in range(20, 30):
                rows = [*rows[1:], f"r{i:02d}"]
                table.sync({k: (k,) for k in rows})
                await pilot.pause()
            assert layouts[0] == 0
            assert [str(table.get_row_at(i)[0]) for i in range(table.row_count)] == rows
            table.sync({k: (k,) for k in rows[:3]})  # the table shrinks: its virtual size follows
            await pilot.pause()
            assert table.row_count == 3 and table.virtual_size.height == 4  # 3 rows + the header


async def test_a_table_growing_and_shrinking_beyond_its_panel_asks_for_no_layout_pass() -> None:
    """Rows of a busy run come faster than they go: the row count changes on most redraws.
    While the table overflows its panel either way, the scrollbar follows in place."""
    app = _Host()
    async with app.run_test(size=(40, 12)) as pilot:
        rows = [f"r{i:03d}" for i in range(20)]
        table = await _eight_lines_high(pilot, rows)
        with layout_passes() as layouts:
            for n in (30, 45, 25, 60, 12):
                rows = [f"r{i:03d}" for i in range(n)]
                table.sync({k: (k,) for k in rows})
                await pilot.pause()
                assert table.virtual_size.height == n + 1  # + the header
                assert table.vertical_scrollbar.window_virtual_size == n + 1
            assert layouts[0] == 0
            table.move_cursor(row=11)
            await pilot.pause()
            assert table.selected_key() == "r011" and table.scroll_y == table.max_scroll_y
            table.sync({k: (k,) for k in rows[:3]})  # fits the panel: the scrollbar goes
            await pilot.pause()
            assert layouts[0] >= 1 and not table.show_vertical_scrollbar


class _AutoWidth(KeyedTable):
    COLUMNS = (("name", "name", 8), ("note", "note", None))  # None: the column is as wide as its cells


class _AutoHost(App):
    def compose(self) -> ComposeResult:
        yield _AutoWidth(id="bulk")
        yield DataTable(id="plain")


async def test_an_auto_width_column_grows_when_a_cell_changes_as_textual_does() -> None:
    """A cell that changes after the row was first measured (a server's error arriving after
    its row) widens its auto-width column, as DataTable.update_cell(update_width=True) does
    (the oracle). It used to keep the header's width: the serve snapshot showed "APIConnect"
    when the error arrived in a later batch than the server."""
    app = _AutoHost()
    async with app.run_test(size=(100, 20)) as pilot:
        bulk, plain = app.query_one("#bulk", _AutoWidth), app.query_one("#plain", DataTable)
        plain.add_column("name", width=8, key="name")
        plain.add_column("note", key="note")
        bulk.sync({"a": ("server-a", "")})
        plain.add_row("server-a", "", key="a")
        await settle(pilot)
        long = "APIConnectionError: Connection refused (127.0.0.1:8100)"
        bulk.sync({"a": ("server-a", long)})
        plain.update_cell("a", "note", long, update_width=True)
        await settle(pilot)
        widths = [[c.get_render_width(t) for c in t.columns.values()] for t in (bulk, plain)]
        assert widths[0] == widths[1] and widths[0][1] >= len(long), widths


class _Wide(KeyedTable):
    COLUMNS = (("name", "name", 10), ("state", "state", 8), ("age", "age", 6))


class _LookHost(App):
    def compose(self) -> ComposeResult:
        yield _Wide(id="bulk")
        yield DataTable(id="plain", cursor_type="row", zebra_stripes=True)


def _rows(tick: int) -> dict[str, tuple]:
    return {
        f"r{i:02d}": (
            Text(f"r{i:02d}", style="bold"),
            "running" if i % 3 else Text("done", style="green"),
            f"{tick + i}s",
        )
        for i in range(12)
    }


async def test_a_redraw_renders_only_the_cells_that_changed_and_draws_what_datatable_draws() -> None:
    """DataTable drops every rendered cell on any change (its cache is keyed by an update
    count): a ticking age column re-rendered every visible cell. KeyedTable keeps cells by
    their look. The count of cells rendered is structural (calls of the console's
    render_lines); the oracle for the looks is Textual's DataTable fed the same rows, line by
    line (text, styles and the row/column meta)."""
    app = _LookHost()
    async with app.run_test(size=(60, 40)) as pilot:
        bulk, plain = app.query_one("#bulk", _Wide), app.query_one("#plain", DataTable)
        for key, label, width in _Wide.COLUMNS:
            plain.add_column(label, key=key, width=width)
        for key, cells in _rows(0).items():
            plain.add_row(*cells, key=key)
        bulk.sync(_rows(0))
        app.set_focus(None)  # both unfocused: a focused table draws in other colours
        await settle(pilot)
        calls, depth = 0, 0
        console = app.console
        real = console.render_lines

        def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
            nonlocal calls, depth
            calls += depth == 0  # a cell's padding renders its text with a nested call
            depth += 1
            try:
                return real(*args, **kwargs)
            finally:
                depth -= 1

        console.render_lines = counting  # type: ignore[method-assign]
        for tick in (1, 2):
            calls = 0
            bulk.sync(_rows(tick))
            bulk.render_lines(Region(0, 0, bulk.size.width, bulk.size.height))  # what the next repaint asks
            rendered = calls
            assert rendered <= 12 + 3, f"{rendered} cells rendered for 12 changed ages (36 cells, 3 headers)"
            for key, cells in _rows(tick).items():
                plain.update_cell(key, "age", cells[2])
            await settle(pilot)
            lines = bulk.render_lines(Region(0, 0, bulk.size.width, bulk.size.height))
            theirs = plain.render_lines(Region(0, 0, plain.size.width, plain.size.height))
            assert [list(s) for s in lines] == [list(s) for s in theirs]
        console.render_lines = real  # type: ignore[method-assign]


async def test_a_row_drawn_before_its_column_is_re_measured_is_drawn_again_at_the_new_width() -> None:
    """The column widens on idle; a row drawn between the change and that pass was cached at
    the old width (DataTable's caches are keyed by its update count, not by column widths),
    and stayed cropped until the next change: the serve snapshot's "APIConnect", ~1 render
    in 6. The row's line after the idle pass must show the whole cell."""
    app = _AutoHost()
    async with app.run_test(size=(100, 20)) as pilot:
        bulk = app.query_one("#bulk", _AutoWidth)
        bulk.sync({"a": ("server-a", "")})
        await settle(pilot)
        long = "APIConnectionError: Connection refused (127.0.0.1:8100)"
        bulk.sync({"a": ("server-a", long)})
        bulk.render_line(1)  # a paint before the idle pass: cached at the header's width
        await settle(pilot)
        assert long in bulk.render_line(1).text
