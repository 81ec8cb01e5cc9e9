"""Styles looked up once per render pass instead of once per line.

Textual computes a widget's ``rich_style`` by walking the styles of every ancestor (~80 µs
here), and a component's (``get_component_styles``) by merging style sheets into a fresh
object and then doing that walk. A DataTable asks for both on every line it draws, and our
line views ask for the widget's: a tenth to a fifth of a table's redraw. Nothing in a render
pass changes a style (Textual itself clears its cache of component styles on every
``refresh``), so inside ``render_lines`` each is computed once and reused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from rich.style import Style
from textual.geometry import Region
from textual.strip import Strip

if TYPE_CHECKING:
    from textual.css.styles import RenderStyles
    from textual.widget import Widget

    _Base = Widget
else:
    _Base = object


class _ComponentInPass:
    """A component's styles with its ``rich_style`` computed once; anything else is read
    from the real styles object."""

    __slots__ = ("_styles", "rich_style")

    def __init__(self, styles: RenderStyles) -> None:
        self._styles = styles
        self.rich_style: Style = styles.rich_style

    def __getattr__(self, name: str) -> Any:
        return getattr(self._styles, name)


class PassStyles(_Base):
    """Mix in before the widget class: ``class T(PassStyles, DataTable)``."""

    _pass_components: dict[tuple[str, ...], _ComponentInPass] | None = None  # None: not in a pass
    _pass_own: Style | None = None

    def render_lines(self, crop: Region) -> list[Strip]:
        self._pass_components, self._pass_own = {}, None
        try:
            return super().render_lines(crop)
        finally:
            self._pass_components, self._pass_own = None, None

    @property
    def rich_style(self) -> Style:
        if self._pass_components is None:
            return super().rich_style
        if self._pass_own is None:
            self._pass_own = super().rich_style
        return self._pass_own

    def get_component_styles(self, *names: str) -> RenderStyles:
        cache = self._pass_components
        if cache is None:
            return super().get_component_styles(*names)
        styles = cache.get(names)
        if styles is None:
            styles = cache[names] = _ComponentInPass(super().get_component_styles(*names))
        # Read like the styles it wraps (its callers read ``rich_style``, the rest passes through).
        return cast("RenderStyles", styles)
