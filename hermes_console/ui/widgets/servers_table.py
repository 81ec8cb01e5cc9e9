"""Inference servers: one row each, health first (a dead server is red and
counted; ServerManager routes around it)."""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from rich.text import Text
from textual.widgets import DataTable

from hermes_console.runtime.state import ConsoleState

COLUMNS = ("server", "health", "in flight", "requests", "errors", "conn fails", "rerouted", "p50 ms", "last error")


def server_cells(row: Dict[str, Any]) -> Tuple[Any, ...]:
    healthy = bool(row.get("healthy", True))
    health = Text("up", style="green") if healthy else Text("DOWN", style="bold red")
    errors = int(row.get("errors") or 0) + int(row.get("transport_errors") or 0)
    last = row.get("last_connection_failure") or row.get("last_error") or row.get("last_transport_error") or ""
    p50 = row.get("latency_ms_p50")
    return (
        str(row.get("url", "")),
        health,
        str(row.get("in_flight", 0)),
        str(row.get("requests", 0)),
        Text(str(errors), style="red" if errors else ""),
        Text(str(row.get("connection_failures", 0)), style="red" if row.get("connection_failures") else ""),
        str(row.get("rerouted", 0)),
        "–" if p50 is None else f"{p50:.0f}",
        str(last)[:80],
    )


class ServersTable(DataTable):
    def on_mount(self) -> None:
        self.border_title = "Servers"
        self.cursor_type = "row"
        self.add_columns(*COLUMNS)
        self._seen: List[Tuple[Any, ...]] = []

    def update_from(self, state: ConsoleState) -> None:
        rows = [server_cells(r) for r in state.servers]
        plain = [tuple(str(c) for c in r) for r in rows]
        if plain == self._seen:
            return
        self._seen = plain
        self.clear()
        for i, cells in enumerate(rows):
            self.add_row(*cells, key=f"server-{i}")
        down = len(state.unhealthy_servers())
        self.border_title = f"Servers ({len(rows)}, {down} down)" if down else f"Servers ({len(rows)})"
