"""Sorting by a column, shared by the DataTable-based and the Line-API tables: which column
and direction, the ▲/▼ in the header, and what `s` / `S` do. Each table reorders its own rows
in ``_resort``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text


class ColumnSort:
    COLUMNS: Sequence[tuple[str, str, Any]] = ()  # (key, label, width)
    columns: Any  # the table's columns (a mapping): each has .key and .label
    sort_column: str | None = None  # a header click sorts by it; again: reverse
    sort_reverse = False

    def sort_by(self, column: str | None, reverse: bool = False) -> None:
        """Sort by ``column`` (None: insertion order again); the header shows ▲/▼."""
        self.sort_column, self.sort_reverse = column, reverse
        for key, label, _ in self.COLUMNS:
            arrow = (" ▼" if reverse else " ▲") if key == column else ""
            for col in self.columns.values():
                if col.key == key:
                    col.label = Text(label + arrow)
        self._resort()

    def header_clicked(self, column: str) -> None:
        """A header click: sort by it, or reverse when it is the sorted column already."""
        self.sort_by(column, not self.sort_reverse if column == self.sort_column else False)

    def sort_next(self) -> None:
        """`s`: sort by the next column (ascending), after the last one back to the first."""
        keys = [key for key, _, _ in self.COLUMNS]
        if not keys:
            return
        index = keys.index(self.sort_column) + 1 if self.sort_column in keys else 0
        self.sort_by(keys[index % len(keys)])

    def sort_reversed(self) -> None:
        """`S`: reverse the order (sorting by the first column if none was chosen)."""
        column = self.sort_column or next((key for key, _, _ in self.COLUMNS), None)
        self.sort_by(column, not self.sort_reverse if self.sort_column else True)

    def _resort(self) -> None:
        raise NotImplementedError
