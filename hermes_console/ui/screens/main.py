"""The main console: status bar and the live panels.

Wide terminals show every panel in rows; small ones (e.g. 80×24) show one
panel at a time under a tab strip, and `tab` moves between them. Two panels
appear only when they have something to say: Servers (several inference
servers, or one that is down) and Trainer (serve mode).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, cast

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.events import Resize, ScreenResume
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import DataTable, Tab, Tabs

from hermes_console.runtime.state import ConsoleState
from hermes_console.ui.bindings import bindings_for
from hermes_console.ui.screens.filter_modal import FilterModal
from hermes_console.ui.stream_filter import StreamFilter
from hermes_console.ui.widgets.footer import Footer
from hermes_console.ui.widgets.groups_table import GroupsTable
from hermes_console.ui.widgets.keyed_table import KeyedTable
from hermes_console.ui.widgets.line_table import LineTable
from hermes_console.ui.widgets.rewards_panel import RewardsPanel
from hermes_console.ui.widgets.sandboxes_table import SandboxesTable
from hermes_console.ui.widgets.servers_table import ServersTable, last_error
from hermes_console.ui.widgets.status_bar import StatusBar
from hermes_console.ui.widgets.tool_calls_table import ToolCallsTable
from hermes_console.ui.widgets.trainer_panel import TrainerPanel
from hermes_console.ui.widgets.turns_stream import TurnsStream

if TYPE_CHECKING:
    from hermes_console.ui.console_api import ConsoleHost

PANELS = [
    ("groups", "Groups"),
    ("turns", "Turns"),
    ("tools", "Tools"),
    ("sandboxes", "Sandboxes"),
    ("rewards", "Rewards"),
    ("trainer", "Trainer"),
    ("servers", "Servers"),
]
OPTIONAL_PANELS = ("trainer", "servers")
COMPACT_WIDTH = 120
MEDIUM_WIDTH = 166  # below: tool calls and sandboxes stack (each full width) instead of side by side
COMPACT_HEIGHT = 34


class MainScreen(Screen[None]):
    BINDINGS = bindings_for("main")
    # Focus lands on the groups table at once, not on the tabs first and then moved: each
    # focus change rebuilds the footer, while the first groups arrive.
    AUTO_FOCUS = "#groups"

    def __init__(self) -> None:
        super().__init__(id="main")
        self.filter = StreamFilter()
        self.compact = False
        self.ready = False  # the app tick skips screens that are not composed yet
        self._present: dict[str, bool] = {}
        self._shown_panel = "groups"  # the one panel drawn in compact mode
        # Change key each panel was last drawn with: an unchanged panel is not touched
        # (any DataTable update drops its render cache and redraws every visible cell).
        self._drawn: dict[str, Hashable] = {}
        # While the UI is throttling, a redraw updates only a few panels (least recently drawn
        # first) and the rest follow on the next ticks: no single tick blocks keys for long.
        self._pending: list[tuple[str, Hashable, Callable[[], None]]] | None = None
        self._drawn_at: dict[str, int] = {}
        self._redraws = 0
        self._owed: set | None = None  # panels a throttled redraw still owes (drawn on the next ticks)
        self._bar_waits = False  # the status bar left its counters for the next redraw
        self._resumed = False

    @property
    def console(self) -> ConsoleHost:
        return cast("ConsoleHost", self.app)

    def compose(self) -> ComposeResult:
        # Every class the first frame needs is set before the widgets mount: a class changed
        # after mounting restyles the whole subtree (the size classes: the whole screen).
        self._set_size_classes(self.app.size.width, self.app.size.height)
        self._present = {key: False for key in OPTIONAL_PANELS}  # they appear when the state asks
        first = self._shown_panel  # AUTO_FOCUS: its panel and row are current from the start

        def panel(widget_cls: type[Widget], panel_id: str) -> Widget:
            absent = " -absent" if panel_id in OPTIONAL_PANELS else ""
            current = " -current" if panel_id == first else ""
            return widget_cls(id=panel_id, classes=f"panel{absent}{current}")

        def row(row_id: str, *panel_ids: str, absent: bool = False) -> Horizontal:
            classes = "row" + (" -current-row" if first in panel_ids else "") + (" -absent" if absent else "")
            return Horizontal(id=row_id, classes=classes)

        yield StatusBar(id="status")
        yield Tabs(
            *[
                Tab(label, id=f"tab-{key}", classes="-hidden" if key in OPTIONAL_PANELS else "")
                for key, label in PANELS
            ],
            id="panel-tabs",
        )
        # Rows, not a grid: the servers row is as tall as the server list and the
        # trainer sits beside the rewards, so neither squeezes the busy panels.
        with Vertical(id="panels"):
            with row("row-top", "groups", "turns"):
                yield panel(GroupsTable, "groups")
                yield panel(TurnsStream, "turns")
            with row("row-mid", "tools", "sandboxes"):
                yield panel(ToolCallsTable, "tools")
                yield panel(SandboxesTable, "sandboxes")
            with row("row-servers", "servers", absent=True):
                yield panel(ServersTable, "servers")
            with row("row-bottom", "rewards", "trainer"):
                yield panel(RewardsPanel, "rewards")
                yield panel(TrainerPanel, "trainer")
        yield Footer()

    def on_mount(self) -> None:
        self._apply_size(self.app.size.width, self.app.size.height)
        self.query_one(TurnsStream).rebuild(self.console.state)
        self.ready = True
        self.refresh_view(self.console.state, self.console.now())

    # ------------------------------------------------------------------ rendering

    def refresh_view(self, state: ConsoleState, now: float) -> None:
        outer, self._pending = self._pending, []  # re-entered when a panel appears/goes (_show_panel)
        try:
            self._collect_draws(state, now)
        finally:
            pending, self._pending = self._pending, outer
        self._flush_draws(pending or [])

    def _collect_draws(self, state: ConsoleState, now: float) -> None:
        second = int(now)  # ages and countdowns are shown to the second
        self._bar_waits = not self.query_one(StatusBar).update_from(
            state,
            now,
            live=self.console.runtime.is_live,
            stopping=self.console.stopping,
            switch_peak=self.console.switch_peak,
            stop_note=self.console.stop_note(),
            ui_note=self.console.ui_note(),
            counters_may_wait=self._owed is not None,  # this tick finishes a throttled redraw
        )
        groups, tools = self.query_one(GroupsTable), self.query_one(ToolCallsTable)
        groups.show_waiting((state.status_detail or "loading the env") if state.status == "loading" else "")
        self._draw(
            "groups", (state.groups_version, state.run.worker_timeout_s, second), lambda: groups.update_from(state, now)
        )
        stream = self.query_one(TurnsStream)
        self._draw("turns", state.stream_seq, lambda: stream.update_from(state))
        # Running calls show a live duration; finished rows change only with tool events.
        self._draw(
            "tools",
            (state.tools_version, second if tools.has_running else None),
            lambda: tools.update_from(state, now),
        )
        sandboxes = self.query_one(SandboxesTable)
        self._draw("sandboxes", (state.sandboxes_version, second), lambda: sandboxes.update_from(state, now))
        rewards = self.query_one(RewardsPanel)
        self._draw("rewards", state.rewards_version, lambda: rewards.update_from(state))
        self._refresh_optional(state, now)

    def _draw(self, panel_id: str, key: Hashable, update: Callable[[], None]) -> None:
        """Run ``update`` if the panel is on screen and its data changed since it was last drawn."""
        if self.compact and panel_id != self._shown_panel:
            return  # drawn when its tab is shown (_show_panel)
        if self._drawn.get(panel_id) == key:
            return
        if self._pending is not None:
            self._pending.append((panel_id, key, update))  # run by _flush_draws
            return
        update()
        self._drawn[panel_id] = key

    def _flush_draws(self, pending: list[tuple[str, Hashable, Callable[[], None]]]) -> None:
        limit = self.console.panels_per_redraw()
        left: set[str] = set()  # changed since the last redraw, drawn by the next one
        if limit is None:
            self._owed = None
        else:
            # One throttled redraw = each panel that changed drawn once, a few per tick; changes
            # that arrive meanwhile wait for the next redraw (else a flood would redraw every tick).
            changed = {item[0] for item in pending}
            owed = changed if self._owed is None else self._owed & changed
            left = changed - owed
            pending = sorted(
                (item for item in pending if item[0] in owed), key=lambda item: self._drawn_at.get(item[0], -1)
            )  # least recently drawn first
            pending = pending[:limit]
            self._owed = owed - {item[0] for item in pending} or None
            if self._owed:
                self.console.redraw_soon()  # the rest on the next tick
        if self._owed is None and (left or self._bar_waits):
            self.console.redraw_later()  # the next redraw comes even if nothing changes before it
        for panel_id, key, update in pending:
            update()
            self._drawn[panel_id] = key
            self._drawn_at[panel_id] = self._redraws
        self._redraws += 1

    def _refresh_optional(self, state: ConsoleState, now: float) -> None:
        trainer, servers = self.query_one(TrainerPanel), self.query_one(ServersTable)
        present = {"trainer": TrainerPanel.wanted(state), "servers": ServersTable.wanted(state)}
        if present != self._present:
            self._set_present(present)
        if present["servers"]:

            def update_servers() -> None:
                # Wide: exactly as tall as the list; compact: the whole tab.
                row_height = "1fr" if self.compact else ServersTable.rows_height(state)
                self.query_one("#row-servers").styles.height = row_height
                servers.update_from(state, now)

            self._draw("servers", (state.servers_version, self.compact, int(now)), update_servers)
        if present["trainer"]:
            self._draw(
                "trainer",
                (state.trainer.ts if state.trainer else None, len(state.trainer_history)),
                lambda: trainer.update_from(state),
            )

    def _set_present(self, present: dict[str, bool]) -> None:
        """Show or hide the optional panels (and their rows and tabs)."""
        self._present = present
        current = self._current_panel_id()
        if current in present and not present[current]:
            self._focus_panel("groups")  # the focused panel is going away
        tabs = self.query_one(Tabs)
        for panel_id, shown in present.items():
            self.query_one(f"#{panel_id}").set_class(not shown, "-absent")
            (tabs.show if shown else tabs.hide)(f"tab-{panel_id}")
        self.query_one("#row-servers").set_class(not present["servers"], "-absent")
        self.query_one("#row-bottom").set_class(present["trainer"], "-with-trainer")

    def on_screen_resume(self, event: ScreenResume) -> None:
        # Textual's Screen handler (called after this one: handlers run from the subclass
        # up) restyles the whole tree of a resumed screen. The first resume follows the
        # screen's own composition, which styled every widget as it mounted: ~50 ms saved
        # on the way to the first frame.
        if not self._resumed:
            self._resumed = True
            event.refresh_styles = False
        if self.ready:
            self.refresh_view(self.console.state, self.console.now())

    # ------------------------------------------------------------------ layout: wide rows vs tabs

    def on_resize(self, event: Resize) -> None:
        self._apply_size(event.size.width, event.size.height)

    def _set_size_classes(self, width: int, height: int) -> bool:
        """Compact (one panel at a time) or medium (stacked middle row): returns medium."""
        self.compact = width < COMPACT_WIDTH or height < COMPACT_HEIGHT
        self.set_class(self.compact, "-compact")
        medium = not self.compact and width < MEDIUM_WIDTH
        self.set_class(medium, "-medium")
        return medium

    def _apply_size(self, width: int, height: int) -> None:
        was_compact = self.compact
        medium = self._set_size_classes(width, height)
        # Keep the stage / age / timeout columns on screen by narrowing the free-text ones:
        # a panel is the whole width in compact mode, half of it (groups) or 3/5 (sandboxes) in rows.
        groups_w = width if self.compact else width // 2
        sandboxes_w = width if self.compact or medium else width // 2
        self.query_one(GroupsTable).set_column_width("item", max(6, min(36, groups_w - GroupsTable.FIXED_WIDTH)))
        sandboxes = self.query_one(SandboxesTable)
        sandboxes.set_column_width("task", 9)  # g0033-r2
        # task + backend + state + elapsed + idle, each with its padding, + border and scrollbar
        sandboxes.set_column_width("command", max(6, min(22, sandboxes_w - (9 + 7 + 7 + 16 + 22 + 12 + 4))))
        if self.compact and not self.query(".panel.-current"):
            self._show_panel(self._current_panel_id() or "groups")
        if was_compact and not self.compact and self.ready:
            self.refresh_view(self.console.state, self.console.now())  # panels hidden in compact mode

    def _panels(self) -> list[Widget]:
        return list(self.query(".panel").results(Widget))

    def _panel_of(self, widget: Widget | None) -> Widget | None:
        while widget is not None and not widget.has_class("panel"):
            parent = widget.parent
            widget = parent if isinstance(parent, Widget) else None
        return widget

    def _current_panel_id(self) -> str | None:
        panel = self._panel_of(self.focused)
        return panel.id if panel is not None else None

    def _show_panel(self, panel_id: str) -> None:
        for panel in self._panels():
            panel.set_class(panel.id == panel_id, "-current")
        for row in self.query(".row").results(Widget):
            # Compact mode shows only the row holding the current panel.
            row.set_class(bool(row.query(f"#{panel_id}")), "-current-row")
        tabs = self.query_one(Tabs)
        if tabs.active != f"tab-{panel_id}":
            tabs.active = f"tab-{panel_id}"
        changed = panel_id != self._shown_panel
        self._shown_panel = panel_id
        if changed and self.compact and self.ready:
            self.refresh_view(self.console.state, self.console.now())  # it was skipped while hidden

    def _focus_panel(self, panel_id: str) -> None:
        self._show_panel(panel_id)
        self.query_one(f"#{panel_id}").focus()

    @on(Tabs.TabActivated, "#panel-tabs")
    def _tab_activated(self, event: Tabs.TabActivated) -> None:
        panel_id = (event.tab.id or "tab-groups").removeprefix("tab-")
        if self._current_panel_id() != panel_id:
            self._focus_panel(panel_id)

    def on_descendant_focus(self, event: object) -> None:
        panel = self._panel_of(self.focused)
        if panel is not None and panel.id:
            self._show_panel(panel.id)

    def action_focus_next_panel(self) -> None:
        self._cycle(+1)

    def action_focus_previous_panel(self) -> None:
        self._cycle(-1)

    def _cycle(self, step: int) -> None:
        ids = [key for key, _ in PANELS if self._present.get(key, True)]
        current = self._current_panel_id()
        index = ids.index(current) if current in ids else -step
        self._focus_panel(ids[(index + step) % len(ids)])

    # ------------------------------------------------------------------ drill-downs

    def action_drill_down(self) -> None:
        panel = self._panel_of(self.focused)
        self._drill_from(panel)

    @on(DataTable.RowSelected)
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self._drill_from(event.data_table)

    @on(LineTable.RowSelected)
    def _line_row_selected(self, event: LineTable.RowSelected) -> None:
        event.stop()
        self._drill_from(event.table)

    def _drill_from(self, panel: Widget | None) -> None:
        # The screens a key opens are imported when first opened: off the way to the first frame.
        from hermes_console.ui.screens.rollouts import RolloutsScreen, bin_query
        from hermes_console.ui.screens.sandbox import SandboxScreen
        from hermes_console.ui.screens.transcript import TranscriptScreen

        state = self.console.state
        if isinstance(panel, GroupsTable):
            group = state.groups.get(panel.selected_key() or "")
            if group is None or not group.rollout_ids:
                self.app.notify("This group has no rollouts yet.", severity="warning")
                return
            running = [r for r in group.rollout_ids if r in state.rollouts and state.rollouts[r].status == "running"]
            self.app.push_screen(TranscriptScreen((running or group.rollout_ids)[0]))
        elif isinstance(panel, ToolCallsTable):
            rollout_id = panel.selected_rollout()
            if rollout_id:
                self.app.push_screen(TranscriptScreen(rollout_id))
        elif isinstance(panel, SandboxesTable):
            task_id = panel.selected_key()
            if task_id:
                self.app.push_screen(SandboxScreen(task_id))
        elif isinstance(panel, ServersTable):
            server = panel.selected_server(state)
            if server is not None:  # the table crops the error; show it whole
                error = last_error(server) or "no error recorded"
                self.app.notify(
                    f"{server.get('url', '?')}: {error}",
                    title="server",
                    severity="information" if server.get("healthy", True) else "error",
                )
        elif isinstance(panel, RewardsPanel):
            self.app.push_screen(RolloutsScreen(bin_query(*panel.selected_bin())))
        elif isinstance(panel, TurnsStream):
            latest = next(
                (e for e in reversed(state.stream) if e.rollout_id and self.filter.matches(e.rollout_id, e.group_id)),
                None,
            )
            if latest is not None:
                self.app.push_screen(TranscriptScreen(latest.rollout_id))
        else:
            self.app.notify("Focus a group, tool call or sandbox row first.", severity="warning")

    def action_closed_sandboxes(self) -> None:
        from hermes_console.ui.screens.closed_sandboxes import ClosedSandboxesScreen

        self.app.push_screen(ClosedSandboxesScreen())

    def action_history(self) -> None:
        """Finished rollouts: the focused group's, the highlighted histogram bin's, or all."""
        from hermes_console.ui.screens.rollouts import RolloutQuery, RolloutsScreen, bin_query

        panel = self._panel_of(self.focused)
        query = RolloutQuery()
        if isinstance(panel, GroupsTable) and panel.selected_key():
            query = RolloutQuery(group_id=panel.selected_key(), sort="score")
        elif isinstance(panel, RewardsPanel):
            query = bin_query(*panel.selected_bin())
        self.app.push_screen(RolloutsScreen(query))

    # ------------------------------------------------------------------ sandbox controls

    def _selected_sandbox(self) -> str | None:
        """The sandbox the focused row points at: a Sandboxes row, or a tool call's rollout
        (a rollout's sandbox has its id). Never a row of a panel that does not have focus."""
        panel = self._panel_of(self.focused)
        task_id: str | None = None
        if isinstance(panel, SandboxesTable):
            task_id = panel.selected_key()
        elif isinstance(panel, ToolCallsTable):
            rollout_id = panel.selected_rollout()
            sandbox = self.console.state.sandboxes.get(rollout_id or "")
            task_id = sandbox.task_id if sandbox is not None and sandbox.state != "closed" else None
            if task_id is None:
                self.app.notify("That tool call's sandbox is closed or unknown.", severity="warning")
                return None
        if task_id is None:
            self.app.notify("No sandbox selected: focus the Sandboxes panel (tab) and pick a row.", severity="warning")
        return task_id

    def action_kill_sandbox(self) -> None:
        task_id = self._selected_sandbox()
        if task_id:
            self.console.kill_sandbox(task_id)

    def action_extend_sandbox(self) -> None:
        task_id = self._selected_sandbox()
        if task_id:
            self.console.extend_sandbox(task_id)

    # ------------------------------------------------------------------ stream / table toggles

    def action_filter(self) -> None:
        def apply(text: str | None) -> None:
            if text is None:
                return
            self.set_filter(text)

        self.app.push_screen(FilterModal(self.filter.text), apply)

    def set_filter(self, text: str) -> None:
        # Matched against raw ids and readable labels (g0033, g0033-r2, or a part: g0033-r).
        text = text.strip()
        stream = self.query_one(TurnsStream)
        tools = self.query_one(ToolCallsTable)
        for box in (self.filter, stream.filter, tools.filter):
            box.text = text
            box.history = lambda: self.console.state.history
        stream.rebuild(self.console.state)
        tools.rebuild(self.console.state, self.console.now())

    def action_sort_table(self) -> None:
        table = self._panel_of(self.focused)
        if isinstance(table, (KeyedTable, LineTable)):
            table.sort_next()

    def action_reverse_table_sort(self) -> None:
        table = self._panel_of(self.focused)
        if isinstance(table, (KeyedTable, LineTable)):
            table.sort_reversed()

    def action_follow(self) -> None:
        self.query_one(TurnsStream).follow()

    def action_toggle_reasoning(self) -> None:
        stream = self.query_one(TurnsStream)
        stream.show_reasoning = not stream.show_reasoning
        stream.rebuild(self.console.state)

    def action_toggle_errors_only(self) -> None:
        tools = self.query_one(ToolCallsTable)
        tools.errors_only = not tools.errors_only
        tools.rebuild(self.console.state, self.console.now())
