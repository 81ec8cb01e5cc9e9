"""Sandbox drill-down: lifetime, process tree, cwd, recent commands; run a diagnostic; kill/extend."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Input, RichLog, Static

from hermes_console.runtime.state import ConsoleState
from hermes_console.runtime.views import SandboxView
from hermes_console.ui.bindings import bindings_for
from hermes_console.ui.format import bar, budget, clock, duration, head, level_style, shown, visible
from hermes_console.ui.screens.drilldown import DrillDownScreen
from hermes_console.ui.widgets.footer import Footer

if TYPE_CHECKING:  # (annotations only: the models cost pydantic and the sandbox layer at import)
    from hermes_console.runtime.payloads import DiagnosticResult, LiveOutput, SandboxDetails

LIVE_REFRESH_S = 1.0  # while a command runs, its output tail is re-fetched this often


class SandboxScreen(DrillDownScreen):
    BINDINGS = bindings_for("sandbox")

    def __init__(self, task_id: str) -> None:
        super().__init__(classes="drilldown")
        self.task_id = task_id
        self.details: SandboxDetails | None = None
        self._live: LiveOutput | None = None  # the running command, as of the last details
        self._signature: tuple[object, ...] | None = None
        self._details_pending = False  # one details request at a time (the live refresh polls)
        self._details_asked = 0.0  # monotonic, for the poll interval
        self._details_wall = 0.0  # wall clock of the last request (state times are wall clock)

    def compose(self) -> ComposeResult:
        yield Static("", id="sandbox-header", classes="drill-header")
        with Horizontal(id="sandbox-body"):
            with Vertical(id="sandbox-left"):
                yield DataTable(id="process-tree", cursor_type="row", zebra_stripes=True)
                yield RichLog(id="recent-commands", wrap=True, markup=False, auto_scroll=False)
            with Vertical(id="sandbox-right"):
                yield RichLog(id="live-output", wrap=True, markup=False, auto_scroll=True)
                yield Input(
                    placeholder="diagnostic command, e.g. ps aux  (enter to run; d to focus)", id="diagnostic-input"
                )
                yield RichLog(id="diagnostic-output", wrap=True, markup=False)
        yield Footer()

    def on_mount(self) -> None:
        tree = self.query_one("#process-tree", DataTable)
        for key, label, width in (
            ("pid", "pid", 7),
            ("ppid", "ppid", 7),
            ("state", "st", 3),
            ("elapsed", "elapsed", 8),
            ("command", "command", None),
        ):
            tree.add_column(label, key=key, width=width)
        tree.border_title = "Process tree"
        self.query_one("#recent-commands", RichLog).border_title = "Recent commands"
        self.query_one("#diagnostic-output", RichLog).border_title = "Diagnostic output"
        self.query_one("#live-output", RichLog).border_title = "Running command (live output)"
        self.ready = True
        self.refresh_view(self.console.state, self.console.now())
        self.action_refresh_details()
        self.set_interval(LIVE_REFRESH_S / 2, self._live_tick, name="sandbox-live-output")

    # ------------------------------------------------------------------ live header

    def refresh_view(self, state: ConsoleState, now: float) -> None:
        sandbox = state.sandboxes.get(self.task_id)
        signature = self._signature_of(sandbox, now)
        if signature != self._signature:
            self._signature = signature
            self.query_one("#sandbox-header", Static).update(self._header(sandbox, now))

    def _live_tick(self) -> None:
        """Poll the details while a command runs (the last details had live output, or the
        state shows a command that started after them), so its output grows on screen.
        Its own timer: the app redraws only when the state changes."""
        if self._details_pending or time.monotonic() - self._details_asked < LIVE_REFRESH_S:
            return
        sandbox = self.console.state.sandboxes.get(self.task_id)
        live = self._live is not None
        started_since = (
            sandbox is not None
            and sandbox.state == "running"
            and sandbox.running_since is not None
            and sandbox.running_since > self._details_wall
        )
        if live or started_since:
            self.action_refresh_details()

    @staticmethod
    def _signature_of(sb: SandboxView | None, now: float) -> tuple[object, ...]:
        if sb is None:
            return ("gone",)
        return (sb.state, sb.running_command, sb.lifetime_s, sb.last_activity, sb.commands, int(now))

    def _header(self, sb: SandboxView | None, now: float) -> Text:
        text = Text(f"Sandbox {visible(self.task_id)}", style="bold")
        label = self.console.state.history.label_of(self.task_id)
        if label != self.task_id:  # its rollout's readable id (t opens the transcript)
            text.append(f"  rollout {label}", style="bold cyan")
        if sb is None:
            text.append("\nnot in the console's memory (closed long ago, or never seen)", style="yellow")
            return text
        text.append(f"   backend {sb.backend}   ")
        style = {"running": "bold cyan", "idle": "bold green", "closed": "bold"}.get(sb.state, "")
        text.append(f" {sb.state.upper()} ", style=style + " reverse")
        text.append(
            f"\nworkdir {sb.workdir or '–'}   created {clock(sb.created_at)}   commands {sb.commands}"
            f"   timeouts {sb.timeouts}   last exit {sb.last_exit_code if sb.last_exit_code is not None else '–'}"
        )
        text.append("\n")
        if sb.state == "closed":
            text.append(f"closed ({sb.closed_reason}) at {clock(sb.closed_at or now)}", style="dim")
        elif sb.state == "running" and sb.running_since is not None:
            text.append("running ", style="cyan")
            text.append(head(sb.running_command or "", 80))
            text.append("  ")
            text.append_text(budget(now - sb.running_since, sb.running_timeout_s))
        elif sb.lifetime_s:
            idle = max(0.0, now - sb.last_activity)
            used = idle / sb.lifetime_s
            text.append("idle → reaped  ", style="dim")
            text.append(bar(1.0 - used, 20), style=level_style(used) or "green")
            text.append(
                f"  {duration(max(0.0, sb.lifetime_s - idle))} left of {duration(sb.lifetime_s)}",
                style=level_style(used),
            )
        if self.details is not None:
            self._details_lines(text, self.details)
        return text

    @staticmethod
    def _details_lines(text: Text, details: SandboxDetails) -> None:
        """The header's lines from the last details: cwd, limits, shell, overrides."""
        if details.cwd:
            text.append(f"\ncwd {visible(details.cwd)}")
        if details.limits:
            shown_limits = "   ".join(f"{k} {v}" for k, v in details.limits.items() if k != "enforced_by")
            text.append(f"\nlimits {shown_limits}", style="dim")
        shell = details.shell
        if shell.shell_pid:  # the persistent machine's shell
            text.append(
                f"\nshell pid {shell.shell_pid}  up {duration(shell.shell_uptime_s)}"
                f"  restarts {shell.shell_restarts} shell / {shell.machine_restarts} machine"
                f"  {'busy' if shell.busy else 'idle'}",
                style="dim",
            )
            if shell.agent_processes_stopped:  # killed before the verifier's first command
                text.append(
                    f"  {shell.agent_processes_stopped} agent process(es) stopped before verification", style="dim"
                )
        overrides = details.overrides
        if overrides:  # the task's register_task_env_overrides(...)
            shown = "  ".join(f"{k}={visible(str(v))}" for k, v in sorted(overrides.items()))
            text.append(f"\noverrides {shown}", style="dim")

    # ------------------------------------------------------------------ details (process tree, commands)

    def action_refresh_details(self) -> None:
        self._details_asked, self._details_wall = time.monotonic(), time.time()
        self._details_pending = self.console.send(
            "sandbox details",
            lambda: self.console.runtime.sandbox_details(self.task_id),
            on_result=self.show_details,
            on_error=self._details_failed,
            quiet_replay=True,
        )

    def _details_failed(self, exc: BaseException) -> None:
        self._details_pending = False  # the app has shown the error
        self._live = None  # e.g. the sandbox closed: stop polling it
        if self.details is None:
            self._commands_from_state()

    def _commands_from_state(self) -> None:
        """A closed sandbox has no details to fetch: its last commands, as the console saw them."""
        sb = self.console.state.sandboxes.get(self.task_id)
        log = self.query_one("#recent-commands", RichLog)
        log.clear()
        log.border_title = "Last commands (as seen by the console)"
        for seen in sb.last_commands if sb is not None else []:  # the reducer's rows (plain dicts)
            lines = self._command_lines(
                str(seen.get("command", "")),
                seen.get("exit_code"),
                seen.get("duration_s"),
                seen.get("output_head") or "",
            )
            for line in lines:
                log.write(line)

    def show_details(self, details: SandboxDetails) -> None:
        self._details_pending = False
        self.details = details
        self._live = details.live_output
        self._show_live(details.live_output)
        tree = self.query_one("#process-tree", DataTable)
        tree.clear()
        for proc in details.process_tree:
            tree.add_row(str(proc.pid), str(proc.ppid), proc.state, duration(proc.elapsed_s), head(proc.command, 200))
        log = self.query_one("#recent-commands", RichLog)
        log.clear()
        for record in details.recent_commands:
            for line in self._command_lines(record.command, record.exit_code, record.duration_s, record.output_head):
                log.write(line)
        self._signature = None
        self.refresh_view(self.console.state, self.console.now())

    def _show_live(self, live: LiveOutput | None) -> None:
        log = self.query_one("#live-output", RichLog)
        log.clear()
        if live is None:
            log.write(Text("no command running", style="dim"))
            return
        log.write(Text("$ ", style="bold") + shown(head(live.command, 200), style="bold"))
        log.write(Text(f"running {duration(live.running_s)}, {live.bytes} bytes so far", style="cyan"))
        if live.tail:
            log.write(shown(live.tail))

    @staticmethod
    def _command_lines(command: str, exit_code: int | None, duration_s: float | None, output_head: str) -> list[Text]:
        ok = exit_code == 0
        line = Text("$ ", style="bold") + shown(command, style="bold")
        line.append(f"   exit {exit_code}  {duration(duration_s)}", style="green" if ok else "bold red")
        return [line] + ([shown(output_head, style="dim")] if output_head else [])

    # ------------------------------------------------------------------ diagnostics and controls

    def action_focus_diagnostic(self) -> None:
        self.query_one("#diagnostic-input", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        command = event.value.strip()
        if not command:
            return
        output = self.query_one("#diagnostic-output", RichLog)
        output.write(shown(f"$ {command}", style="bold"))
        self.console.send(
            "diagnostic command",
            lambda: self.console.runtime.run_in_sandbox(self.task_id, command, timeout_s=10.0),
            on_result=self._show_diagnostic,
        )

    def _show_diagnostic(self, result: DiagnosticResult) -> None:
        output = self.query_one("#diagnostic-output", RichLog)
        if result.output:
            output.write(shown(result.output))
        output.write(
            Text(
                f"[exit {result.exit_code}, {duration(result.duration_s)}]",
                style="green" if result.exit_code == 0 else "bold red",
            )
        )

    def action_open_transcript(self) -> None:
        """A sandbox belongs to the rollout of the same id (its task id): open that transcript."""
        from hermes_console.ui.screens.transcript import TranscriptScreen

        state = self.console.state
        if self.task_id not in state.rollouts and self.task_id not in state.history.records:
            self.notify(f"no rollout {head(self.task_id, 16)} in memory for this sandbox", severity="warning")
            return
        self.app.push_screen(TranscriptScreen(self.task_id))

    def action_kill_sandbox(self) -> None:
        self.console.kill_sandbox(self.task_id)

    def action_extend_sandbox(self) -> None:
        self.console.extend_sandbox(self.task_id)

    def action_extend_command(self) -> None:
        self.console.extend_command(self.task_id)
