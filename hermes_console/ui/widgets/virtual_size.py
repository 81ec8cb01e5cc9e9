"""A scroll view's content grows or shrinks without a layout pass of the whole screen.

Textual's ``virtual_size`` is a layout reactive: every change re-arranges every widget on
the screen (16-19 ms at 160x45) just to resize one view's scrollbars. While a run streams,
the turns stream and the tool-call table change height on nearly every redraw, and a view
whose content is as wide as the view narrows when its vertical scrollbar appears. When
neither scrollbar appears or disappears (the view's regions stay as they are), the scrollbars
are updated in place instead.
"""

from __future__ import annotations

from textual.geometry import Size
from textual.scroll_view import ScrollView


def set_virtual_size(view: ScrollView, size: Size) -> None:
    """``view.virtual_size = size``, without a layout pass when no scrollbar comes or goes."""
    old = view.virtual_size
    if size == old:
        return
    if not _same_scrollbars(view, size):
        view.virtual_size = size  # a scrollbar comes or goes: the regions change, lay out
        return
    view.set_reactive(ScrollView.virtual_size, size)
    view._scroll_update(size)  # scrollbar lengths, and the scroll offsets clamped to the new size
    view.refresh()


def _same_scrollbars(view: ScrollView, size: Size) -> bool:
    """The view, laid out, already shows the scrollbars ``size`` asks for in its current box.

    Decided as Textual's ``Widget._refresh_scrollbars`` decides, both ways: so a view whose
    content width follows its own (a scrollbar appearing narrows it by two columns) is not
    laid out a second time for that.
    """
    if not view.is_mounted or not view.size or view._scrollbar_changes:
        return False  # not laid out yet, or Textual is settling a scrollbar flip-flop
    width, height = view.container_size
    if width <= 0 or height <= 0:
        return False
    styles = view.styles

    def shown(overflow: str, content: int, room: int) -> bool:
        return overflow == "scroll" or (overflow == "auto" and content > room)

    horizontal = shown(styles.overflow_x, size.width, width)
    vertical = shown(styles.overflow_y, size.height, height)
    # One scrollbar takes room from the other direction.
    if styles.overflow_x == "auto" and vertical and not horizontal:
        horizontal = size.width > width - styles.scrollbar_size_vertical
    if styles.overflow_y == "auto" and horizontal and not vertical:
        vertical = size.height > height - styles.scrollbar_size_horizontal
    return (horizontal, vertical) == (view.show_horizontal_scrollbar, view.show_vertical_scrollbar)
