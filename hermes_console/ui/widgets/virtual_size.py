"""A scroll view's content grows or shrinks without a layout pass of the whole screen.

Textual's ``virtual_size`` is a layout reactive: every change re-arranges every widget on
the screen (16-19 ms at 160x45) just to resize one view's scrollbars. While a run streams,
the turns stream and the tool-call table change height on nearly every redraw. When neither
scrollbar appears or disappears (the view's regions stay as they are), the scrollbars are
updated in place instead.
"""

from __future__ import annotations

from textual.geometry import Size
from textual.scroll_view import ScrollView


def set_virtual_size(view: ScrollView, size: Size) -> None:
    """``view.virtual_size = size``, without a layout pass when no scrollbar comes or goes."""
    old = view.virtual_size
    if size == old:
        return
    if not _same_scrollbars(view, old, size):
        view.virtual_size = size  # a scrollbar comes or goes: the regions change, lay out
        return
    view.set_reactive(ScrollView.virtual_size, size)
    view._scroll_update(size)  # scrollbar lengths, and the scroll offsets clamped to the new size
    view.refresh()


def _same_scrollbars(view: ScrollView, old: Size, new: Size) -> bool:
    """Both sizes show the same scrollbars in the view's current box (known once laid out)."""
    if not view.is_mounted or not view.size or old.width != new.width:
        return False
    height = view.container_size.height
    if view.show_horizontal_scrollbar:
        height -= view.scrollbar_size_horizontal
    if height <= 0:
        return False
    return (old.height > height) == (new.height > height)
