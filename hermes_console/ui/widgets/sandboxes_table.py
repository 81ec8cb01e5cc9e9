"""Live sandboxes: state, running command against its timeout, idle countdown against lifetime."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from hermes_console.runtime.state import ConsoleState
from hermes_console.runtime.views import SandboxView
from hermes_console.ui.format import age, bar, budget, head, level_style
from hermes_console.ui.widgets.keyed_table import KeyedTable, Row


class SandboxesTable(KeyedTable):
    HOSTED = True
    COLUMNS = (
        ("task", "task", 10),
        ("backend", "backend", 7),
        ("state", "state", 7),
        ("command", "running command", 22),
        ("elapsed", "elapsed/timeout", 16),
        ("idle", "idle → reaped", 22),
    )

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # task id -> (what its row shows, the row): cells are built only when what they show changed
        # (a command started or ended, an age's second or a bar's eighth moved); an unchanged row is
        # handed to ``sync`` as the same object, which skips it without comparing cells.
        self._made: dict[str, tuple[tuple[object, ...], Row]] = {}
        self.row_builds = 0  # rows built (tests count them)

    def update_from(self, state: ConsoleState, now: float) -> None:
        made, labels = self._made, state.history.label_of
        rows: dict[str, Row] = {}
        for sandbox in state.live_sandboxes():
            task_id = sandbox.task_id
            label = labels(task_id)
            key = self._shows(sandbox, now, label)
            cached = made.get(task_id)
            if cached is None or cached[0] != key:
                cached = made[task_id] = (key, self._row(sandbox, now, label))
                self.row_builds += 1
            rows[task_id] = cached[1]
        for gone in [t for t in made if t not in rows]:
            del made[gone]
        self.sync(rows)
        title = f"Sandboxes ({len(rows)} live)"
        if self.border_title != title:
            self.border_title = title

    @staticmethod
    def _shows(sb: SandboxView, now: float, label: str) -> tuple[object, ...]:
        """Everything ``_row`` draws from (its texts and styles), without building a cell."""
        running = sb.state == "running"
        elapsed: tuple[object, ...] | None = None
        if running and sb.running_since is not None:
            spent, limit = now - sb.running_since, sb.running_timeout_s
            elapsed = (age(spent), limit, level_style(spent / limit) if limit else None)
        idle: tuple[object, ...] | None = None
        if not running and sb.lifetime_s:
            idle_s = max(0.0, now - sb.last_activity)
            used = idle_s / sb.lifetime_s
            left = sb.lifetime_s - idle_s
            idle = (bar(1.0 - used, 10), level_style(used), age(left) if left > 0 else None)
        return (label, sb.task_id, sb.backend, sb.state, sb.running_command, elapsed, idle, bool(sb.lifetime_s))

    @staticmethod
    def _row(sb: SandboxView, now: float, label: str = "") -> Row:
        running = sb.state == "running"
        if running and sb.running_since is not None:
            elapsed: Text = budget(now - sb.running_since, sb.running_timeout_s)
        else:
            elapsed = Text("–", style="dim")
        if running:
            # The reaper never closes a sandbox with a running command.
            idle = Text("busy: not reaped", style="dim")
        elif sb.lifetime_s:
            idle_s = max(0.0, now - sb.last_activity)
            used = idle_s / sb.lifetime_s
            idle = Text(bar(1.0 - used, 10), style=level_style(used) or "green")
            left = sb.lifetime_s - idle_s
            idle.append(f" {age(left)} left" if left > 0 else " reap due", style=level_style(used))
        else:
            idle = Text("no lifetime", style="dim")
        return (
            Text(head(label or sb.task_id, 10), style="bold"),  # a rollout's sandbox: its readable id
            sb.backend,
            Text(sb.state, style="cyan" if running else "dim"),
            head(sb.running_command or "", 22),
            elapsed,
            idle,
        )
