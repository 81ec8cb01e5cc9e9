"""DataTable that syncs rows by key and touches only the cells that changed."""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from rich.text import Text
from textual.widgets import DataTable

Cell = Text | str
Row = Tuple[Cell, ...]


def _cell_key(cell: Cell) -> object:
    # Text is not hashable/comparable by value in a cheap way; plain + spans is.
    if isinstance(cell, Text):
        return (cell.plain, cell.style, tuple(cell.spans))
    return cell


class KeyedTable(DataTable):
    """Rows are identified by a stable key (group id, task id, ...).

    ``sync`` adds new rows, removes vanished ones and calls ``update_cell`` only
    for cells whose rendered value changed — never a full rebuild per tick.
    """

    COLUMNS: Sequence[Tuple[str, str, Optional[int]]] = ()  # (key, label, width)

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self._shown: Dict[str, Tuple[object, ...]] = {}

    def on_mount(self) -> None:
        for key, label, width in self.COLUMNS:
            self.add_column(label, key=key, width=width)

    def sync(self, rows: Mapping[str, Sequence[Cell]]) -> bool:
        """Make the table show exactly ``rows`` (in insertion order for new keys).
        Returns True if anything changed."""
        changed = False
        selected = self.selected_key()  # the cursor follows its item, not its row number
        for key in [k for k in self._shown if k not in rows]:
            self.remove_row(key)
            del self._shown[key]
            changed = True
        column_keys = [c[0] for c in self.COLUMNS]
        for key, cells in rows.items():
            rendered = tuple(_cell_key(c) for c in cells)
            previous = self._shown.get(key)
            if previous is None:
                self.add_row(*cells, key=key)
                changed = True
            elif previous != rendered:
                for column, cell, old, new in zip(column_keys, cells, previous, rendered):
                    if old != new:
                        self.update_cell(key, column, cell)
                changed = True
            self._shown[key] = rendered
        if changed and selected is not None and selected in self._shown:
            index = self.get_row_index(selected)
            if index != self.cursor_row:
                self.move_cursor(row=index, animate=False)
        return changed

    def set_column_width(self, key: str, width: int) -> None:
        """Narrow or widen one column (compact layouts); cells are cropped to it."""
        for column_key, column in self.columns.items():
            if column_key.value == key and column.width != width:
                column.width = width
                column.auto_width = False
                self._require_update_dimensions = True  # DataTable recomputes its virtual size
                self._clear_caches()
                self.refresh()

    def selected_key(self) -> Optional[str]:
        """Key of the row under the cursor, if any."""
        if not self.row_count:
            return None
        try:
            row_key, _ = self.coordinate_to_cell_key(self.cursor_coordinate)
        except Exception:  # noqa: BLE001 - cursor can briefly point past a removed row
            return None
        return row_key.value

    def keys(self) -> List[str]:
        return list(self._shown)
