"""Config view (`d`, like k9s describe): the resolved env / openai / phase2 config, each
value with where it came from (flags, config file, mode default, config_init()).

`/` filters by words over key, value and source; `s` sorts by the next column.
Secrets are never shown (the runtime sends only whether they are set).
"""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.widgets import DataTable, Input, Static

from hermes_console.runtime.events import ConfigRow
from hermes_console.runtime.state import ConsoleState
from hermes_console.ui.bindings import bindings_for
from hermes_console.ui.format import visible
from hermes_console.ui.screens.drilldown import DrillDownScreen
from hermes_console.ui.widgets.footer import Footer

COLUMNS = (("key", "key", 36), ("value", "value", 48), ("source", "source", None))


def source_style(source: str) -> str:
    if source == "flags" or source.startswith("--"):
        return "bold cyan"
    if source.startswith("config file"):
        return "cyan"
    if "default" in source:
        return "yellow"
    return "dim"


def select_rows(rows: list[ConfigRow], text: str, sort: str, descending: bool) -> list[ConfigRow]:
    """Rows matching every word of ``text``, sorted by ``sort`` (pure, tested without Textual)."""
    words = text.lower().split()
    out = [r for r in rows if all(w in f"{r['key']} {r['value']} {r['source']}".lower() for w in words)]
    if sort != "key":  # keep the resolver's order (env, openai, phase2, run) when sorting by key is not asked
        out.sort(key=lambda r: str(r.get(sort, "")), reverse=descending)
    elif descending:
        out.reverse()
    return out


class ConfigScreen(DrillDownScreen):
    BINDINGS = bindings_for("config")

    def __init__(self) -> None:
        super().__init__(classes="drilldown")
        self.text = ""
        self.sort = "key"
        self.descending = False
        self._drawn: tuple[object, ...] | None = None

    def compose(self) -> ComposeResult:
        yield Static("", id="config-header", classes="drill-header")
        yield Input(
            placeholder="filter: words over key / value / source (enter)", id="config-filter", classes="-hidden"
        )
        yield DataTable(id="config-table", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#config-table", DataTable)
        for key, label, width in COLUMNS:
            table.add_column(label, key=key, width=width)
        table.focus()
        self.ready = True
        self.refresh_view(self.console.state, self.console.now())

    def refresh_view(self, state: ConsoleState, now: float) -> None:
        key = (id(state.run), len(state.run.config), self.text, self.sort, self.descending)
        if key == self._drawn:
            return
        self._drawn = key
        rows = select_rows(state.run.config, self.text, self.sort, self.descending)
        table = self.query_one("#config-table", DataTable)
        table.clear()
        for row in rows:
            table.add_row(
                Text(row["key"], style="bold"),
                Text(visible(row["value"])),
                Text(row["source"], style=source_style(row["source"])),
                key=row["key"],
            )
        header = Text(f"Config of {state.run.env_name or 'the run'}", style="bold")
        header.append(f"   {len(rows)} of {len(state.run.config)} values", style="dim")
        if self.text:
            header.append(f"   filter “{self.text}”", style="bold cyan")
        header.append(f"   sort {self.sort} {'▼' if self.descending else '▲'}", style="dim")
        if not state.run.config:
            header.append(
                "\nno config received (a log recorded before the config view existed, or not started yet)",
                style="yellow",
            )
        else:
            header.append(
                "\nsource: flags / config file / mode default / config_init() (the env's own default)", style="dim"
            )
        self.query_one("#config-header", Static).update(header)

    # ------------------------------------------------------------------ keys

    def action_filter_config(self) -> None:
        box = self.query_one("#config-filter", Input)
        box.remove_class("-hidden")
        box.value = self.text
        box.focus()

    def action_sort_config(self) -> None:
        keys = [c[0] for c in COLUMNS]
        if self.descending:
            self.sort, self.descending = keys[(keys.index(self.sort) + 1) % len(keys)], False
        else:
            self.descending = True
        self.refresh_view(self.console.state, self.console.now())

    @on(DataTable.HeaderSelected, "#config-table")
    def _header_selected(self, event: DataTable.HeaderSelected) -> None:
        event.stop()
        column = str(event.column_key.value)
        self.descending = not self.descending if column == self.sort else False
        self.sort = column
        self.refresh_view(self.console.state, self.console.now())

    @on(Input.Submitted, "#config-filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.text = event.value.strip()
        self.query_one("#config-filter", Input).add_class("-hidden")
        self.query_one("#config-table", DataTable).focus()
        self.refresh_view(self.console.state, self.console.now())

    def action_back(self) -> None:
        box = self.query_one("#config-filter", Input)
        if not box.has_class("-hidden"):
            box.add_class("-hidden")
            self.query_one("#config-table", DataTable).focus()
            return
        super().action_back()
