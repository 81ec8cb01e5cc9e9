"""Transcript: one rollout as the model saw it, worth debugging with.

The real system and user prompt, every turn with its tool calls and results
(`t` expands results to what the model received), the reward with the env's
explanation (``ctx.reward_details``), where the rollout's time went, `n`/`N` to
step through its group's siblings and `v` for a diff against the best sibling.
"""

from __future__ import annotations

import difflib

from rich.text import Text

from hermes_console.runtime.history import RolloutRecord
from hermes_console.runtime.state import ConsoleState
from hermes_console.runtime.views import RolloutView, ToolCallView
from hermes_console.ui.bindings import bindings_for
from hermes_console.ui.format import duration, shown, visible
from hermes_console.ui.screens.rollout import RolloutScreen, reward_lines, turn_lines


class TranscriptScreen(RolloutScreen):
    BINDINGS = bindings_for("transcript")

    def __init__(self, rollout_id: str) -> None:
        super().__init__(rollout_id)
        self.expanded = False  # tool results in full
        self.diffing = False  # diff against the best sibling instead of the transcript

    def on_resize(self) -> None:
        # Lines written before the first layout wrap at RichLog's minimum width: write them again.
        self._signature = None
        if self.ready:
            self.call_after_refresh(lambda: self.refresh_view(self.console.state, self.console.now()))

    def refresh_view(self, state: ConsoleState, now: float) -> None:
        # Labels (g0033-r2) are accepted wherever an id is.
        self.rollout_id = state.history.resolve(self.rollout_id) or self.rollout_id
        rollout = state.rollouts.get(self.rollout_id)
        # Redrawn only when something it shows changed: its own events, its group's fate, its
        # siblings' scores (not on every event of the run: the operator may be scrolling).
        record = state.history.records.get(self.rollout_id)
        siblings = tuple(
            getattr(state.history.records.get(sid), "score", None) for sid in state.history.siblings(self.rollout_id)
        )
        signature = (
            self._signature_of(rollout, now),
            self.expanded,
            self.diffing,
            (record.outcome, record.drop_reason) if record else None,
            siblings,
        )
        if signature == self._signature:
            return
        self._signature = signature
        header = self.query_one("#rollout-header")
        log = self.query_one("#transcript")
        label = state.history.label_of(self.rollout_id)
        log.border_title = f"Transcript {label}" + ("  (diff against the best sibling)" if self.diffing else "")
        if rollout is None:
            header.update(self._gone(label, record))  # type: ignore[attr-defined]
            log.clear()  # type: ignore[attr-defined]
            return
        text = self._header(rollout, state, now)
        text.append_text(self._extra_header(rollout, record, state))
        header.update(text)  # type: ignore[attr-defined]
        log.clear()  # type: ignore[attr-defined]
        lines = self._diff(rollout, state) if self.diffing else self._lines(rollout, state, self.expanded)
        # Wrap at the panel's width (RichLog would measure against the console's, 80 when headless).
        width = log.scrollable_content_region.width or None
        for line in lines:
            log.write(line, width=width)  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ header

    @staticmethod
    def _gone(label: str, record: RolloutRecord | None) -> Text:
        text = Text(f"Rollout {label} is no longer in memory", style="yellow")
        if record is not None:
            score = "–" if record.score is None else f"{record.score:.3f}"
            text.append(f"\nscore {score}   turns {record.turns}   {record.outcome} {record.drop_reason}", style="")
        text.append(
            "\nOn disk in the run dir: rollouts.jsonl (its line), groups.jsonl / dropped.jsonl "
            "(its group's sequences).",
            style="dim",
        )
        return text

    @staticmethod
    def _extra_header(r: RolloutView, record: RolloutRecord | None, state: ConsoleState) -> Text:
        text = Text()
        siblings = state.history.siblings(r.rollout_id)
        if len(siblings) > 1:
            text.append("\nsiblings ", style="dim")
            for sid in siblings:
                sib = state.history.records.get(sid)
                score = "…" if sib is None or sib.score is None else f"{sib.score:.2f}"
                style = "bold reverse" if sid == r.rollout_id else ""
                text.append(f"{state.history.label_of(sid)} {score}", style=style)
                text.append("  ")
            text.append("(n / N: next / previous, v: diff against the best)", style="dim")
        text.append_text(_data_health(r))
        if record is not None:
            text.append("\ntime ", style="dim")
            text.append(
                f"generation {duration(record.generation_s)} ({record.llm_calls} calls)   "
                f"tools {duration(record.tool_s)}   reward {duration(record.reward_s)}   "
                f"other {duration(record.other_s)}   queue wait {duration(record.queue_s)}"
            )
            if record.generated_tokens and record.generation_s > 0:
                text.append(f"   {record.tokens_per_s:.0f} tok/s")
            outcome_style = {"kept": "green", "dropped": "yellow", "failed": "red"}.get(record.outcome, "dim")
            text.append("   group ", style="dim")
            text.append(f"{record.outcome} {record.drop_reason}".strip(), style=outcome_style)
            if record.reward_details:
                text.append("\nreward details ", style="dim")
                text.append(
                    "   ".join(f"{k}: {visible(str(v))}" for k, v in record.reward_details.items()), style="magenta"
                )
        return text

    # ------------------------------------------------------------------ body

    @staticmethod
    def _lines(r: RolloutView, state: ConsoleState, expanded: bool) -> list[Text]:
        lines: list[Text] = []
        if r.system_prompt:
            lines.append(Text("system     ", style="bold dim") + shown(r.system_prompt, style="dim"))
        else:
            group = state.groups.get(r.group_id)
            toolsets = ", ".join(group.toolsets) if group and group.toolsets else "–"
            lines.append(Text(f"system     (not recorded) toolsets: {toolsets}", style="dim"))
        lines.append(Text("user       ", style="bold blue") + shown(r.prompt or r.item_summary or "(not recorded)"))
        lines.extend(turn_lines(r, lambda call: _result_lines(call, expanded)))
        lines.extend(reward_lines(r))
        if r.status != "running":
            if r.reward_error:
                lines.append(shown(f"  compute_reward raised: {r.reward_error}", style="bold red"))
        return lines

    def _diff(self, r: RolloutView, state: ConsoleState) -> list[Text]:
        best = self._best_sibling(r.rollout_id, state)
        if best is None:
            return [Text("No finished sibling in memory to compare with.", style="yellow")]
        other = state.rollouts[best]
        mine = [line.plain for line in self._lines(r, state, True)]
        theirs = [line.plain for line in self._lines(other, state, True)]
        me, them = state.history.label_of(r.rollout_id), state.history.label_of(best)
        out: list[Text] = [
            Text(f"--- {them} (best sibling, reward {other.reward:.3f})", style="bold green"),
            Text(f"+++ {me} (this rollout, reward {'–' if r.reward is None else f'{r.reward:.3f}'})", style="bold red"),
        ]
        body = list(difflib.unified_diff(theirs, mine, lineterm="", n=2))[2:]
        if not body:
            out.append(Text("(identical transcripts)", style="dim"))
        for line in body:
            style = {"+": "red", "-": "green", "@": "cyan"}.get(line[:1], "dim")
            out.append(Text(visible(line), style=style))
        return out

    @staticmethod
    def _best_sibling(rollout_id: str, state: ConsoleState) -> str | None:
        """The highest-reward finished sibling still in memory (not this rollout)."""
        candidates: list[tuple[float, str]] = []
        for sid in state.history.siblings(rollout_id):
            sib = state.rollouts.get(sid)
            if sid != rollout_id and sib is not None and sib.reward is not None:
                candidates.append((sib.reward, sid))
        return max(candidates)[1] if candidates else None

    # ------------------------------------------------------------------ actions

    def _step_sibling(self, step: int) -> None:
        state = self.console.state
        siblings = state.history.siblings(self.rollout_id)
        if len(siblings) < 2:
            self.app.notify("This rollout has no siblings in memory.", severity="warning")
            return
        index = siblings.index(self.rollout_id) if self.rollout_id in siblings else 0
        self.rollout_id = siblings[(index + step) % len(siblings)]
        self._signature = None
        self.refresh_view(state, self.console.now())

    def action_next_sibling(self) -> None:
        self._step_sibling(+1)

    def action_previous_sibling(self) -> None:
        self._step_sibling(-1)

    def action_toggle_results(self) -> None:
        self.expanded = not self.expanded
        self.refresh_view(self.console.state, self.console.now())

    def action_toggle_diff(self) -> None:
        self.diffing = not self.diffing
        self.refresh_view(self.console.state, self.console.now())


