"""DataTable that syncs rows by key and touches only the cells that changed."""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from itertools import zip_longest
from typing import Any, Protocol, TypeAlias

from rich.console import RenderableType
from rich.padding import Padding
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual._two_way_dict import TwoWayDict
from textual._types import SegmentLines
from textual.binding import Binding
from textual.geometry import Size
from textual.renderables.styled import Styled
from textual.widgets import DataTable
from textual.widgets._data_table import Row as TableRow
from textual.widgets.data_table import CellKey, ColumnKey, DuplicateKey, RowKey

from hermes_console.ui.widgets.column_sort import ColumnSort
from hermes_console.ui.widgets.pass_styles import PassStyles
from hermes_console.ui.widgets.virtual_size import set_virtual_size

Cell: TypeAlias = Text | str
LOOK_CACHE = 5_000  # rendered cells kept by look (a few screens at several cursor / hover states)
Row = tuple[Cell, ...]


class HostColumn(Protocol):
    """What an app attached to several hosts offers its panels (FleetRuntime does)."""

    host_width: int

    def host_of(self, key: str) -> str: ...


def host_column_of(app: object) -> HostColumn | None:
    """The app's host column source: None in a local console (and attached to one host)."""
    return getattr(app, "host_column", None)


def cell_look(cell: Text | str) -> Hashable:
    """Everything that decides how a one-line cell is drawn: the key of the cell caches, and
    what ``sync`` compares to tell a changed cell (a Text does not compare by value)."""
    if isinstance(cell, Text):
        return (cell.plain, cell.style, tuple(cell.spans), cell.justify, cell.overflow, cell.no_wrap, cell.end)
    return cell


def render_cell_line(
    app: Any, cell: RenderableType, width: int, padding: int, pre_style: Style, post_style: Style | None
) -> SegmentLines:
    """A cell in a one-line row, padded and styled as DataTable renders it."""
    options = app.console_options.update_dimensions(width, 1).update(no_wrap=True)
    styled = Styled(Padding(cell, (0, padding)), pre_style=pre_style, post_style=post_style)
    return app.console.render_lines(styled, options)


