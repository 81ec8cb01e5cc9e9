"""``hermes-console attach ADDR ...``: the console over one or many ``--listen`` hosts.

The same ConsoleApp and MainScreen, fed by :class:`FleetRuntime`: the main screen shows
every host merged (aggregated rewards and throughput, summed accounting and trainer
figures); over several hosts its groups, turns, tool calls and sandboxes panels get a
host column (FleetRuntime tags every id with its host, so two hosts' ``g0001`` are two
rows). ``H`` opens the Hosts screen: one row per host (link, status, groups, rates,
errors, trainer sent/confirmed/unknown/failed, queue share and staleness: trainer steps
since the host's last confirmed group) and host-tagged tables of active groups,
recent rollouts and errors. There: ``p`` pauses/resumes the selected host, ``a`` all
hosts, ``enter`` shows only that host in the main console (the host filter; commands
then go to it alone), ``A`` shows all hosts again, ``s`` stops the selected host.
Quitting detaches: the hosts keep running.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Static

from hermes_console.remote.client import FleetRuntime, HostLink, parse_targets
from hermes_console.runtime.listener import read_token_file, trainer_counts
from hermes_console.runtime.state import ConsoleState
from hermes_console.ui import app as ui_app
from hermes_console.ui.app import ConsoleApp
from hermes_console.ui.bindings import ScopedBindings
from hermes_console.ui.config import ConsoleConfig
from hermes_console.ui.format import age, head
from hermes_console.ui.screens.confirm import ConfirmModal
from hermes_console.ui.widgets.footer import Footer
from hermes_console.ui.widgets.keyed_table import KeyedTable

LINK_STYLE = {"connected": "green", "connecting": "yellow", "disconnected": "bold red", "refused": "bold red"}
STATUS_STYLE = {
    "running": "green",
    "paused": "yellow",
    "draining": "yellow",
    "error": "bold red",
    "finished": "cyan",
    "stopped": "dim",
}
MAX_ROLLOUT_ROWS = 60


def _fmt(x: float) -> str:
    return "–" if x != x else f"{x:.3f}"  # NaN-safe


class HostsTable(KeyedTable):
    COLUMNS = (
        ("host", "host", 8),
        ("address", "address", 22),
        ("link", "link", 12),
        ("status", "status", 10),
        ("received", "recv", 6),
        ("completed", "done", 6),
        ("failed", "fail", 5),
        ("in_flight", "in fl", 5),
        ("rate", "roll/s", 7),
        ("reward", "reward", 7),
        ("errors", "errors", 6),
    )

    def update_from(self, hosts: list[HostLink], now: float) -> None:
        rows = {}
        for h in hosts:
            s, acc = h.state, h.state.accounting
            errors = sum(v for k, v in s.errors_by_kind.items() if not k.startswith("dropped:"))
            rows[h.label] = (
                Text(h.label, style="bold"),
                head(str(h.address), 22),
                Text(h.link, style=LINK_STYLE.get(h.link, "")),
                Text(s.status if h.connects else "–", style=STATUS_STYLE.get(s.status, "")),
                str(acc.received),
                str(acc.completed),
                str(acc.failed),
                str(acc.in_flight),
                f"{s.rollouts_per_s(now):.2f}",
                _fmt(s.reward_summary()["mean"]),
                str(errors),
            )
        self.sync(rows)


STALENESS_HELP = (
    "stale = trainer steps · seconds since the trainer API last confirmed a group from the host "
    "(≥: before the console attached)"
)


def staleness_cell(h: HostLink) -> Text:
    """Trainer steps (and seconds, on the host's clock) since the host's last confirmed group."""
    since = h.confirm.staleness(h.state.trainer)
    if since is None:
        return Text("never", style="dim")
    steps, seconds, exact = since
    text = Text(f"{'' if exact else '≥'}{steps} · {age(seconds)}")
    if steps >= 2:
        text.stylize("bold yellow")  # the trainer is moving on without this host's groups
    return text


class TrainerHostsTable(KeyedTable):
    COLUMNS = (
        ("host", "host", 8),
        ("state", "trainer", 12),
        ("step", "step", 9),
        ("sent", "sent", 6),
        ("confirmed", "confirmed", 9),
        ("unknown", "unknown", 7),
        ("failed", "failed", 6),
        ("weight", "weight", 6),
        ("queue", "own queue", 9),
        ("share", "queue share", 11),
        ("stale", "stale (steps · s)", 17),
    )

    def update_from(self, hosts: list[HostLink]) -> None:
        rows = {}
        for h in hosts:
            t = h.state.trainer
            if t is None:
                rows[h.label] = (
                    Text(h.label, style="bold"),
                    Text("none", style="dim"),
                    "–",
                    "0",
                    "0",
                    "0",
                    "0",
                    "–",
                    "–",
                    "–",
                    Text("–", style="dim"),
                )
                continue
            c = trainer_counts(h.state)
            rows[h.label] = (
                Text(h.label, style="bold"),
                t.state,
                f"{t.current_step}/{t.total_steps or '?'}",
                str(c["sent"]),
                str(c["confirmed"]),
                Text(str(c["unknown"]), style="bold yellow" if c["unknown"] else ""),
                Text(str(c["failed"]), style="bold red" if c["failed"] else ""),
                f"{t.env_weight:.2f}",
                str(t.self_queue_size),
                f"{t.self_queue_size / t.total_queue_size:.0%}" if t.total_queue_size else "–",
                staleness_cell(h),
            )
        self.sync(rows)


class HostGroupsTable(KeyedTable):
    COLUMNS = (
        ("host", "host", 8),
        ("group", "group", 12),
        ("item", "item", 30),
        ("done", "done", 6),
        ("stage", "stage", 12),
    )

    def update_from(self, hosts: list[HostLink]) -> None:
        rows = {}
        for h in hosts:
            for g in h.state.active_groups():
                total = g.group_size or len(g.rollout_ids) or "?"
                rows[f"{h.label}/{g.group_id}"] = (
                    Text(h.label, style="bold"),
                    head(g.group_id, 12),
                    head(g.item_summary or "–", 30),
                    f"{g.rollouts_done}/{total}",
                    g.stage,
                )
        self.sync(rows)


class HostRolloutsTable(KeyedTable):
    COLUMNS = (
        ("host", "host", 8),
        ("rollout", "rollout", 16),
        ("status", "status", 9),
        ("turn", "turn", 5),
        ("reward", "reward", 7),
    )

    def update_from(self, hosts: list[HostLink]) -> None:
        recent = []
        for h in hosts:
            for r in list(h.state.rollouts.values())[-MAX_ROLLOUT_ROWS:]:
                recent.append((r.started_at, h, r))
        recent.sort(key=lambda x: x[0])
        rows = {}
        for _, h, r in recent[-MAX_ROLLOUT_ROWS:]:
            rows[f"{h.label}/{r.rollout_id}"] = (
                Text(h.label, style="bold"),
                head(r.rollout_id, 16),
                r.status,
                str(r.turn),
                "–" if r.reward is None else f"{r.reward:.2f}",
            )
        self.sync(rows)


class HostErrorsTable(KeyedTable):
    COLUMNS = (("host", "host", 8), ("kind", "error kind", 28), ("count", "count", 7))

    def update_from(self, hosts: list[HostLink]) -> None:
        rows = {}
        for h in hosts:
            for kind, n in sorted(h.state.errors_by_kind.items()):
                if not kind.startswith("dropped:"):
                    rows[f"{h.label}/{kind}"] = (Text(h.label, style="bold"), head(kind, 28), str(n))
            if h.link in ("disconnected", "refused"):
                rows[f"{h.label}/link"] = (
                    Text(h.label, style="bold"),
                    Text(head(f"{h.link}: {h.link_detail}", 28), style="red"),
                    "–",
                )
        self.sync(rows)


class FleetScreen(Screen[None]):
    DEFAULT_CSS = """
    FleetScreen #fleet-title { height: 1; padding: 0 1; }
    FleetScreen KeyedTable { border: round $primary; height: auto; max-height: 14; }
    FleetScreen Horizontal { height: auto; }
    """
    BINDINGS = [
        Binding("p", "pause_host", "Pause host", id="fleet-pause-host"),
        Binding("a", "pause_all", "Pause all", id="fleet-pause-all"),
        Binding("enter", "filter_host", "Only this host", id="fleet-filter-host"),
        Binding("A", "all_hosts", "All hosts", id="fleet-all-hosts"),
        Binding("s", "stop_host", "Stop host", id="fleet-stop-host"),
        Binding("escape,H", "back", "Back", id="fleet-back"),
    ]

    def __init__(self) -> None:
        super().__init__(id="fleet")
        self.ready = False

    @property
    def console(self) -> FleetConsoleApp:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield Static("", id="fleet-title")
        with Vertical():
            yield HostsTable(id="fleet-hosts")
            yield TrainerHostsTable(id="fleet-trainer")
            with Horizontal():
                yield HostGroupsTable(id="fleet-groups")
                yield HostRolloutsTable(id="fleet-rollouts")
            yield HostErrorsTable(id="fleet-errors")
        yield Footer()

    def on_mount(self) -> None:
        for wid, title in (
            ("fleet-hosts", "Hosts"),
            ("fleet-trainer", "Trainer per host"),
            ("fleet-groups", "Active groups"),
            ("fleet-rollouts", "Recent rollouts"),
            ("fleet-errors", "Errors per host"),
        ):
            self.query_one(f"#{wid}").border_title = title
        self.query_one(TrainerHostsTable).border_subtitle = STALENESS_HELP
        self.query_one(HostsTable).focus()
        self.ready = True
        self.refresh_view(self.console.state, self.console.now())

    def refresh_view(self, state: ConsoleState, now: float) -> None:
        hosts = self.console.fleet.hosts
        self.query_one(HostsTable).update_from(hosts, now)
        self.query_one(TrainerHostsTable).update_from(hosts)
        self.query_one(HostGroupsTable).update_from(hosts)
        self.query_one(HostRolloutsTable).update_from(hosts)
        self.query_one(HostErrorsTable).update_from(hosts)
        merged = self.console.merged
        shown = self.console.fleet.selected
        title = Text("Fleet ", style="bold")
        title.append(f"{len([h for h in hosts if h.connected])}/{len(hosts)} connected · ")
        title.append(f"{merged.rollouts_per_s(now):.2f} rollouts/s · reward {_fmt(merged.reward_summary()['mean'])} · ")
        title.append("console shows: " + ("all hosts" if shown is None else hosts[shown].label), style="bold cyan")
        self.query_one("#fleet-title", Static).update(title)

    def selected_host(self) -> HostLink | None:
        key = self.query_one(HostsTable).selected_key()
        return next((h for h in self.console.fleet.hosts if h.label == key), None)

    def action_pause_host(self) -> None:
        h = self.selected_host()
        if h is None:
            return
        fleet = self.console.fleet
        if h.paused:
            self.console.send(f"resume {h.label}", lambda: fleet.resume(h.index), success=f"{h.label}: intake resumed")
        else:
            self.console.send(
                f"pause {h.label}",
                lambda: fleet.pause(h.index),
                success=f"{h.label}: intake paused; in-flight groups drain",
            )

    def action_pause_all(self) -> None:
        fleet = self.console.fleet
        live = [h for h in fleet.hosts if h.connected]
        if live and all(h.paused for h in live):
            self.console.send(
                "resume all", lambda: fleet.command("resume", all_hosts=True), success="every host resumed"
            )
        else:
            self.console.send("pause all", lambda: fleet.command("pause", all_hosts=True), success="every host paused")

    def action_filter_host(self) -> None:
        h = self.selected_host()
        if h is not None:
            self.console.show_host(h.index)

    def on_data_table_row_selected(self, event: Any) -> None:
        """``enter`` on a host row (the table takes the key itself and says so with this message)."""
        if isinstance(event.data_table, HostsTable):
            event.stop()
            self.action_filter_host()

    def action_all_hosts(self) -> None:
        self.console.show_host(None)

    def action_stop_host(self) -> None:
        h = self.selected_host()
        if h is None:
            return

        def answer(yes: bool | None) -> None:
            if yes:
                deadline = self.console.config.drain_deadline_s
                self.console.send(
                    f"stop {h.label}",
                    lambda: self.console.fleet.stop_host(h.index, deadline),
                    success=f"{h.label} stopped",
                )

        self.app.push_screen(
            ConfirmModal(
                f"Stop host {h.label}?",
                f"{h.address} drains its in-flight groups and exits; the other hosts keep running.",
                "Stop it",
            ),
            answer,
        )

    def action_back(self) -> None:
        self.app.pop_screen()


class FleetConsoleApp(ConsoleApp):
    """ConsoleApp over a :class:`FleetRuntime`; ``self.state`` is the merged state or one host's."""

    # same scope as the app's (the palette offers the app's controls here too), plus the Hosts screen
    BINDINGS = ScopedBindings("app", [*ConsoleApp.BINDINGS, Binding("H", "show_hosts", "Hosts", id="fleet-hosts")])
    CSS_PATH = str(Path(ui_app.__file__).with_name("console.tcss"))  # the console's own look

    def __init__(self, fleet: FleetRuntime, *, config: ConsoleConfig | None = None, now: Any = None) -> None:
        super().__init__(fleet, config=config, now=now)
        self.fleet = fleet
        self.merged = self.state
        # the main screen's panels get a host column (ids are tagged ID@LABEL) over several hosts
        self.host_column: FleetRuntime | None = fleet if fleet.multi_host else None
        self.title = f"hermes-console attach ({len(fleet.hosts)} host{'s' if len(fleet.hosts) != 1 else ''})"

    def _fold(self, events: Iterable[Any]) -> int:
        """Into the merged state, whichever state is shown (per-host states were folded by
        FleetRuntime.drain). Returns the events applied, as the base class's fold does."""
        n = 0
        for event in events:
            self.merged.apply(event)
            n += 1
            if event.kind == "phase_switch":
                self._track_switch(event)
        return n

    def show_host(self, index: int | None) -> None:
        """The host filter: the main console shows one host (or all); commands follow it."""
        self.fleet.selected = index
        self.state = self.merged if index is None else self.fleet.hosts[index].state
        for screen in self.screen_stack:
            if getattr(screen, "ready", False) and hasattr(screen, "_drawn"):
                screen._drawn.clear()
                from hermes_console.ui.widgets.turns_stream import TurnsStream

                for stream in screen.query(TurnsStream):
                    stream.rebuild(self.state)
        label = "all hosts" if index is None else self.fleet.hosts[index].label
        self.notify(f"the console shows {label}", title="hosts")
        self._redraw(force=True)

    def action_show_hosts(self) -> None:
        if not isinstance(self.screen, FleetScreen):
            self.push_screen(FleetScreen())

    def action_request_quit(self) -> None:
        self.shutdown()

    def shutdown(self) -> None:
        """Detach (the hosts keep running) and leave."""
        self.stopping = True
        self.fleet.stop()
        self.exit(0)

    def stop_note(self) -> str:
        return "detaching" if self.stopping else ""


def attach_main(addresses: list[str], token_file: str | None, keys_file: str | None) -> int:
    from hermes_console.ui.config import KeymapError, load_console_config

    targets = parse_targets(addresses)
    token = read_token_file(token_file, what="--token-file") if token_file else None
    try:
        config = load_console_config(Path(keys_file) if keys_file else None)
    except KeymapError as exc:
        print(f"hermes-console: {exc}", file=sys.stderr)
        return 2
    fleet = FleetRuntime(targets, token=token)
    app = FleetConsoleApp(fleet, config=config)
    try:
        result = app.run()
    finally:
        fleet.stop()
        fleet.join(10.0)
    refused = [h for h in fleet.hosts if h.link == "refused"]
    for h in refused:
        print(f"hermes-console: {h.label} ({h.address}) refused the console: {h.link_detail}", file=sys.stderr)
    return int(app.return_code or result or 0)