def _data_health(r: RolloutView) -> Text:
    """What the trainer gets from this rollout: trained vs masked tokens, and the data checks
    the env ran on its tokens/masks/logprobs (environments.data_health)."""
    text = Text()
    if r.status == "running" or not r.token_count:
        return text
    masked = r.token_count - r.trainable_tokens
    share = r.trainable_tokens / r.token_count
    text.append("\ndata ", style="dim")
    text.append(
        f"{r.trainable_tokens} trained ({share:.0%}, the model's own turns) · {masked} masked: "
        f"prompt {r.prompt_tokens}, tool results & role headers {max(0, masked - r.prompt_tokens)}"
    )
    problems = list(r.data_problems)
    if not r.trainable_tokens and not any(p.startswith("nothing_trained") for p in problems):
        problems.append("nothing_trained: every position is masked")  # also for logs from before the checks
    if not problems:
        text.append("   checks ok" if r.prompt_tokens else "   (no data checks in this log)", style="green")
    for problem in problems:
        text.append(f"\n  ✖ {visible(problem)}", style="bold red")
    return text


def _result_lines(call: ToolCallView, expanded: bool) -> list[Text]:
    if call.status == "running":
        return [Text("result     … running", style="cyan")]
    if call.status == "cancelled":
        return [Text("result     (cancelled)", style="dim")]
    took = duration(call.duration_s)
    full = call.result_text or call.result_head
    if call.status == "error":
        first = shown(f"result     ✖ {call.error_kind or 'error'} ({took}): {call.error}", style="bold red")
    else:
        first = Text(f"result     ({took}) ", style="green") + shown(call.result_head if not expanded else "")
    if not expanded:
        more = len(full) - len(call.result_head)
        if more > 0:
            first.append(f"  [+{more} chars, t: expand]", style="dim")
        return [first]
    lines = [first]
    for part in full.splitlines() or [""]:
        lines.append(Text("           ") + shown(part))
    return lines
