"""Agent turns stream: a tail that follows new lines until the operator scrolls up.

A Line-API view (Toolong-style) over ``ConsoleState.stream``: the widget keeps only an
index of which state entries it shows, one small record per screen line, and renders a
line's text when that line is on screen (``render_line``) — no per-line measuring on
append, no widget-side copy of the text. What it shows is a function of the state and
the view settings (filter, reasoning toggle, width) alone, whatever way the events were
batched: lines the runtime queue folded into a count leave a gap in the entries'
sequence numbers and are drawn as one "… N lines not shown" line at that place.

Toolong's tail semantics: scrolling up (keys, wheel, home, page up) stops following and
counts the lines that arrive meanwhile ("N new"); `end`/`f` follows again. Reasoning is
collapsed to one line unless toggled open.
"""

from __future__ import annotations

import textwrap
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable
from itertools import islice, takewhile
from typing import Any, NamedTuple

from rich.text import Text
from textual import events
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from hermes_console.runtime.history import History
from hermes_console.runtime.state import ConsoleState
from hermes_console.runtime.views import StreamEntry
from hermes_console.ui.format import clock, head, visible
from hermes_console.ui.stream_filter import StreamFilter
from hermes_console.ui.widgets.keyed_table import HostColumn, host_column_of
from hermes_console.ui.widgets.pass_styles import PassStyles
from hermes_console.ui.widgets.virtual_size import set_virtual_size

ENTRY_CHARS = 400
STRIP_CACHE = 1_000  # rendered lines kept (a few screens' worth)
TAIL_ENTRIES = 250  # at least this many newest entries are indexed after a full replacement

KIND_STYLES = {
    "turn": ("▍", ""),
    "reasoning": ("∴", "dim italic"),
    "tool": ("⚙", "cyan"),
    "result": ("↳", "green"),
    "reward": ("★", "bold magenta"),
    "error": ("✖", "bold red"),
}


class StreamLine(NamedTuple):
    """One screen line: the entry it belongs to and which part of it.

    part -1: the "… N lines not shown" line before the entry (``gap`` = N);
    part 0: the entry's line; part k > 0: continuation k of expanded reasoning.
    """

    entry: StreamEntry
    part: int = 0
    gap: int = 0
    chunk: str = ""


