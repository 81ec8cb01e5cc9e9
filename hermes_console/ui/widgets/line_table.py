"""A table drawn with the Line API: rows are an index of keys, only visible rows are rendered.

Textual's ``DataTable`` keeps a row object, a cell dict and a location entry per row and
re-indexes them on every add / remove / sort, which made a flood's 500-row turnover cost a
quarter of a second of UI CPU. ``LineTable`` keeps one list of keys in display order; a
subclass says what the cells of a key are (``_cells``) and when they change (``_stamp``).
A line is rendered when it is on screen (``render_line``), and cached by key and stamp.

It looks and behaves like the ``KeyedTable`` (a ``DataTable`` with a row cursor and zebra
stripes) it replaces: the same component classes and CSS, the same cell padding and
styles, the same header click to sort (again: reverse), ``s`` / ``S``, cursor keys, page
up / down, click to select (click the selected row again, or enter: ``RowSelected``).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual._segment_tools import line_crop
from textual.binding import Binding, BindingType
from textual.geometry import Region, Size, Spacing
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets.data_table import ColumnKey, RowKey

from hermes_console.ui.widgets.column_sort import ColumnSort
from hermes_console.ui.widgets.keyed_table import (
    Cell,
    HostColumn,
    cell_look,
    host_column_of,
    render_cell_line,
    sort_value,
)
from hermes_console.ui.widgets.pass_styles import PassStyles
from hermes_console.ui.widgets.virtual_size import set_virtual_size

STRIP_CACHE = 2_000  # rendered lines kept (a few screens' worth at several cursor / hover states)
CELL_CACHE = 5_000  # rendered cells by look (text, styles, width)
_RowCells = tuple[list[list[Segment]], Style]  # a row's rendered cells, and the style after them
PADDING = 1  # DataTable's cell_padding: one blank cell each side of a column


@dataclass
class TableColumn:
    """A column: its key, its header label (with the sort arrow) and its content width."""

    key: str
    label: Text
    width: int

    @property
    def render_width(self) -> int:
        return self.width + 2 * PADDING

    def get_render_width(self, table: object = None) -> int:
        """As DataTable's ``Column.get_render_width`` (callers measure both kinds of table)."""
        return self.render_width