class KeyedTable(PassStyles, ColumnSort, DataTable):
    """Rows are identified by a stable key (group id, task id, ...).

    ``sync`` adds new rows, removes vanished ones and calls ``update_cell`` only
    for cells whose rendered value changed — never a full rebuild per tick. A row handed
    over as the same object as in the last ``sync`` is taken as unchanged without looking
    at its cells (panels that cache their rows pass them again).
    """

    COLUMNS: Sequence[tuple[str, str, int | None]] = ()  # (key, label, width)
    # Rows keyed by an id of the console's state: attached to several hosts, the table
    # gets a leading "host" column filled from the key (see host_column_of).
    HOSTED = False
    # DataTable's own enter is hidden from the footer; show it while a table has focus.
    BINDINGS = [Binding("enter", "select_cursor", "Open", show=True)]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self._shown: dict[str, tuple[object, ...]] = {}
        self._given: dict[str, Sequence[Cell]] = {}  # the row objects ``sync`` was last handed
        self.sort_column: str | None = None  # a header click sorts by it; again: reverse
        self.sort_reverse = False
        self.host_column: HostColumn | None = None
        self._cells_dirty = False
        self._look_cache: dict[Hashable, SegmentLines] = {}  # rendered cells by look (_render_cell)

    def on_mount(self) -> None:
        if self.HOSTED:
            self.host_column = host_column_of(self.app)
            if self.host_column is not None:
                self.COLUMNS = (("host", "host", self.host_column.host_width), *type(self).COLUMNS)
        for key, label, width in self.COLUMNS:
            self.add_column(label, key=key, width=width)

    # ------------------------------------------------------------------ sort (click a header)

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        event.stop()
        self.header_clicked(str(event.column_key.value))

    def _resort(self) -> None:
        if self.sort_column is None or not self.row_count:
            return
        selected = self.selected_key()
        self.sort(self.sort_column, key=sort_value, reverse=self.sort_reverse)
        if selected is not None and selected in self._shown:
            self.move_cursor(row=self.get_row_index(selected), animate=False)

    def sync(self, rows: Mapping[str, Sequence[Cell]]) -> bool:
        """Make the table show exactly ``rows`` (in insertion order for new keys).
        Returns True if anything changed."""
        changed = False
        selected = self.selected_key()  # the cursor follows its item, not its row number
        gone = [k for k in self._shown if k not in rows]
        if gone:  # in one pass: DataTable.remove_row re-indexes every row per call
            self.remove_rows(gone)
            for key in gone:  # a row cleared from the table behind our back is forgotten too
                self._shown.pop(key, None)
                self._given.pop(key, None)
            changed = True
        column_keys = [c[0] for c in self.COLUMNS]
        added: list[tuple[str, Sequence[Cell]]] = []
        given = self._given
        for key, cells in rows.items():
            if cells is given.get(key) and key in self._shown:
                continue  # the very row object of the last sync (a cached row): nothing changed
            given[key] = cells
            if self.host_column is not None:
                cells = (Text(self.host_column.host_of(key), style="bold"), *cells)
            rendered = tuple(cell_look(c) for c in cells)
            previous = self._shown.get(key)
            if previous is None:
                added.append((key, cells))
                changed = True
            elif previous != rendered:
                for column, cell, old, new in zip(column_keys, cells, previous, rendered):
                    if old != new:
                        self.set_cell(key, column, cell)
                changed = True
            self._shown[key] = rendered
        self.add_keyed_rows(added)
        self.flush_cells()
        if changed:
            self._resort()  # new rows land at the end: put them in their sorted place
        if changed and selected is not None and selected in self._shown:
            index = self.get_row_index(selected)
            if index != self.cursor_row:
                self.move_cursor(row=index, animate=False)
        return changed

    def add_keyed_rows(self, rows: Sequence[tuple[str, Sequence[Cell]]]) -> None:
        """Append many one-line rows at once. ``DataTable.add_row`` re-validates the cursor
        and wakes the idle pass per row, which made a flood's redraw cost ~1 ms per row."""
        if rows and not self.row_count:
            self.add_row(*rows[0][1], key=rows[0][0])  # the first row: DataTable highlights its cursor
            rows = rows[1:]
        if not rows:
            return
        columns = self.ordered_columns
        for key, cells in rows:
            row_key = RowKey(key)
            if row_key in self._row_locations:
                raise DuplicateKey(f"KeyedTable: row key {key!r} is already in the table")
            self._row_locations[row_key] = len(self.rows)
            self._data[row_key] = {column.key: cell for column, cell in zip_longest(columns, cells)}
            self.rows[row_key] = TableRow(row_key, 1)
            self._new_rows.add(row_key)
        self._require_update_dimensions = True
        self.cursor_coordinate = self.cursor_coordinate
        self._update_count += 1
        self.check_idle()

    def _render_cell(
        self,
        row_index: int,
        column_index: int,
        base_style: Style,
        width: int,
        cursor: bool = False,
        hover: bool = False,
    ) -> SegmentLines:
        """DataTable's cell, cached by how it looks instead of by the table's update count.

        Any change of any cell bumps the update count, which dropped every cached cell: a
        redraw whose only change was a ticking age column rendered every visible cell again
        (Rich's padding and line splitting per cell, the groups and sandboxes tables' main
        cost in a redraw). A cell is rendered without its place and the place (DataTable's
        row/column meta) is added to its segments, so the lines are DataTable's own."""
        row_key = self._row_locations.get_key(row_index) if row_index >= 0 else None
        column_key = self._column_locations.get_key(column_index) if column_index >= 0 else None
        row = self.rows.get(row_key) if row_key is not None else None
        value = self._data.get(row_key, {}).get(column_key) if row_key is not None and column_key else None
        if row is None or column_key is None or row.height != 1 or not isinstance(value, (str, Text)):
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        fixed = row_index < self.fixed_rows or column_index < self.fixed_columns
        key = (
            cell_look(value),
            width,
            base_style,
            cursor,
            hover,
            fixed,
            self._show_hover_cursor,
            self.show_cursor,
            self._pseudo_class_state,
            self.cursor_foreground_priority,
            self.cursor_background_priority,
        )
        lines = self._look_cache.get(key)
        if lines is None:
            component_style, post_style = self._get_styles_to_render_cell(
                False,
                False,
                fixed,
                hover,
                cursor,
                self.show_cursor,
                self._show_hover_cursor,
                self.cursor_foreground_priority == "css",
                self.cursor_background_priority == "css",
            )
            cell = self._get_row_renderables(row_index).cells[column_index]
            lines = render_cell_line(self.app, cell, width, self.cell_padding, base_style + component_style, post_style)
            if len(self._look_cache) >= LOOK_CACHE:
                self._look_cache.clear()
            self._look_cache[key] = lines
        meta = Style.from_meta({"row": row_index, "column": column_index})
        return [
            [Segment(text, style + meta if style else meta, control) for text, style, control in line] for line in lines
        ]

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._look_cache.clear()  # the theme's colours are in the cached cells

    def set_cell(self, key: str, column: str, value: Cell) -> None:
        """``update_cell`` without its per-call repaint: call ``flush_cells`` after a batch."""
        row_key, column_key = RowKey(key), ColumnKey(column)
        self._data[row_key][column_key] = value
        self._cells_dirty = True
        spec = self.columns.get(column_key)
        if spec is not None and spec.auto_width:  # re-measured on idle, as update_cell(update_width=True)
            self._updated_cells.add(CellKey(row_key, column_key))
            self._require_update_dimensions = True

    def _update_column_widths(self, updated_cells: set[CellKey]) -> None:
        # DataTable re-measures changed cells on idle, but its row and line caches are keyed
        # by the update count, not by column widths: a row drawn between the change and this
        # pass kept its old width (the serve snapshot's cropped "last error", ~1 render in 6).
        before = [column.content_width for column in self.columns.values()]
        super()._update_column_widths(updated_cells)
        if [column.content_width for column in self.columns.values()] != before:
            self._update_count += 1
            self.refresh()

    def flush_cells(self) -> None:
        if self._cells_dirty:
            self._cells_dirty = False
            self._update_count += 1  # drops the row render caches, as update_cell does
            self.refresh()

    def remove_rows(self, keys: Iterable[str]) -> None:
        """Remove many rows at once. ``DataTable.remove_row`` re-indexes every remaining row
        per call (O(rows) each), so trimming a flood's worth of rows one by one is quadratic."""
        gone = {RowKey(k) for k in keys if k in self.rows}
        if not gone:
            return
        locations = self._row_locations
        survivors = sorted(
            ((locations.get(key) or 0, key) for key in locations if key not in gone), key=lambda kv: kv[0]
        )
        self._row_locations = TwoWayDict({key: i for i, (_, key) in enumerate(survivors)})
        for key in gone:
            for column_key in self._data.get(key, {}):
                self._updated_cells.discard(CellKey(key, column_key))
            self._new_rows.discard(key)
            del self.rows[key]
            del self._data[key]
            self._shown.pop(str(key.value), None)
            self._given.pop(str(key.value), None)
        self._require_update_dimensions = True
        self.cursor_coordinate = self.cursor_coordinate
        self.hover_coordinate = self.hover_coordinate
        self._update_count += 1
        self.check_idle()
        # No layout pass here (DataTable.remove_row asks for one): the table's size comes from
        # the panel's CSS, and a changed row count reaches the scrollbars through the virtual
        # size _update_dimensions sets, which asks for layout only when it changes. A layout
        # pass re-arranges the whole screen (~19 ms at 160x45), once per redraw that dropped rows.
        self.refresh()

    def _update_dimensions(self, new_rows: Iterable[RowKey]) -> None:
        # Textual measures every cell of every new row to size auto-width columns; with
        # fixed widths and one-line rows that changes nothing and was a flood's main cost.
        fixed = all(not column.auto_width for column in self.columns.values())
        if fixed:
            # The size DataTable is about to set, set first without a layout pass of the screen
            # when no scrollbar comes or goes (virtual_size.py): its own assignment then
            # changes nothing. Rows arriving and leaving change the height on most redraws.
            header = self.header_height if self.show_header else 0
            width = sum(column.get_render_width(self) for column in self.columns.values())
            set_virtual_size(self, Size(width + self._row_label_column_width, self._total_row_height + header))
        super()._update_dimensions(() if fixed and not self._labelled_row_exists else new_rows)

    def set_column_width(self, key: str, width: int) -> None:
        """Narrow or widen one column (compact layouts); cells are cropped to it."""
        for column_key, column in self.columns.items():
            if column_key.value == key and column.width != width:
                column.width = width
                column.auto_width = False
                self._require_update_dimensions = True  # DataTable recomputes its virtual size
                self._clear_caches()
                self.refresh()

    def selected_key(self) -> str | None:
        """Key of the row under the cursor, if any."""
        if not self.row_count:
            return None
        try:
            row_key, _ = self.coordinate_to_cell_key(self.cursor_coordinate)
        except Exception:  # noqa: BLE001 - cursor can briefly point past a removed row
            return None
        return row_key.value

    def keys(self) -> list[str]:
        return list(self._shown)


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+)ms)?(?=$|[\s/])")


def _leading_seconds(text: str) -> float | None:
    """A cell that starts with a duration as ui.format writes it (850ms, 4.2s, 3m05s, 2h04m)."""
    m = _DURATION.match(text.strip())
    if not m or not any(m.groups()):
        return None
    h, mins, secs, ms = m.groups()
    return int(h or 0) * 3600 + int(mins or 0) * 60 + float(secs or 0) + int(ms or 0) / 1000


def sort_value(cell: object) -> tuple[object, ...]:
    """Natural order of a cell's text: durations and numbers compare as numbers
    ("9/10" < "10/10", "45s" < "2m05s")."""
    text = cell.plain if isinstance(cell, Text) else str(cell)
    seconds = _leading_seconds(text)
    if seconds is not None:
        return ((0, seconds), (1, text.lower()))
    parts: list[object] = []
    pos = 0
    for match in _NUMBER.finditer(text):
        parts += [(1, text[pos : match.start()].lower()), (0, float(match.group()))]
        pos = match.end()
    parts.append((1, text[pos:].lower()))
    return tuple(parts)
