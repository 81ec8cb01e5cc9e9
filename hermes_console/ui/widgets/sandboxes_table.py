"""Live sandboxes: state, running command against its timeout, idle countdown against lifetime."""

from __future__ import annotations

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

    def update_from(self, state: ConsoleState, now: float) -> None:
        rows: dict[str, Row] = {}
        for sandbox in state.live_sandboxes():
            rows[sandbox.task_id] = self._row(sandbox, now, state.history.label_of(sandbox.task_id))
        self.sync(rows)
        title = f"Sandboxes ({len(rows)} live)"
        if self.border_title != title:
            self.border_title = title

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
