"""Textual's Footer, rebuilt only when what it shows changes, once per burst of changes.

Textual's Footer rebuilds itself (removes and mounts one widget per key, then a layout pass
of the screen: 40-55 ms of the UI thread at 160x45) on every "bindings changed" signal:
each focus change, the app gaining focus, a new keymap. A screen's first moments send
several in a row (auto focus, app focus) while the first groups arrive, and moving between
panels sends one per move although the keys shown rarely differ. Here a signal that arrives
while a rebuild is queued joins it, and the rebuild is skipped when the keys it would show
are the ones shown (same key, label, action, enabled state, tooltip and group, in order).

Each key bound to the footer's compact setting is also built with it in place. Textual's
key starts compact and is then bound to the footer's (not compact) setting, so every key of
every rebuild gained and lost its "-compact" class after mounting: two restyles per key.
"""

from __future__ import annotations

from collections.abc import Hashable

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer as TextualFooter
from textual.widgets._footer import FooterKey


class Footer(TextualFooter):
    _rebuild_queued = False
    _shown: Hashable = None  # what the last compose showed (None: nothing yet)
    rebuilds = 0  # compositions with keys (for tests and benchmarks)

    def compose(self) -> ComposeResult:
        if self._bindings_ready:  # textual 8.2: compose shows nothing until bindings are readable
            self._shown = self._keys_shown()
            self.rebuilds += 1
        compact = self.compact
        for widget in super().compose():
            # A key bound to the footer's setting gets it before mounting, so its first watch
            # has no class to change. (The palette key is not bound: it keeps its own.)
            if isinstance(widget, FooterKey) and "compact" in (widget._reactive_connect or {}):
                widget.set_reactive(FooterKey.compact, compact)
                widget.set_class(compact, "-compact", update=False)
            yield widget

    def bindings_changed(self, screen: Screen) -> None:
        # Textual's own handler, queueing at most one rebuild.
        self._bindings_ready = True
        if not screen.app.app_focus or not self.is_attached or screen is not self.screen:
            return
        if not self._rebuild_queued:
            self._rebuild_queued = True
            self.call_after_refresh(self._rebuild)

    async def _rebuild(self) -> None:
        self._rebuild_queued = False  # a change from here on needs a rebuild of its own
        if not self.is_attached or self._pruning:  # its screen went meanwhile (a popped modal)
            return
        if self._shown is not None and self._keys_shown() == self._shown:
            return
        await self.recompose()

    def _keys_shown(self) -> Hashable:
        """Everything compose reads from the active bindings, in its order."""
        keys = []
        for _node, binding, enabled, tooltip in self.screen.active_bindings.values():
            if binding.show:
                group = binding.group
                keys.append(
                    (
                        binding.key,
                        self.app.get_key_display(binding),
                        binding.description,
                        binding.action,
                        enabled,
                        tooltip,
                        None if group is None else (group.description, group.compact),
                    )
                )
        palette = self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE
        return (tuple(keys), palette, self.app.COMMAND_PALETTE_BINDING if palette else None)
