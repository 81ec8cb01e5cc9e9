"""The footer is rebuilt once per burst of binding changes, and only when its keys change.

Textual's Footer rebuilds (one widget mounted per key, then a layout pass of the screen) on
every bindings signal. At the console's start that was five rebuilds while the first groups
arrived; moving focus between panels rebuilt it each time although the keys stayed the same.
"""

from __future__ import annotations

from typing import Any

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import Footer as TextualFooter
from textual.widgets import Input
from textual.widgets._footer import FooterKey

from hermes_console.ui.config import ConsoleConfig
from hermes_console.ui.widgets.footer import Footer
from hermes_console.ui.widgets.groups_table import GroupsTable
from hermes_console_dev.fake_runtime import FakeRuntime
from tests.ui.helpers import make_app, settle


def _count_rebuilds(footer: Any) -> list[int]:
    """Count every recompose of ``footer`` (the rebuild Textual's Footer does on each signal)."""
    calls = [0]
    original = footer.recompose

    async def counted() -> None:
        calls[0] += 1
        await original()

    footer.recompose = counted
    return calls


class Plain(Input):
    pass


class WithExtraKey(Input):
    BINDINGS = [Binding("ctrl+y", "noop", "Extra key")]

    def action_noop(self) -> None:
        pass


class FooterApp(App[None]):
    BINDINGS = [Binding("ctrl+t", "toggle", "Toggle"), Binding("ctrl+q", "quit", "Quit")]

    def __init__(self) -> None:
        super().__init__()
        self.toggle_enabled = True

    def compose(self) -> ComposeResult:
        yield Plain(id="a")
        yield Plain(id="b")
        yield WithExtraKey(id="c")
        yield Footer()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return None if action == "toggle" and not self.toggle_enabled else True

    def action_toggle(self) -> None:
        pass


def _labels(app: App[Any]) -> list[str]:
    return [str(key.description) for key in app.screen.query("FooterKey")]


async def test_a_burst_of_binding_signals_rebuilds_the_footer_once() -> None:
    app = FooterApp()
    async with app.run_test(size=(100, 10)) as pilot:
        await pilot.pause()
        footer = app.query_one(Footer)
        rebuilds = _count_rebuilds(footer)
        app.toggle_enabled = False  # what the footer shows changes (the key greys out)
        for _ in range(5):
            app.screen.refresh_bindings()
        await pilot.pause()
        await pilot.pause()
        assert rebuilds[0] == 1
        toggle = next(key for key in app.screen.query("FooterKey") if key.action == "toggle")
        assert toggle.has_class("-disabled")  # the one rebuild read the bindings as they were then


async def test_focus_moving_between_widgets_with_the_same_keys_does_not_rebuild_it() -> None:
    app = FooterApp()
    async with app.run_test(size=(100, 10)) as pilot:
        app.query_one("#a").focus()
        await pilot.pause()
        footer = app.query_one(Footer)
        rebuilds = _count_rebuilds(footer)
        app.query_one("#b").focus()
        await pilot.pause()
        await pilot.pause()
        assert rebuilds[0] == 0
        assert "Extra key" not in _labels(app)
        app.query_one("#c").focus()  # a widget with a key of its own: the footer shows it
        await pilot.pause()
        await pilot.pause()
        assert rebuilds[0] == 1 and "Extra key" in _labels(app)
        app.query_one("#a").focus()
        await pilot.pause()
        await pilot.pause()
        assert rebuilds[0] == 2 and "Extra key" not in _labels(app)


async def test_the_console_builds_its_footer_once_at_start_with_focus_on_the_groups() -> None:
    app = make_app(FakeRuntime([]), config=ConsoleConfig(tick_hz=20.0, ui_cpu_share=0.0))
    built: list[int] = []
    original = TextualFooter.compose  # whichever footer the screens use composes through it

    def counted(self: TextualFooter) -> ComposeResult:
        if self._bindings_ready:
            built.append(1)
        yield from original(self)

    TextualFooter.compose = counted  # type: ignore[method-assign]
    try:
        async with app.run_test(size=(160, 45)) as pilot:
            await settle(pilot)
            assert isinstance(app.screen.focused, GroupsTable)
            assert len(built) == 1, f"the footer was built {len(built)} times at start"
            shown = _labels(app)
            assert shown and len(shown) == len(set(shown)), shown  # the keys, each once
    finally:
        TextualFooter.compose = original  # type: ignore[method-assign]


async def test_a_rebuild_queued_when_its_screen_goes_is_dropped() -> None:
    from textual.screen import ModalScreen

    class Modal(ModalScreen[None]):
        def compose(self) -> ComposeResult:
            yield Plain(id="m")
            yield Footer()

    app = FooterApp()
    async with app.run_test(size=(100, 10)) as pilot:
        for _ in range(3):
            await app.push_screen(Modal())  # its focus and bindings queue a footer rebuild...
            app.pop_screen()  # ...whose screen is gone before it runs
            await pilot.pause()
        await pilot.pause()
        assert not isinstance(app.screen, Modal) and app.is_running


class StockFooterApp(FooterApp):
    def compose(self) -> ComposeResult:
        yield Plain(id="a")
        yield Plain(id="b")
        yield WithExtraKey(id="c")
        yield TextualFooter()


async def _keys_after_rebuilds(app: FooterApp) -> list[tuple[str, tuple[str, ...], str, int]]:
    async with app.run_test(size=(100, 10)) as pilot:
        for focus in ("#a", "#c", "#a"):  # two rebuilds: a key comes and goes
            app.query_one(focus).focus()
            await pilot.pause()
            await pilot.pause()
        return [
            (key.key, tuple(sorted(key.classes)), key.render().plain, key.region.width)
            for key in app.screen.query(FooterKey)
        ]


async def test_a_rebuild_restyles_no_key_and_every_key_looks_as_textuals(monkeypatch) -> None:
    """Textual's key starts compact and is then bound to the footer's setting: each key of
    each rebuild was restyled twice after mounting. Ours are built with the setting in place."""
    restyled: list[tuple[str, ...]] = []
    original = FooterKey.update_node_styles

    def counted(self: FooterKey, animate: bool = True) -> None:
        restyled.append(tuple(sorted(self.classes)))
        original(self, animate)

    monkeypatch.setattr(FooterKey, "update_node_styles", counted)
    ours = await _keys_after_rebuilds(FooterApp())
    ours_restyled, restyled[:] = list(restyled), []
    stock = await _keys_after_rebuilds(StockFooterApp())
    assert ours == stock  # the oracle: Textual's own footer, key by key (classes, text, width)
    assert len(restyled) >= 2 * len(stock)  # Textual's: at least twice per key
    # Ours: only the palette key, which Textual does not bind to the footer's setting.
    assert all("-command-palette" in classes for classes in ours_restyled), ours_restyled