class LineTable(PassStyles, ColumnSort, ScrollView, can_focus=True):
    """Rows keyed by int keys in ``self._order`` (display order); subclasses fill it."""

    ALLOW_SELECT = False
    COLUMNS: Sequence[tuple[str, str, int]] = ()  # (key, label, width)
    HOSTED = False  # attached to several hosts: a leading "host" column (see host_column_of)

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "Open", show=True),
        Binding("up", "cursor_up", "Cursor up", show=False),
        Binding("down", "cursor_down", "Cursor down", show=False),
        Binding("right", "scroll_right", "Scroll right", show=False),
        Binding("left", "scroll_left", "Scroll left", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("home,ctrl+home", "cursor_top", "Top", show=False),
        Binding("end,ctrl+end", "cursor_bottom", "Bottom", show=False),
    ]

    # The DataTable's own component classes and CSS, so the table looks the same.
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "datatable--cursor",
        "datatable--hover",
        "datatable--header",
        "datatable--header-cursor",
        "datatable--header-hover",
        "datatable--odd-row",
        "datatable--even-row",
    }
    DEFAULT_CSS = """
    LineTable {
        background: $surface;
        color: $foreground;
        height: auto;
        max-height: 100%;
        &:focus {
            background-tint: $foreground 5%;
            & > .datatable--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
            & > .datatable--header {
                background-tint: $foreground 5%;
            }
        }
        &:dark {
            & > .datatable--even-row {
                background: $surface-darken-1 40%;
            }
        }
        & > .datatable--header {
            text-style: bold;
            background: $panel;
            color: $foreground;
        }
        &:ansi > .datatable--header {
            background: ansi_bright_blue;
            color: ansi_default;
        }
        & > .datatable--even-row {
            background: $surface-lighten-1 50%;
        }
        & > .datatable--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
        & > .datatable--header-cursor {
            background: $accent-darken-1;
            color: $foreground;
        }
        & > .datatable--header-hover {
            background: $accent 30%;
        }
        & > .datatable--hover {
            background: $block-hover-background;
        }
    }
    """

    class RowSelected(Message):
        """Enter on a row, or a click on the row the cursor is on."""

        def __init__(self, table: LineTable, key: str) -> None:
            super().__init__()
            self.table = table
            self.key = key

        @property
        def control(self) -> LineTable:
            return self.table

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._order: list[int] = []  # keys in display order
        self._pos: dict[int, int] | None = None  # key -> display index (built when asked)
        self.cursor_row = 0
        self.hover_row = 0
        self._show_hover_cursor = False
        self.sort_column: str | None = None  # a header click sorts by it; again: reverse
        self.sort_reverse = False
        self.host_column: HostColumn | None = None
        # Keyed like DataTable.columns (ColumnKey equals and hashes as its string).
        self.columns: dict[ColumnKey, TableColumn] = {}
        self._strips: dict[Hashable, Strip] = {}
        self._rows: dict[Hashable, _RowCells] = {}  # a row's cells by look, whatever its place
        self._zebra = 0  # the stripe of row 0 (0: even); _set_order keeps stripes on their rows
        self._cell_cache: dict[Hashable, list[Segment]] = {}
        self.lines_rendered = 0  # data lines rendered (not from the cache): for tests and benches
        self._rows_shown = 0  # data rows the last layout had room for (on_resize)

    def on_mount(self) -> None:
        if self.HOSTED:
            self.host_column = host_column_of(self.app)
            if self.host_column is not None:
                self.COLUMNS = (("host", "host", self.host_column.host_width), *type(self).COLUMNS)
        self.columns = {
            ColumnKey(key): TableColumn(key, Text.from_markup(label), width) for key, label, width in self.COLUMNS
        }
        self._resized()

    # ------------------------------------------------------------------ what subclasses provide

    def _cells(self, key: int) -> Sequence[Cell]:
        """The row's cells, one per column (the host first when there is a host column)."""
        raise NotImplementedError

    def _sort_cell(self, key: int, column: str) -> Cell:
        """The row's cell in ``column`` (subclasses may build just that one)."""
        index = [name for name, _, _ in self.COLUMNS].index(column)
        return self._cells(key)[index]

    def _stamp(self, key: int) -> Hashable:
        """Changes whenever the row's cells do (the line cache is keyed by it)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ the index

    @property
    def row_count(self) -> int:
        return len(self._order)

    def index_of(self, key: int) -> int | None:
        if self._pos is None:
            self._pos = {k: i for i, k in enumerate(self._order)}
        return self._pos.get(key)

    def _set_order(self, order: list[int]) -> None:
        # Zebra stripes stay on their rows: the first row that stays keeps its stripe, so the
        # oldest rows leaving a full window move the stripes up with the rows instead of
        # flipping every line (which also re-rendered every line on screen).
        kept = self.index_of(order[0]) if order and self._order else None
        self._zebra = (kept + self._zebra) % 2 if kept is not None else 0
        self._order = order
        self._pos = None
        self._resized()
        self.refresh()

    def _resized(self) -> None:
        width = sum(column.render_width for column in self.columns.values())
        set_virtual_size(self, Size(width, len(self._order) + 1))  # + the header line

    def selected_key(self) -> str | None:
        """Key of the row under the cursor, if any."""
        if not self._order:
            return None
        return str(self._order[min(self.cursor_row, len(self._order) - 1)])

    def get_row_at(self, index: int) -> list[Cell]:
        return list(self._cells(self._order[index]))

    def get_row(self, key: RowKey | str | int) -> list[Cell]:
        value = key.value if isinstance(key, RowKey) else key
        return list(self._cells(int(value or 0)))

    def get_row_index(self, key: str) -> int:
        index = self.index_of(int(key))
        if index is None:
            raise KeyError(f"no row with key {key!r} in {type(self).__name__}")
        return index

    @property
    def rows(self) -> list[RowKey]:
        """The shown rows' keys in display order (as DataTable row keys)."""
        return [RowKey(str(key)) for key in self._order]

    def keys(self) -> list[str]:
        return [str(key) for key in sorted(self._order)]

    # ------------------------------------------------------------------ sort (click a header, s / S)

    def sort_by(self, column: str | None, reverse: bool = False) -> None:
        self._strips.clear()  # the header's arrow and every line's place change
        self._rows.clear()
        super().sort_by(column, reverse)
        self.refresh()

    def _sorted(self, keys: list[int]) -> list[int]:
        """``keys`` (oldest first) in display order: stable, so ties keep their age order."""
        if self.sort_column is None:
            return keys
        column = self.sort_column
        return sorted(keys, key=lambda k: sort_value(self._sort_cell(k, column)), reverse=self.sort_reverse)

    def _resort(self) -> None:
        if self.sort_column is None or not self._order:
            return
        selected = self.selected_key()
        self._set_order(self._sorted(sorted(self._order)))
        if selected is not None:
            self.move_cursor(row=self.get_row_index(selected))

    # ------------------------------------------------------------------ cursor

    def move_cursor(self, *, row: int | None = None, animate: bool = False, scroll: bool = True) -> None:
        if row is None:
            return
        row = max(0, min(row, len(self._order) - 1))
        if row != self.cursor_row:
            self.cursor_row = row
            self.refresh()
        if scroll:
            self._scroll_cursor_into_view(animate=animate)

    def on_resize(self, _: events.Resize) -> None:
        """A panel that grows or shrinks keeps its cursor's row on screen if it was (a table at
        its tail keeps showing the newest row); a row scrolled away from stays away."""
        rows_shown = self._rows_shown
        self._rows_shown = max(0, self.scrollable_content_region.height - 1)  # the header does not scroll
        if self._order and int(self.scroll_y) <= self.cursor_row < int(self.scroll_y) + rows_shown:
            self._scroll_cursor_into_view()

    def _clamp_cursor(self) -> None:
        """Keep the cursor on a row after rows went away (DataTable clamps it the same way)."""
        clamped = max(0, min(self.cursor_row, len(self._order) - 1))
        if clamped != self.cursor_row:
            self.cursor_row = clamped
            self._scroll_cursor_into_view()

    def _scroll_cursor_into_view(self, animate: bool = False) -> None:
        def scroll() -> None:
            if not self._order:
                return
            region = Region(int(self.scroll_x), self.cursor_row + 1, max(1, self.size.width), 1)
            self.scroll_to_region(region, animate=animate, spacing=Spacing(1, 0, 0, 0), force=True)

        # Now, so the next paint is at the new place (the virtual size is already set), and
        # again after the next refresh, when scrollbars that came or went have been laid out.
        if self.size.height:
            scroll()
        self.call_after_refresh(scroll)

    def action_cursor_up(self) -> None:
        self._show_hover_cursor = False
        self.move_cursor(row=self.cursor_row - 1)

    def action_cursor_down(self) -> None:
        self._show_hover_cursor = False
        self.move_cursor(row=self.cursor_row + 1)

    def action_cursor_top(self) -> None:
        self._show_hover_cursor = False
        self.move_cursor(row=0)

    def action_cursor_bottom(self) -> None:
        self._show_hover_cursor = False
        self.move_cursor(row=len(self._order) - 1)

    def _page_height(self) -> int:
        return self.scrollable_content_region.height - 1  # the header does not scroll

    def action_page_down(self) -> None:
        self._show_hover_cursor = False
        height = self._page_height()
        rows = min(len(self._order) - self.cursor_row, height + 1)
        self.scroll_relative(y=height, animate=False, force=True)
        self.move_cursor(row=self.cursor_row + rows - 1, scroll=False)

    def action_page_up(self) -> None:
        self._show_hover_cursor = False
        height = self._page_height()
        rows = min(self.cursor_row + 1, height + 1)
        self.scroll_relative(y=-height, animate=False)
        self.move_cursor(row=self.cursor_row - rows + 1, scroll=False)

    def action_select_cursor(self) -> None:
        self._show_hover_cursor = False
        key = self.selected_key()
        if key is not None:
            self.post_message(self.RowSelected(self, key))

    # ------------------------------------------------------------------ mouse

    def _hit(self, event: events.MouseEvent) -> tuple[int, int] | None:
        """(row index, column index) under the mouse; row -1 is the header."""
        offset = event.get_content_offset(self)
        if offset is None:
            return None
        row = -1 if offset.y == 0 else offset.y - 1 + int(self.scroll_y)
        if row >= len(self._order):
            return None
        x, column = offset.x + int(self.scroll_x), 0
        for index, col in enumerate(self.columns.values()):
            if x < col.render_width:
                column = index
                break
            x -= col.render_width
        return row, column

    async def _on_click(self, event: events.Click) -> None:
        self._show_hover_cursor = True
        hit = self._hit(event)
        if hit is None:
            return
        row, column = hit
        if row == -1:
            self.header_clicked(list(self.columns.values())[column].key)
            return
        again = row == self.cursor_row
        self.move_cursor(row=row, animate=True)
        if again:
            self.action_select_cursor()
            self._show_hover_cursor = True
        event.stop()

    def _on_mouse_move(self, event: events.MouseMove) -> None:
        hit = self._hit(event)
        show, row = (hit is not None), (hit[0] if hit is not None else self.hover_row)
        if (show, row) != (self._show_hover_cursor, self.hover_row):
            self._show_hover_cursor, self.hover_row = show, row
            self.refresh()

    def _on_leave(self, _: events.Leave) -> None:
        if self._show_hover_cursor:
            self._show_hover_cursor = False
            self.refresh()

    # ------------------------------------------------------------------ rendering (visible lines only)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips.clear()
        self._rows.clear()
        self._cell_cache.clear()
        self.refresh()

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.size.width
        index = -1 if y == 0 else y - 1 + scroll_y
        base_style = self.rich_style
        if index >= len(self._order):
            return Strip.blank(width, base_style)
        key = self._order[index] if index >= 0 else None
        cursor = index == self.cursor_row
        hover = self._show_hover_cursor and index == self.hover_row
        odd = (index + self._zebra) % 2 == 1
        cache_key = (
            index,
            odd,
            key,
            self._stamp(key) if key is not None else None,
            cursor,
            hover,
            scroll_x,
            width,
            base_style,
            self.get_pseudo_class_state(),
        )
        strip = self._strips.get(cache_key)
        if strip is None:
            if len(self._strips) >= STRIP_CACHE:
                self._strips.clear()
            # A row's look does not depend on its place: when the oldest rows leave a full
            # window, every line moves up and is re-assembled from its cached cells.
            row_key = cache_key[1:]
            cells = self._rows.get(row_key)
            if cells is None:
                if len(self._rows) >= STRIP_CACHE:
                    self._rows.clear()
                cells = self._rows[row_key] = self._row_cells(odd, key, cursor, hover)
                if key is not None:
                    self.lines_rendered += 1
            strip = self._strips[cache_key] = self._assemble(index, cells, scroll_x, width, base_style)
        return strip

    def _row_cells(self, odd: bool, key: int | None, cursor: bool, hover: bool) -> _RowCells:
        """A row's cells as DataTable draws them in a row-cursor table (``odd``: its zebra
        stripe), and the style of the space after the last column: all but their place."""
        header = key is None
        if header:
            row_style = self.get_component_styles("datatable--header").rich_style
            cells: Sequence[Any] = [column.label for column in self.columns.values()]
        else:
            zebra = "datatable--odd-row" if odd else "datatable--even-row"
            row_style = self.get_component_styles(zebra).rich_style
            cells = [_formatted(cell) for cell in self._cells(key or 0)]
        component, post = self._cell_styles(header, hover, cursor)
        lines = [
            self._cell_line(cell, column, row_style, component, post)
            for column, cell in zip(self.columns.values(), cells)
        ]
        return lines, row_style + component

    def _assemble(self, index: int, cells: _RowCells, scroll_x: int, width: int, base_style: Style) -> Strip:
        """One line at row ``index``: the same segments and styles as DataTable's."""
        lines, extend = cells
        segments: list[Segment] = []
        for column_index, line in enumerate(lines):
            # The cell's place rides on its segments as DataTable puts it (the same segments
            # on screen); added last, it changes nothing else of the style.
            meta = Style.from_meta({"row": index, "column": column_index})
            segments += [Segment(text, style + meta) for text, style, _ in line]
        table_width = sum(column.render_width for column in self.columns.values())
        out_of_bounds = Style.from_meta({"row": index, "column": 0, "out_of_bounds": True})
        segments.append(Segment(" " * max(0, width - table_width), extend + out_of_bounds))
        cropped = line_crop(segments, scroll_x, scroll_x + width, width)
        return Strip(cropped).adjust_cell_length(width, base_style).simplify()

    def _cell_line(
        self, cell: Text, column: TableColumn, row_style: Style, component: Style, post: Style
    ) -> list[Segment]:
        """A cell padded and styled as DataTable renders it (one line), cached by its look:
        the same status, tool name or duration in another row costs a dict lookup."""
        cache_key = (cell_look(cell), column.width, row_style, component, post)
        line = self._cell_cache.get(cache_key)
        if line is None:
            if len(self._cell_cache) >= CELL_CACHE:
                self._cell_cache.clear()
            lines = render_cell_line(self.app, cell, column.render_width, PADDING, row_style + component, post)
            line = self._cell_cache[cache_key] = lines[0]
        return line

    def _cell_styles(self, header: bool, hover: bool, cursor: bool) -> tuple[Style, Style]:
        """Component style and post style of a cell (DataTable's rules for a row cursor:
        the cursor's foreground wins over the cell's, the cell's background over the cursor's)."""
        get = self.get_component_rich_style
        component = Style()
        if hover:
            component += get("datatable--hover")
            if header:
                component += get("datatable--header-hover")
        if cursor:
            component += get("datatable--cursor")
            if header:
                component += get("datatable--header-cursor")
        return component, Style.from_color(color=component.color)


def _formatted(cell: Cell) -> Text:
    """A cell as DataTable shows it: strings are markup, one line, no wrapping."""
    if isinstance(cell, Text):
        return cell
    text = Text.from_markup(cell, end="")
    text.no_wrap = True
    return text
