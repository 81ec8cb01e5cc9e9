"""Agent turns stream: a tail that follows new lines until the operator scrolls up.

Toolong's tail semantics: scrolling up (keys, wheel, home, page up) stops
following and counts the lines that arrive meanwhile ("N new"); `end`/`f`
follows again. Reasoning is collapsed to one line unless toggled open.
"""

from __future__ import annotations

import textwrap
from collections import deque

from rich.text import Text
from textual import events
from textual.widgets import RichLog

from hermes_console.runtime.history import History
from hermes_console.runtime.state import ConsoleState
from hermes_console.runtime.views import StreamEntry
from hermes_console.ui.format import clock, head, visible
from hermes_console.ui.stream_filter import StreamFilter
from hermes_console.ui.widgets.keyed_table import host_column_of

MAX_LINES = 2_000
REBUILD_LINES = 400
ENTRY_CHARS = 400

KIND_STYLES = {
    "turn": ("▍", ""),
    "reasoning": ("∴", "dim italic"),
    "tool": ("⚙", "cyan"),
    "result": ("↳", "green"),
    "reward": ("★", "bold magenta"),
    "error": ("✖", "bold red"),
}


class TurnsStream(RichLog):
    def __init__(self, **kwargs: object) -> None:
        # One line per entry (a log tail); only expanded reasoning spans several lines.
        super().__init__(max_lines=MAX_LINES, wrap=False, markup=False, auto_scroll=False, **kwargs)
        self.following = True
        self.new_lines = 0
        self.show_reasoning = False
        self.filter = StreamFilter()
        self._last_seq = 0
        self._history: History | None = None  # readable ids (g0033-r2) once a state was seen

    # ------------------------------------------------------------------ feeding

    def update_from(self, state: ConsoleState, max_new: int = 200) -> None:
        self._history = state.history
        if self._last_seq == 0 and state.stream_seq:
            self.rebuild(state)  # first fill: a full page of history, not the flood cap
            return
        fresh = _newer_than(state.stream, self._last_seq)
        if not fresh:
            return
        # Lines the queue folded into counts never reach the state: numbered, not stored.
        arrived = fresh[-1].seq - self._last_seq
        self._last_seq = fresh[-1].seq
        fresh = fresh[-max_new:]
        skipped = arrived - len(fresh)
        if skipped > 0:
            # A flood: show the newest lines and say how many were not drawn.
            self._write(
                Text(
                    f"… {skipped} earlier lines not shown (flood); open a rollout for its transcript",
                    style="dim yellow",
                )
            )
        for entry in fresh:
            if self.filter.matches(entry.rollout_id, entry.group_id):
                for line in self.render_entry(entry):
                    self._write(line)
        if self.following:
            self.scroll_end(animate=False, immediate=False)
        self._update_title()

    def rebuild(self, state: ConsoleState) -> None:
        """Redraw from state after a filter/reasoning change (not per tick)."""
        self._history = state.history
        self.clear()
        matching = [e for e in state.stream if self.filter.matches(e.rollout_id, e.group_id)]
        for entry in matching[-REBUILD_LINES:]:
            for line in self.render_entry(entry):
                self.write(line, scroll_end=False)
        self._last_seq = state.stream_seq
        self.new_lines = 0
        if self.following:
            self.scroll_end(animate=False, immediate=False)
        self._update_title()

    def _write(self, line: Text) -> None:
        self.write(line, scroll_end=False)  # one scroll_end per batch, after layout
        if not self.following:
            self.new_lines += 1

    def _who(self, entry: StreamEntry) -> str:
        """The readable label of the entry's rollout (else group); the raw id when unknown."""
        h = self._history
        if entry.rollout_id:
            return h.label_of(entry.rollout_id) if h is not None else entry.rollout_id
        if entry.group_id:
            return h.group_label_of(entry.group_id) if h is not None else entry.group_id
        return "runtime"

    def render_entry(self, entry: StreamEntry) -> list[Text]:
        icon, style = KIND_STYLES.get(entry.kind, ("·", ""))
        line = Text(f"{clock(entry.ts)} ", style="dim")
        who = self._who(entry)
        hosts = host_column_of(self.app) if self.is_attached else None
        if hosts is not None:  # attached to several hosts: which one the line comes from
            raw = entry.rollout_id or entry.group_id or "runtime"
            line.append(f"{hosts.host_of(raw):<{hosts.host_width}} ", style="bold")
        line.append(f"{head(who, 12):<12} ", style="bold")
        line.append(f"{icon} ", style=style)
        if entry.kind != "reasoning":
            line.append(head(entry.text, ENTRY_CHARS), style=style)
            return [line]
        if not self.show_reasoning:
            line.append(f"reasoning ({len(entry.text)} chars) ", style="dim italic")
            line.append(head(entry.text, 50), style="dim")
            return [line]
        # Expanded: wrap under the text column so the id column stays readable.
        indent = len(line.plain)
        width = max(20, (self.scrollable_content_region.width or 100) - indent - 1)
        chunks = textwrap.wrap(" ".join(visible(entry.text).split())[:4000], width) or [""]
        lines = [line + Text(chunks[0], style=style)]
        lines += [Text(" " * indent) + Text(chunk, style=style) for chunk in chunks[1:]]
        return lines

    # ------------------------------------------------------------------ follow / unfollow

    def follow(self) -> None:
        self.following = True
        self.new_lines = 0
        self.scroll_end(animate=False, immediate=True)
        self._update_title()

    def unfollow(self) -> None:
        if self.following:
            self.following = False
            self._update_title()

    def action_scroll_up(self) -> None:
        self.unfollow()
        super().action_scroll_up()

    def action_page_up(self) -> None:
        self.unfollow()
        super().action_page_up()

    def action_scroll_home(self) -> None:
        self.unfollow()
        super().action_scroll_home()

    def action_scroll_end(self) -> None:
        self.follow()

    def _on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self.unfollow()
        super()._on_mouse_scroll_up(event)

    def _update_title(self) -> None:
        if self.following:
            state = "following"
        else:
            state = f"paused — {self.new_lines} new (f to follow)"
        self.border_title = f"Agent turns — {state}"
        flags: list[str] = ["reasoning shown" if self.show_reasoning else "reasoning collapsed (r)"]
        if self.filter:
            flags.append(f"filter: {self.filter.text}")
        self.border_subtitle = " · ".join(flags)


def _newer_than(entries: deque[StreamEntry], seq: int) -> list[StreamEntry]:
    out: list[StreamEntry] = []
    for entry in reversed(entries):
        if entry.seq <= seq:
            break
        out.append(entry)
    out.reverse()
    return out
