"""Status bar: run identity, intake state, throughput, item accounting, health."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import Static

from hermes_console.runtime.state import ConsoleState
from hermes_console.ui.format import bar, visible

STATUS_STYLES = {
    "loading": "bold cyan",
    "running": "bold green",
    "paused": "bold yellow",
    "draining": "bold yellow",
    "stopping": "bold magenta",
    "stopped": "bold",
    "finished": "bold",
    "error": "bold white on red",
}
PHASE_NAMES = {1: "chat", 2: "managed"}
SEP = ("  │  ", "dim")


DOT = ("  ·  ", "dim")
#: A piece of a status line and the separator that goes before it when both share a line.
Part = tuple[tuple[str, str], Text]


def parts_of(texts: list[Text], sep: tuple[str, str] = SEP) -> list[Part]:
    return [(sep, text) for text in texts]


def join(parts: list[Part]) -> Text:
    """The parts on one line, each after its separator."""
    line = Text()
    for i, (sep, part) in enumerate(parts):
        if i:
            line.append(*sep)
        line.append_text(part)
    return line


def fit(parts: list[Part], width: int) -> list[Text]:
    """The parts joined as by :func:`join`, on as many lines as ``width`` needs.

    A part is never split (one wider than the bar is cut with an ellipsis): every line fits,
    so the bar is exactly as tall as its lines and a new text with as many lines is a repaint.
    A line left to the terminal's wrapping changed the bar's height with its word breaks, and
    the bar laid the whole screen out at every redraw (a counter's digits, a longer drop reason).
    ``width`` 0 (not laid out yet): one line."""
    if width <= 0:
        return [join(parts)]
    lines: list[Text] = []
    line = Text()
    for sep, part in parts:
        if line.cell_len and line.cell_len + len(sep[0]) + part.cell_len > width:
            lines.append(line)
            line = Text(" ")  # a continuation starts one column in, as the first line does
        elif line.cell_len:
            line.append(*sep)
        line.append_text(part)
    lines.append(line)
    for each in lines:
        if each.cell_len > width:
            each.truncate(width, overflow="ellipsis")
    return lines


class StatusBar(Static):
    """The run, its items, the UI's budget (live), notes: lines broken to fit the bar's width;
    re-rendered only when its text changes, laid out only when its number of lines does."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("", **kwargs)
        self._rendered: tuple = ()
        self._controls: tuple = ()  # what the operator controls, as last drawn (update_from)
        self._note_shown = False  # the budget's note has had a line: the line stays (replays)

    def update_from(
        self,
        state: ConsoleState,
        now: float,
        *,
        live: bool,
        stopping: bool,
        switch_peak: int = 0,
        stop_note: str = "",
        ui_note: str = "",
        counters_may_wait: bool = False,
    ) -> bool:
        """``counters_may_wait``: a throttled redraw's later tick (it finishes the panels the
        first tick left): the bar is redrawn only if what the operator controls or must act on
        changed, not for counters and rates, which the next redraw brings (~one render less
        per panel pair, each ~2-3 ms of the UI thread on a 2-core box). Returns False when it
        left them so (the caller owes the bar a redraw)."""
        progress = self._progress_line(state, switch_peak)
        controls = (
            state.status,
            state.status_detail,
            stopping,
            stop_note,
            ui_note,
            live,
            self._frozen(),
            state.run.phase,
            progress.plain if progress is not None else None,
        )
        if counters_may_wait and controls == self._controls:
            return False
        self._controls = controls
        width = self.content_size.width
        lines = [
            *fit(self._run_parts(state, now, live=live, stopping=stopping), width),
            *fit(self._items_parts(state), width),
        ]
        if stopping and stop_note:
            lines.append(Text(f" {stop_note}", style="bold magenta"))
        if ui_note:  # the UI is spacing its redraws out to stay within its CPU budget
            lines.append(Text(f" {ui_note}", style="yellow"))
            self._note_shown = True
        elif live or self._note_shown:
            # The budget throttles and relaxes with the env's bursts (every LLM round trip), and
            # any busy env makes it throttle within seconds of its start: a line that came (or
            # came and went) would shift every panel below the bar and lay the screen out again.
            # A live run keeps the line from its first frame.
            lines.append(Text(" UI redraws at full rate", style="dim"))
        if progress is not None:
            lines.append(progress)
        if not live:
            note = getattr(self.app, "replay_note", lambda: "")()
            lines.append(
                Text(
                    note or "REPLAY — read-only: pause, cancel, phase, eval and sandbox controls are disabled",
                    style="bold black on yellow",
                )
            )
        text = Text("\n").join(lines)
        key = (text.plain, tuple(text.spans))
        if key != self._rendered:
            # As many lines as the bar is tall, each fitting it: the height cannot change, so the
            # new text is a repaint, not a layout of the whole screen (the clock ticks every second).
            # Compared with the bar as laid out, not with the last text: the first text, drawn
            # before the bar had a width, was laid out already.
            fits = bool(width) and all(line.cell_len <= width for line in lines)
            self.update(text, layout=not (fits and self.content_size.height == len(lines)))
            self._rendered = key
        return True

    # ------------------------------------------------------------------ lines

    def _run_line(self, state: ConsoleState, now: float, *, live: bool, stopping: bool) -> Text:
        return join(self._run_parts(state, now, live=live, stopping=stopping))

    def _run_parts(self, state: ConsoleState, now: float, *, live: bool, stopping: bool) -> list[Part]:
        run = state.run
        status = "stopping" if stopping else state.status
        head = Text()
        head.append(f" {status.upper()} ", style=STATUS_STYLES.get(status, "bold") + " reverse")
        if self._frozen():  # `z`: events are still read, the display is not redrawn
            head.append(" ")
            head.append(" FROZEN (z) ", style="bold white on blue")
        if state.status_detail and not stopping:
            head.append(f" {visible(state.status_detail)}", style="dim")
        env = Text(run.env_name or "(no env yet)", style="bold")
        env.append(f"  {run.mode or '–'}", style="dim")
        if run.shard:
            env.append(f"  shard {run.shard.split(' ')[0]}", style="dim")
        phase_style = "bold black on cyan" if run.phase == 1 else "bold black on magenta"
        phase = Text(f" PHASE {run.phase} ", style=phase_style)
        phase.append(f" {PHASE_NAMES.get(run.phase, '?')}", style="dim")
        step, total_steps = state.step, run.total_steps
        if state.trainer is not None:  # serve mode: steps are the trainer's, not groups sent
            step, total_steps = state.trainer.current_step, state.trainer.total_steps or total_steps
        total = f"/{total_steps}" if total_steps else ""
        lag_style = "bold red" if state.loop_lag_ms >= 250 else "yellow" if state.loop_lag_ms >= 50 else ""
        return parts_of(
            [
                head,
                env,
                phase,
                Text(f"step {step}{total}"),
                Text(f"{state.rollouts_per_s(now):.2f} rollouts/s"),
                Text(f"lag {state.loop_lag_ms:.0f}ms", style=lag_style),
                self._servers(state),
            ]
        )

    def _frozen(self) -> bool:
        try:
            return bool(getattr(self.app, "frozen", False))
        except Exception:  # noqa: BLE001 - drawn outside an app (tests render it alone)
            return False

    def _servers(self, state: ConsoleState) -> Text:
        if not state.servers:
            return Text("servers –", style="dim")
        healthy = sum(1 for s in state.servers if s.get("healthy"))
        total = len(state.servers)
        style = "green" if healthy == total else "bold red" if healthy == 0 else "yellow"
        text = Text(f"servers {healthy}/{total} healthy", style=style)
        latencies = [float(s["latency_ms_p50"]) for s in state.servers if s.get("latency_ms_p50") is not None]
        if latencies:
            text.append(f"  p50 {max(latencies):.0f}ms", style="dim")
        return text

    def _items_line(self, state: ConsoleState) -> Text:
        return join(StatusBar._items_parts(state))

    @staticmethod
    def _items_parts(state: ConsoleState) -> list[Part]:
        acc = state.accounting
        received = Text(" items ", style="dim")
        received.append(f"received {acc.received}")
        dropped = ", ".join(f"{k} {v}" for k, v in sorted(acc.dropped.items()))
        counts = [
            Text(f"completed {acc.completed}", style="green"),
            Text(
                f"dropped {acc.dropped_total}" + (f" ({dropped})" if dropped else ""),
                style="yellow" if acc.dropped_total else "",
            ),
            Text(f"failed {acc.failed}", style="bold red" if acc.failed else ""),
            Text(f"cancelled {acc.cancelled}"),
            Text(f"in flight {acc.in_flight}", style="bold"),
        ]
        errors = sum(state.errors_by_kind.values()) - sum(
            v for k, v in state.errors_by_kind.items() if k.startswith("dropped:")
        )
        parts = [Text(f"errors {errors}", style="bold red" if errors else "green")]
        dh = state.data_health
        if dh.assistant_turns or dh.placeholder:  # nothing to say before a rollout reports health
            figures = f"data trained {dh.trained_share:.0%} turns {dh.trainable_turns}/{dh.assistant_turns}"
            parts.append(
                Text(
                    figures if dh.healthy else f"DATA UNHEALTHY {figures}",
                    style="green" if dh.healthy else "bold white on red",
                )
            )
        if state.trainer is not None:
            tr = state.trainer
            parts.append(Text(f"trainer {tr.state} step {tr.current_step} queue {tr.queue_size}"))
        if state.wandb is not None and state.wandb.state != "off":
            parts.append(StatusBar._wandb(state))
        # The counts go after the item line's dots; a line too narrow for them breaks between them.
        return [(SEP, received), *parts_of(counts, DOT), *parts_of(parts)]

    @staticmethod
    def _wandb(state: ConsoleState) -> Text:
        w = state.wandb
        assert w is not None
        where = w.url or (w.path.rstrip("/").rsplit("/", 1)[-1] if w.path else w.name)
        style = "bold red" if w.state == "failed" or w.log_errors else "green" if w.state == "logging" else "dim"
        text = Text(f"wandb {w.mode} {where}", style=style)
        if w.log_errors:
            text.append(f" ({w.log_errors} log errors)", style="bold red")
        return text

    def _progress_line(self, state: ConsoleState, switch_peak: int) -> Text | None:
        parts: list[Text] = []
        switch = state.phase_switch
        if switch is not None and switch.stage not in ("done", "failed"):
            peak = max(switch_peak, switch.in_flight)
            # The switch event carries the count it started from; groups finishing since
            # move the accounting, so the bar follows the live count.
            live = min(switch.in_flight, state.accounting.in_flight)
            drained = 1.0 - (live / peak if peak else 0.0)
            text = Text(
                f" ⇄ phase switch {switch.from_phase} → {switch.to_phase}: {switch.stage} ", style="bold magenta"
            )
            text.append(bar(drained, 20), style="magenta")
            text.append(f" {live} in flight", style="magenta")
            if switch.detail:
                text.append(f"  {switch.detail}", style="dim")
            parts.append(text)
        elif switch is not None and switch.stage == "failed":
            parts.append(Text(f" ⇄ phase switch failed: {switch.detail}", style="bold red"))
        for view in state.evals.values():
            if view.status == "running":
                fraction = view.done / view.total if view.total else 0.0
                text = Text(f" ◎ evaluation {view.eval_id} ", style="bold cyan")
                text.append(bar(fraction, 20), style="cyan")
                text.append(f" {view.done}/{view.total or '?'}", style="cyan")
                parts.append(text)
        if not parts:
            return None
        return Text("   ").join(parts)
