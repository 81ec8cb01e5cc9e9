"""set_content_size: a scroll view that gains lines repaints itself and its scrollbar, and
re-arranges the screen only when its scrollbar appears (or goes)."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.geometry import Size
from textual.screen import Screen
from textual.scroll_view import ScrollView
from textual.strip import Strip

from hermes_console.ui.widgets.scroll_size import set_content_size


class _Lines(ScrollView):
    DEFAULT_CSS = "_Lines { height: 10; }"
    count = 0

    def grow(self, n: int) -> None:
        self.count = n
        set_content_size(self, Size(20, n))

    def render_line(self, y: int) -> Strip:
        return Strip.blank(self.size.width)


class _Host(App[None]):
    def compose(self) -> ComposeResult:
        yield _Lines()


async def test_growing_lines_lay_out_only_when_the_scrollbar_appears() -> None:
    app = _Host()
    async with app.run_test(size=(40, 20)) as pilot:
        view = app.query_one(_Lines)
        view.grow(3)
        await pilot.pause()
        layouts = 0
        real = Screen._refresh_layout

        def counted(self: Screen, *args: object, **kwargs: object) -> None:
            nonlocal layouts
            layouts += 1
            real(self, *args, **kwargs)

        Screen._refresh_layout = counted  # type: ignore[method-assign]
        try:
            view.grow(6)  # still fits: nothing to re-arrange
            await pilot.pause()
            assert layouts == 0 and not view.show_vertical_scrollbar
            view.grow(30)  # overflows: the scrollbar takes a column, the screen re-arranges
            await pilot.pause()
            assert layouts >= 1 and view.show_vertical_scrollbar
            layouts = 0
            for n in range(31, 60):  # grows on every redraw, as a live stream does
                view.grow(n)
                await pilot.pause()
            assert layouts == 0
            assert view.virtual_size.height == 59 and view.max_scroll_y == 59 - view.scrollable_content_region.height
            assert view.vertical_scrollbar.window_virtual_size == 59  # the thumb follows
            view.scroll_end(animate=False, immediate=True)
            await pilot.pause()
            assert view.scroll_y == view.max_scroll_y
            view.grow(2)  # back under a screenful: the scrollbar goes, and the offset with it
            await pilot.pause()
            assert not view.show_vertical_scrollbar and view.scroll_y == 0
        finally:
            Screen._refresh_layout = real  # type: ignore[method-assign]
