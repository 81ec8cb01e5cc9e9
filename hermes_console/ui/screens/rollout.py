"""Rollout drill-down: the full transcript with reasoning, tool calls and results."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import RichLog, Static

from hermes_console.runtime.state import ConsoleState
from hermes_console.runtime.views import RolloutView, ToolCallView
from hermes_console.ui.format import clock, duration, shown, visible
from hermes_console.ui.screens.drilldown import DrillDownScreen
from hermes_console.ui.widgets.footer import Footer

PHASE_NAMES = {1: "Phase 1 (chat)", 2: "Phase 2 (managed /generate)"}


class RolloutScreen(DrillDownScreen):
    def __init__(self, rollout_id: str) -> None:
        super().__init__(classes="drilldown")
        self.rollout_id = rollout_id
        self._signature: tuple[object, ...] | None = None

    def compose(self) -> ComposeResult:
        yield Static("", id="rollout-header", classes="drill-header")
        yield RichLog(id="transcript", wrap=True, markup=False, auto_scroll=False)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#transcript", RichLog).border_title = "Transcript"
        self.ready = True
        self.refresh_view(self.console.state, self.console.now())

    def refresh_view(self, state: ConsoleState, now: float) -> None:
        rollout = state.rollouts.get(self.rollout_id)
        signature = self._signature_of(rollout, now)
        if signature == self._signature:
            return
        self._signature = signature
        header = self.query_one("#rollout-header", Static)
        log = self.query_one("#transcript", RichLog)
        if rollout is None:
            header.update(
                Text(f"Rollout {self.rollout_id} is no longer in memory; its group is in the jsonl.", style="yellow")
            )
            log.clear()
            return
        header.update(self._header(rollout, state, now))
        log.clear()
        for line in self._transcript(rollout, state):
            log.write(line)

    @staticmethod
    def _signature_of(rollout: RolloutView | None, now: float) -> tuple[object, ...]:
        if rollout is None:
            return ("gone",)
        last_tool = rollout.tool_calls[-1].status if rollout.tool_calls else None
        ticking = int(now) if rollout.status == "running" else 0  # the running age changes each second
        return (
            rollout.status,
            len(rollout.turns),
            rollout.turn,
            len(rollout.tool_calls),
            last_tool,
            rollout.turns[-1].latency_s if rollout.turns else None,
            ticking,
        )

    @staticmethod
    def _header(r: RolloutView, state: ConsoleState, now: float) -> Text:
        text = Text()
        text.append(f"Rollout {r.rollout_id}", style="bold")
        text.append(f"   group {r.group_id}   {PHASE_NAMES.get(r.phase, f'phase {r.phase}')}   ")
        status_style = {"running": "bold cyan", "done": "bold green", "error": "bold red"}.get(r.status, "")
        text.append(f" {r.status.upper()} ", style=status_style + " reverse")
        text.append("\n")
        reward = "–" if r.reward is None else f"{r.reward:.3f}"
        age = r.duration_s if r.duration_s is not None else max(0.0, now - r.started_at)
        text.append("reward ", style="dim")
        text.append(reward, style="bold magenta")
        text.append(
            f"   turns {r.turns_used or r.turn}   tokens {r.token_count}   nodes {r.node_count}"
            f"   tool errors {r.tool_errors}   duration {duration(age)}"
        )
        if r.placeholder_tokens:
            text.append("   placeholder tokens", style="yellow")
        if r.assistant_turns:
            short = r.trainable_turns < r.assistant_turns or r.drift_count
            text.append(
                f"\ntrained {r.trainable_tokens}/{r.token_count} tokens, "
                f"turns {r.trainable_turns}/{r.assistant_turns}, drift {r.drift_count}",
                style="bold red" if short else "green",
            )
            if r.trained_run_tokens:  # which turns train: tokens per trained run (+ mean logprob in Phase 2)
                per_turn = [
                    str(n) if i >= len(r.trained_run_logprob) else f"{n} (lp {r.trained_run_logprob[i]:.2f})"
                    for i, n in enumerate(r.trained_run_tokens)
                ]
                text.append("\ntrained per turn: " + " · ".join(per_turn), style="dim")
        text.append("\nitem ", style="dim")
        text.append(visible(r.item_summary or "–"))
        for label, error in (("error", r.error), ("reward error", r.reward_error)):
            if error:
                text.append(f"\n{label}: {visible(error)}", style="bold red")
        return text

    @staticmethod
    def _transcript(r: RolloutView, state: ConsoleState) -> list[Text]:
        lines: list[Text] = []
        group = state.groups.get(r.group_id)
        toolsets = ", ".join(group.toolsets) if group and group.toolsets else "–"
        lines.append(Text(f"system  agent with toolsets: {toolsets}", style="dim"))
        lines.append(Text("user    ", style="bold blue") + shown(r.item_summary or "(item not recorded)"))
        lines.extend(turn_lines(r, _brief_result))
        lines.extend(reward_lines(r))
        return lines


def turn_lines(r: RolloutView, result_lines: Callable[[ToolCallView], list[Text]]) -> list[Text]:
    """A rollout's turns, each followed by its tool calls; ``result_lines`` draws a call's result."""
    lines: list[Text] = []
    calls_by_turn: dict[int, list[ToolCallView]] = {}
    for call in r.tool_calls:
        calls_by_turn.setdefault(call.turn, []).append(call)
    for turn in r.turns:
        latency = "…" if turn.latency_s is None else duration(turn.latency_s)
        lines.append(
            Text(
                f"\n── turn {turn.turn} · {clock(turn.started_at)} · {latency}"
                + (" · tool calls parsed from text" if turn.parsed_from_text else ""),
                style="dim",
            )
        )
        if turn.reasoning:
            lines.append(Text("reasoning  ", style="dim") + shown(turn.reasoning, style="dim italic"))
        if turn.content:
            lines.append(Text("assistant  ", style="bold green") + shown(turn.content))
        if turn.error:
            lines.append(shown(f"error      {turn.error}", style="bold red"))
        for call in calls_by_turn.get(turn.turn, []):
            lines.append(shown(f"tool call  {call.tool_name}", style="cyan") + shown(f"({call.args_head})"))
            lines.extend(result_lines(call))
    return lines


def reward_lines(r: RolloutView) -> list[Text]:
    """The reward line of a finished rollout (nothing while it runs)."""
    if r.status == "running":
        return []
    reward = "–" if r.reward is None else f"{r.reward:.3f}"
    return [Text(f"\n★ reward {reward}" + ("" if r.finished_naturally else " (did not finish)"), style="bold magenta")]


def _brief_result(call: ToolCallView) -> list[Text]:
    if call.status == "running":
        return [Text("result     … running", style="cyan")]
    if call.status == "error":
        return [shown(f"result     ✖ {call.error_kind or 'error'}: {call.error}", style="bold red")]
    return [Text(f"result     ({duration(call.duration_s)}) ", style="green") + shown(call.result_head)]