class TurnsStream(PassStyles, ScrollView, can_focus=True):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.following = True
        self.new_lines = 0
        self.show_reasoning = False
        self.filter = StreamFilter()
        self._view: list[StreamLine] = []  # the indexed lines: the newest ones (see _hidden)
        # Lines above ``_view`` not indexed yet: what the state's entries older than ``_first_seq``
        # take (counted, not built). A flood that replaced the state's whole ring buffer costs an
        # index of the newest screens only; scrolling up indexes older entries as they show.
        self._hidden = 0
        self._first_seq = 0  # seq of the oldest indexed entry while lines are hidden
        self._hidden_from = 0  # seq of the state's oldest entry when ``_hidden`` was counted
        self.indexed_entries = 0  # entries turned into lines so far (tests count them)
        self._last_seq = 0  # seq of the newest state entry looked at (shown or filtered out)
        self._state: ConsoleState | None = None  # the state the index was built from
        self._settings: tuple[object, ...] = ()  # filter, reasoning, wrap width the index was built with
        self._strips: dict[tuple[int, int], Strip] = {}
        self._history: History | None = None  # readable ids (g0033-r2) once a state was seen

    # ------------------------------------------------------------------ feeding

    def update_from(self, state: ConsoleState) -> None:
        """Bring the index up to ``state``: cost O(new entries), not O(shown lines)."""
        self._history = state.history
        if state is not self._state or self._current_settings() != self._settings:
            self.rebuild(state)
            return
        stream = state.stream
        if not stream or stream[-1].seq == self._last_seq:
            return
        fresh = _newer_than(stream, self._last_seq)
        tail_only = not self.show_reasoning and len(fresh) > self._window()
        if not (tail_only and self.following):  # a followed tail re-indexed anew has nothing to keep in place
            self._evict(stream[0])
        before = self.line_count
        if tail_only:
            self._index_tail(stream)  # most of the ring buffer is new: index the newest screens only
        else:
            # The entry before the first fresh one is still in the state unless all of it is new.
            previous = self._last_seq if len(fresh) < len(stream) else None
            self._append(fresh, previous)
        added = self.line_count - before
        self._last_seq = stream[-1].seq
        if not self.following:
            self.new_lines += added
        self._resized()
        if self.following:
            self._pin_end()
        self._update_title()

    def rebuild(self, state: ConsoleState) -> None:
        """Index every shown entry of ``state`` again (filter / reasoning / width change)."""
        self._history = state.history
        self._state = state
        self._settings = self._current_settings()
        self._view = []
        self._hidden = 0
        self._strips.clear()
        if self.show_reasoning:
            self._append(state.stream, None)  # expanded reasoning wraps: every entry's lines are built
        else:
            self._index_tail(state.stream)
        self._last_seq = state.stream[-1].seq if state.stream else 0
        self.new_lines = 0
        self._resized()
        if self.following:
            self._pin_end()
        self.refresh()
        self._update_title()

    def _current_settings(self) -> tuple[object, ...]:
        width = self._wrap_width() if self.show_reasoning else 0
        return (self.filter.text, self.show_reasoning, width)

    def _append(self, entries: Iterable[StreamEntry], previous: int | None) -> int:
        """Index ``entries`` (oldest first); ``previous`` is the seq of the state entry before them."""
        view, matches = self._view, self.filter.matches if self.filter else None
        before = len(view)
        plain = not self.show_reasoning  # one line per entry: no wrapping to work out
        for entry in entries:
            self.indexed_entries += 1
            gap = entry.seq - previous - 1 if previous is not None else 0
            previous = entry.seq
            if matches is not None and not matches(entry.rollout_id, entry.group_id):
                continue
            if plain:
                if gap > 0:
                    view.append(StreamLine(entry, -1, gap))
                view.append(StreamLine(entry))
            else:
                view.extend(self._lines_of(entry, gap))
        return len(view) - before

    def _window(self) -> int:
        """How many of the newest entries a full replacement indexes: a few screens."""
        return max(TAIL_ENTRIES, 4 * self.size.height)

    def _index_tail(self, stream: deque[StreamEntry]) -> None:
        """Index only the newest ``_window()`` entries of ``stream``; count the lines of the rest."""
        self._view = []
        self._strips.clear()
        start = max(0, len(stream) - self._window())
        tail = list(islice(reversed(stream), len(stream) - start))
        tail.reverse()
        self._append(tail, stream[start - 1].seq if start else None)
        self._first_seq = tail[0].seq if tail else 0
        self._hidden = self._count_lines(islice(stream, start)) if start else 0
        self._hidden_from = stream[0].seq if stream else 0

    def _count_lines(self, entries: Iterable[StreamEntry]) -> int:
        """The lines ``entries`` (oldest first, from the state's first entry on) take when collapsed:
        one per shown entry, plus a gap line where the sequence numbers jump. Nothing is built."""
        matches = self.filter.matches if self.filter else None
        previous: int | None = None
        n = 0
        for entry in entries:
            seq = entry.seq
            gap = previous is not None and seq - previous > 1
            previous = seq
            if matches is None or matches(entry.rollout_id, entry.group_id):
                n += 1 + gap
        return n

    def _materialize(self, index: int) -> None:
        """Index older entries until virtual line ``index`` is indexed (the operator scrolled up)."""
        state = self._state
        while index < self._hidden and state is not None:
            stream = state.stream
            pos = bisect_left(stream, self._first_seq, key=_seq)  # the state's entries before the view
            start = max(0, pos - self._window())
            chunk = list(islice(stream, start, pos))
            if not chunk:  # the state let them go since the last update: nothing older to show
                self._hidden = 0
                self._resized()
                break
            view, self._view = self._view, []
            self._append(chunk, stream[start - 1].seq if start else None)
            self._hidden -= len(self._view)
            self._view.extend(view)
            self._first_seq = chunk[0].seq
            if start == 0 and self._hidden:  # counted from an older state: the view is all there is
                self._hidden = 0
                self._resized()
            self._hidden = max(0, self._hidden)

    def _evict(self, first: StreamEntry) -> None:
        """Drop lines of entries the state's ring buffer let go; the view stays where it was."""
        if self._hidden and first.seq != self._hidden_from:
            before = self._hidden
            if first.seq >= self._first_seq:
                self._hidden = 0  # every hidden entry is gone
            else:
                stream = self._state.stream if self._state is not None else deque()
                self._hidden = self._count_lines(takewhile(lambda e: e.seq < self._first_seq, stream))
            self._hidden_from = first.seq
            if before != self._hidden and not self.following:
                self.scroll_to(y=max(0, self.scroll_y - (before - self._hidden)), animate=False, immediate=True)
            if self._hidden:
                return  # the indexed lines are all newer than what went
        view = self._view
        cut = 0
        while cut < len(view) and view[cut].entry.seq < first.seq:
            cut += 1
        if cut:
            del view[:cut]
            if not self.following:
                self.scroll_to(y=max(0, self.scroll_y - cut), animate=False, immediate=True)
        # The state's first entry has no predecessor any more: no gap line before it.
        if view and view[0].part == -1 and view[0].entry is first:
            del view[0]
        if cut:
            self._strips.clear()
            self.refresh()

    def _lines_of(self, entry: StreamEntry, gap: int) -> list[StreamLine]:
        lines = [StreamLine(entry, -1, gap)] if gap > 0 else []
        if entry.kind != "reasoning" or not self.show_reasoning:
            lines.append(StreamLine(entry))
            return lines
        # Expanded: wrap under the text column so the id column stays readable.
        width = self._wrap_width()
        chunks = textwrap.wrap(" ".join(visible(entry.text).split())[:4000], width) or [""]
        lines += [StreamLine(entry, k, chunk=chunk) for k, chunk in enumerate(chunks)]
        return lines

    def _wrap_width(self) -> int:
        return max(20, (self.scrollable_content_region.width or 100) - self._prefix_width() - 1)

    def _prefix_width(self) -> int:
        hosts = self._hosts()
        return 9 + (hosts.host_width + 1 if hosts is not None else 0) + 13 + 2

    def _pin_end(self) -> None:
        """Follow: the last line at the bottom now (a frame drawn at the old offset would index,
        and show, lines far above the tail), and again after the next layout (a resize)."""
        self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True)
        self.scroll_end(animate=False, immediate=False)

    def _resized(self) -> None:
        set_virtual_size(self, Size(self.scrollable_content_region.width, self.line_count))

    def on_resize(self, event: events.Resize) -> None:
        if self.show_reasoning and self._state is not None and self._current_settings() != self._settings:
            self.rebuild(self._state)  # expanded reasoning wraps to the new width
        else:
            self._resized()
            self._strips.clear()
        if self.following:  # a tail stays pinned to its last line when the panel grows or shrinks
            self.scroll_end(animate=False, immediate=False)

    # ------------------------------------------------------------------ rendering (visible lines only)

    @property
    def line_count(self) -> int:
        """Lines the stream takes (indexed or only counted so far)."""
        return self._hidden + len(self._view)

    @property
    def lines(self) -> list[Strip]:
        """Every line rendered (for tests and inspection; the screen renders only what shows)."""
        self._materialize(0)
        return [self._strip(i) for i in range(self.line_count)]

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.scrollable_content_region.width
        index = scroll_y + y
        style = self.rich_style
        if index >= self.line_count:
            return Strip.blank(width, style)
        strip = self._strip(index).crop_extend(scroll_x, scroll_x + width, style)
        return strip.apply_style(style)

    def _strip(self, index: int) -> Strip:
        """The rendered virtual line ``index`` (older lines are indexed on the way)."""
        if index < self._hidden:
            self._materialize(index)
        if not 0 <= index - self._hidden < len(self._view):  # the state moved on since the last update
            return Strip.blank(self.scrollable_content_region.width)
        line = self._view[index - self._hidden]
        key = (line.entry.seq, line.part)
        strip = self._strips.get(key)
        if strip is None:
            if len(self._strips) >= STRIP_CACHE:
                self._strips.clear()
            text = self.render_stream_line(line)
            strip = Strip(list(text.render(self.app.console)))
            self._strips[key] = strip
        return strip

    def render_stream_line(self, line: StreamLine) -> Text:
        entry = line.entry
        if line.part == -1:
            return Text(
                f"… {line.gap} lines not shown (flood); open a rollout for its transcript", style="dim yellow", end=""
            )
        icon, style = KIND_STYLES.get(entry.kind, ("·", ""))
        if line.part > 0:
            return Text(" " * self._prefix_width() + line.chunk, style=style, end="")
        text = Text(f"{clock(entry.ts)} ", style="dim", end="")
        hosts = self._hosts()
        if hosts is not None:  # attached to several hosts: which one the line comes from
            raw = entry.rollout_id or entry.group_id or "runtime"
            text.append(f"{hosts.host_of(raw):<{hosts.host_width}} ", style="bold")
        text.append(f"{head(self._who(entry), 12):<12} ", style="bold")
        text.append(f"{icon} ", style=style)
        if entry.kind != "reasoning":
            text.append(head(entry.text, ENTRY_CHARS), style=style)
        elif not self.show_reasoning:
            text.append(f"reasoning ({len(entry.text)} chars) ", style="dim italic")
            text.append(head(entry.text, 50), style="dim")
        else:
            text.append(line.chunk, style=style)
        return text

    def _hosts(self) -> HostColumn | None:
        return host_column_of(self.app) if self.is_attached else None

    def _who(self, entry: StreamEntry) -> str:
        """The readable label of the entry's rollout (else group); the raw id when unknown."""
        h = self._history
        if entry.rollout_id:
            return h.label_of(entry.rollout_id) if h is not None else entry.rollout_id
        if entry.group_id:
            return h.group_label_of(entry.group_id) if h is not None else entry.group_id
        return "runtime"

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


def _seq(entry: StreamEntry) -> int:
    return entry.seq


def _newer_than(entries: deque[StreamEntry], seq: int) -> list[StreamEntry]:
    """Entries with a sequence number above ``seq``, oldest first, scanning from the newest."""
    out: list[StreamEntry] = []
    for entry in reversed(entries):
        if entry.seq <= seq:
            break
        out.append(entry)
    out.reverse()
    return out
