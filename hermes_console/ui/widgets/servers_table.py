"""Inference servers: one row each, health first (a dead server's row is red and
says for how long; ServerManager routes around it)."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from hermes_console.runtime.state import ConsoleState
from hermes_console.ui.format import age, clock, head
from hermes_console.ui.widgets.keyed_table import KeyedTable, Row

# What an operator scans for comes first, so 80 columns show it without scrolling.
COLUMNS = (
    "server",
    "health",
    "down for",
    "in flight",
    "p50 ms",
    "conn fails",
    "errors",
    "requests",
    "rerouted",
    "last error",
)
DOWN_STYLE = "bold red"
MAX_VISIBLE_ROWS = 8  # beyond this the table scrolls instead of squeezing the other panels


def last_error(row: dict[str, Any]) -> str:
    return str(row.get("last_connection_failure") or row.get("last_error") or row.get("last_transport_error") or "")


def short_url(url: str) -> str:
    """host:port[/path] without the scheme and the usual /v1 suffix (the full url is one Enter away)."""
    short = url.split("://", 1)[-1]
    return short[:-3] if short.endswith("/v1") else short


def down_for(row: dict[str, Any], now: float | None) -> str:
    since = row.get("down_since")
    if row.get("healthy", True) or since is None:
        return "–"
    # Without a clock (plain rendering) show when it went down rather than a stale age.
    return clock(float(since)) if now is None else age(now - float(since))


def server_cells(row: dict[str, Any], now: float | None = None) -> tuple[Any, ...]:
    healthy = bool(row.get("healthy", True))
    down = "" if healthy else DOWN_STYLE
    if "healthy" not in row:  # configured, not checked yet (the run's first seconds)
        health = Text("–", style="dim")
    else:
        health = Text("up", style="green") if healthy else Text("DOWN", style="bold white on red")
    errors = int(row.get("errors") or 0) + int(row.get("transport_errors") or 0)
    p50 = row.get("latency_ms_p50")
    return (
        Text(short_url(str(row.get("url", ""))), style=down or "bold"),
        health,
        Text(down_for(row, now), style=down),
        Text(str(row.get("in_flight", 0)), style=down),
        "–" if p50 is None else f"{p50:.0f}",
        Text(str(row.get("connection_failures", 0)), style="red" if row.get("connection_failures") else ""),
        Text(str(errors), style="red" if errors else ""),
        str(row.get("requests", 0)),
        str(row.get("rerouted", 0)),
        Text(head(last_error(row), 80), style="red" if not healthy else "dim"),
    )


def _rows(state: ConsoleState) -> list[dict[str, Any]]:
    """The health watcher's rows; until its first report, the configured servers (unchecked)."""
    return state.servers or [{"url": url} for url in state.run.servers]


class ServersTable(KeyedTable):
    COLUMNS = tuple((label.replace(" ", "_"), label, None) for label in COLUMNS)

    def on_mount(self) -> None:
        # Textual also runs KeyedTable.on_mount (it dispatches along the MRO): no super() here.
        self.border_title = "Servers"
        self.show_cursor = False  # an idle cursor row would hide a down server's red

    def on_focus(self) -> None:
        self.show_cursor = True

    def on_blur(self) -> None:
        self.show_cursor = False

    @staticmethod
    def wanted(state: ConsoleState) -> bool:
        """Worth a panel: several servers, or one that is down (else the status bar says it all).
        Known from the run's configuration, before the first health check: the panel takes its
        place while the env loads, not by re-arranging the screen once groups run."""
        return len(_rows(state)) > 1 or bool(state.unhealthy_servers())

    @staticmethod
    def rows_height(state: ConsoleState) -> int:
        """Outer height that shows every server (up to a cap): rows + header + border."""
        return min(len(_rows(state)), MAX_VISIBLE_ROWS) + 3

    def update_from(self, state: ConsoleState, now: float | None = None) -> None:
        # Keyed by position as well as url: two entries may point at the same url.
        rows: dict[str, Row] = {f"{i}:{r.get('url', '')}": server_cells(r, now) for i, r in enumerate(_rows(state))}
        self.sync(rows)
        down = len(state.unhealthy_servers())
        title = f"Servers ({len(rows)}, {down} down)" if down else f"Servers ({len(rows)})"
        if self.border_title != title:
            self.border_title = title

    def selected_server(self, state: ConsoleState) -> dict[str, Any] | None:
        key = self.selected_key()
        index = int(key.split(":", 1)[0]) if key else -1
        return state.servers[index] if 0 <= index < len(state.servers) else None
