"""A table or stream looks its styles up once per render pass, and draws exactly the same.

The oracle for the look is Textual's own lookups: every screenshot scene is drawn once with
the per-pass styles and once with them switched off, and the two screens must be identical.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from rich.style import Style
from textual.app import App, ComposeResult
from textual.dom import DOMNode
from textual.geometry import Region

from hermes_console.ui.widgets import pass_styles
from hermes_console.ui.widgets.keyed_table import KeyedTable
from hermes_console_dev.screenshots import SCENES, build_app
from tests.helpers.ui import settle
from tests.ui.eventlog import FIXTURES


class _Table(KeyedTable):
    COLUMNS = (("name", "name", 10), ("state", "state", 8), ("age", "age", 6))


class _Host(App):
    def compose(self) -> ComposeResult:
        yield _Table()


def _counting_rich_style(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    walk = DOMNode.rich_style.fget
    assert walk is not None

    def counted(node: DOMNode) -> Style:
        calls[0] += 1
        return walk(node)

    monkeypatch.setattr(DOMNode, "rich_style", property(counted))
    return calls


async def test_a_table_redraw_walks_the_styles_once_per_style_not_once_per_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = _Host()
    async with app.run_test(size=(40, 24)) as pilot:
        table = app.query_one(_Table)
        table.sync({f"k{i:02d}": (f"item {i}", "running" if i % 3 else "done", f"{i}s") for i in range(40)})
        await settle(pilot)
        width, height = table.size
        calls = _counting_rich_style(monkeypatch)
        table._line_cache.clear()  # a redraw of every visible line, as after the rows changed
        table._row_render_cache.clear()
        table._styles_cache.clear()
        table.render_lines(Region(0, 0, width, height))
        # The widget's own style and one per component (header, even, odd, cursor...);
        # Textual's lookups took two or three per line (~70 for these 23 lines).
        assert 0 < calls[0] <= 8, calls[0]


def _off(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every lookup goes to Textual, as before: no pass cache is ever opened."""

    def plain(self: Any, crop: Region) -> Any:
        return super(pass_styles.PassStyles, self).render_lines(crop)

    monkeypatch.setattr(pass_styles.PassStyles, "render_lines", plain)


async def _screen(scene: str) -> str:
    app = build_app(scene, FIXTURES)
    async with app.run_test(size=SCENES[scene].size) as pilot:
        await SCENES[scene].run_before(pilot)
        return re.sub(r"terminal-\d+", "terminal", app.export_screenshot())


@pytest.mark.parametrize("scene", ["main", "main_compact", "errors", "rollouts_80x24", "sandbox", "serve"])
async def test_every_scene_draws_the_same_with_styles_looked_up_once_per_pass(
    monkeypatch: pytest.MonkeyPatch, scene: str
) -> None:
    cached = await _screen(scene)
    with monkeypatch.context() as patch:
        _off(patch)
        textual_lookups = await _screen(scene)
    assert cached == textual_lookups
