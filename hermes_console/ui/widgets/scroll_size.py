"""Growing a scroll view without re-arranging the whole screen.

``Widget.virtual_size`` is a reactive that asks for a layout pass on every change: the
screen re-arranges every widget (~19 ms at 160x45), and a stream or table that gains lines
on every redraw paid that every time. What a new virtual size changes in a scroll view
without children is its scrollbars; :func:`set_content_size` updates them the way Textual
does after a layout, and a layout pass still happens when a scrollbar appears or goes
(``show_vertical_scrollbar`` asks for one itself).
"""

from __future__ import annotations

from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.widget import Widget


def set_content_size(view: ScrollView, size: Size) -> None:
    if view.virtual_size == size:
        return
    if not view.is_mounted or view.size.area == 0:
        view.virtual_size = size  # not laid out yet: the first layout sizes everything anyway
        return
    view.set_reactive(Widget.virtual_size, size)
    view._scroll_update(size)  # scrollbars: visibility (a layout if it changes), thumb, offsets
    view.refresh()
