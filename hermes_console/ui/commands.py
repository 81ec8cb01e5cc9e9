"""Command palette provider: every console action, with the same text as the help screen."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

from textual.app import App
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.widget import Widget

from hermes_console.ui.bindings import CONTROLS, ControlSpec, scopes_of


class ConsoleCommands(Provider):
    def _available(self) -> Iterator[tuple[str, ControlSpec, App[Any] | Widget]]:
        screen = self.screen
        screen_scopes = scopes_of(screen)
        seen: set[str] = set()
        for spec in CONTROLS:
            if spec.action == "command_palette" or spec.id in seen:
                continue
            target: App[Any] | Widget | None = None  # both can run an action (a screen is a widget)
            if spec.scope == "app":
                target = self.app
            elif spec.scope in screen_scopes:
                target = screen
            if target is None:
                continue
            seen.add(spec.id)
            yield f"{spec.label}: {spec.description}", spec, target

    async def discover(self) -> Hits:
        for title, spec, target in self._available():
            yield DiscoveryHit(title, partial(target.run_action, spec.action), help=f"binding id: {spec.id}")

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, spec, target in self._available():
            score = matcher.match(title)
            if score > 0:
                yield Hit(
                    score,
                    matcher.highlight(title),
                    partial(target.run_action, spec.action),
                    help=f"binding id: {spec.id}",
                )
