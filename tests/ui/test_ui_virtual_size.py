"""A view's content height changes without a layout pass of the screen unless a scrollbar
comes or goes; the scrollbar, the scroll range and the offset still follow at once."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from hermes_console.ui.widgets.virtual_size import set_virtual_size
from tests.helpers.ui import layout_passes


class _Lines(ScrollView, can_focus=False):  # no focus restyling its scrollbar mid-count
    def render_line(self, y: int) -> Strip:
        return Strip.blank(self.size.width)


class _Host(App[None]):
    CSS = "_Lines { height: 10; }"

    def compose(self) -> ComposeResult:
        yield _Lines()


async def test_growing_past_the_panel_lays_out_once_then_never_while_it_overflows() -> None:
    app = _Host()
    async with app.run_test(size=(40, 20)) as pilot:
        view = app.query_one(_Lines)
        width = view.scrollable_content_region.width
        set_virtual_size(view, Size(width, 5))
        await pilot.pause()
        assert not view.show_vertical_scrollbar
        with layout_passes() as layouts:
            set_virtual_size(view, Size(width, 30))  # the scrollbar appears: a real layout
            await pilot.pause()
            assert layouts[0] >= 1 and view.show_vertical_scrollbar
            width = view.scrollable_content_region.width  # the scrollbar took a column
            set_virtual_size(view, Size(width, 30))
            await pilot.pause()
            layouts[0] = 0
            for height in (40, 80, 200):
                set_virtual_size(view, Size(width, height))
                await pilot.pause()
                assert view.virtual_size.height == height
                assert view.vertical_scrollbar.window_virtual_size == height
                assert view.max_scroll_y == height - view.scrollable_content_region.height
            assert layouts[0] == 0
            view.scroll_end(animate=False, immediate=True)
            await pilot.pause()
            assert view.scroll_y == 200 - view.scrollable_content_region.height


async def test_shrinking_clamps_the_offset_and_a_scrollbar_going_away_lays_out() -> None:
    app = _Host()
    async with app.run_test(size=(40, 20)) as pilot:
        view = app.query_one(_Lines)
        set_virtual_size(view, Size(view.scrollable_content_region.width, 100))
        await pilot.pause()
        width = view.scrollable_content_region.width  # the scrollbar took a column
        set_virtual_size(view, Size(width, 100))
        await pilot.pause()
        view.scroll_end(animate=False, immediate=True)
        await pilot.pause()
        with layout_passes() as layouts:
            set_virtual_size(view, Size(width, 20))  # still taller than the panel
            await pilot.pause()
            assert layouts[0] == 0
            assert view.scroll_y == view.max_scroll_y == 20 - view.scrollable_content_region.height
            set_virtual_size(view, Size(width, 3))  # fits: the scrollbar goes, the regions change
            await pilot.pause()
            assert layouts[0] >= 1
            assert not view.show_vertical_scrollbar and view.scroll_y == 0


async def test_a_width_that_brings_a_scrollbar_is_laid_out() -> None:
    app = _Host()
    async with app.run_test(size=(40, 20)) as pilot:
        view = app.query_one(_Lines)
        set_virtual_size(view, Size(30, 100))
        await pilot.pause()
        with layout_passes() as layouts:
            set_virtual_size(view, Size(80, 100))  # wider than the panel: a horizontal scrollbar
            await pilot.pause()
            assert layouts[0] >= 1 and view.show_horizontal_scrollbar


class _Twins(App[None]):
    CSS = "_Lines { height: 10; } .cropped { overflow-x: hidden; }"

    def compose(self) -> ComposeResult:
        yield _Lines(id="ours")
        yield _Lines(id="twin")


def _figures(view: ScrollView) -> tuple:
    """What a layout decides for a view: its scrollbars, their windows, the scroll range."""
    vertical = view.vertical_scrollbar if view.show_vertical_scrollbar else None
    horizontal = view.horizontal_scrollbar if view.show_horizontal_scrollbar else None
    return (
        view.virtual_size,
        view.show_horizontal_scrollbar,
        view.show_vertical_scrollbar,
        view.max_scroll_x,
        view.max_scroll_y,
        view.scrollable_content_region.size,
        vertical and (vertical.window_virtual_size, vertical.window_size),
        horizontal and (horizontal.window_virtual_size, horizontal.window_size),
    )


async def test_content_narrowed_by_its_own_scrollbar_is_not_laid_out_again() -> None:
    """A view as wide as its content region, cropped sideways (the turns stream): its scrollbar
    appears (one layout), then its content follows the narrower region without a second one."""
    app = _Twins()
    async with app.run_test(size=(40, 30)) as pilot:
        ours = app.query_one("#ours", _Lines)
        ours.add_class("cropped")
        await pilot.pause()
        set_virtual_size(ours, Size(ours.scrollable_content_region.width, 5))
        await pilot.pause()
        set_virtual_size(ours, Size(ours.scrollable_content_region.width, 30))  # the scrollbar appears
        await pilot.pause()
        await pilot.pause()  # the scrollbar's own second pass
        narrowed = ours.scrollable_content_region.width
        assert ours.show_vertical_scrollbar and narrowed < ours.virtual_size.width
        with layout_passes() as layouts:
            set_virtual_size(ours, Size(narrowed, 31))
            await pilot.pause()
            assert layouts[0] == 0


async def test_every_size_ends_as_textuals_own_layout_would_leave_it() -> None:
    """The oracle is a twin view sized the plain way (a layout each time): after every step of
    a random walk of widths and heights, both show the same scrollbars, windows and ranges."""
    import random

    rng = random.Random(7)
    app = _Twins()
    async with app.run_test(size=(40, 30)) as pilot:
        ours, twin = app.query_one("#ours", _Lines), app.query_one("#twin", _Lines)
        in_place = 0
        for step in range(60):
            if step == 30:  # the second half cropped sideways, as the turns stream is
                ours.add_class("cropped")
                twin.add_class("cropped")
                await pilot.pause()
            size = Size(rng.choice([10, 37, 38, 39, 40, 41, 60]), rng.choice([1, 8, 9, 10, 11, 40]))
            with layout_passes() as layouts:
                set_virtual_size(ours, size)
                await pilot.pause()
                in_place += layouts[0] == 0
            twin.virtual_size = size
            await pilot.pause()
            await pilot.pause()
            assert _figures(ours) == _figures(twin), size
        assert in_place > 5  # the walk did take the in-place path
