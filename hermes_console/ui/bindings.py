"""Every console control as a Binding with a stable id (Posting-style).

The id is what a keymap file rebinds; the help screen and the command palette
list these same specs, so the three can never drift apart.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from textual.binding import Binding, BindingType


@dataclass(frozen=True)
class ControlSpec:
    id: str
    key: str
    action: str
    label: str  # short footer text
    description: str  # help screen / command palette text
    scope: str  # app | main | sandbox | drilldown | rollouts | transcript — where the binding lives
    show: bool = True
    priority: bool = False


CONTROLS: list[ControlSpec] = [
    # ---- app-wide: operator commands and global navigation
    ControlSpec(
        "pause",
        "p",
        "toggle_pause",
        "Pause",
        "Pause / resume intake (in-flight groups drain); in a replay: pause / play",
        "app",
    ),
    ControlSpec("cancel-in-flight", "c", "cancel_in_flight", "Cancel", "Cancel every in-flight group (confirm)", "app"),
    ControlSpec("switch-phase", "P", "switch_phase", "Phase", "Switch Phase 1 ↔ 2 after draining (confirm)", "app"),
    ControlSpec("evaluate", "e", "evaluate", "Eval", "Run an evaluation now; results open when done", "app"),
    ControlSpec("help", "question_mark", "help", "Help", "Show every key binding", "app"),
    ControlSpec(
        "command-palette",
        "ctrl+p",
        "command_palette",
        "Palette",
        "Command palette (every action)",
        "app",
        show=False,
        priority=True,
    ),
    ControlSpec("quit", "q", "request_quit", "Quit", "Quit (confirm while rollouts are live)", "app"),
    # ---- main screen: panels and the focused row
    ControlSpec("drill-down", "enter", "drill_down", "Open", "Open the focused row (rollout / sandbox)", "main"),
    ControlSpec("kill-sandbox", "k", "kill_sandbox", "Kill", "Kill the focused sandbox (confirm)", "main"),
    ControlSpec("extend-sandbox", "x", "extend_sandbox", "Extend", "Extend the focused sandbox's lifetime", "main"),
    ControlSpec("filter", "slash", "filter", "Filter", "Filter turns and tool calls by group or rollout", "main"),
    ControlSpec("follow", "f,end", "follow", "Follow", "Follow the turns stream again (tail)", "main"),
    ControlSpec(
        "toggle-reasoning", "r", "toggle_reasoning", "Reasoning", "Expand / collapse reasoning in the stream", "main"
    ),
    ControlSpec("errors-only", "o", "toggle_errors_only", "Errors", "Tool table: errors only on / off", "main"),
    ControlSpec(
        "table-sort",
        "s",
        "sort_table",
        "Sort",
        "Sort the focused table by the next column (or click a header)",
        "main",
        show=False,
    ),
    ControlSpec(
        "table-sort-reverse",
        "S",
        "reverse_table_sort",
        "Reverse",
        "Reverse the focused table's sort",
        "main",
        show=False,
    ),
    ControlSpec("next-panel", "tab", "focus_next_panel", "Next", "Move to the next panel", "main", show=False),
    ControlSpec(
        "previous-panel", "shift+tab", "focus_previous_panel", "Prev", "Move to the previous panel", "main", show=False
    ),
    # ---- drill-down screens
    ControlSpec("back", "escape", "back", "Back", "Back to the previous screen", "drilldown"),
    ControlSpec("kill-sandbox", "k", "kill_sandbox", "Kill", "Kill this sandbox (confirm)", "sandbox"),
    ControlSpec("extend-sandbox", "x", "extend_sandbox", "Extend", "Extend this sandbox's lifetime", "sandbox"),
    ControlSpec(
        "run-diagnostic", "d", "focus_diagnostic", "Diagnose", "Run a diagnostic command in this sandbox", "sandbox"
    ),
    ControlSpec(
        "refresh-details", "R", "refresh_details", "Reload", "Reload process tree and recent commands", "sandbox"
    ),
    ControlSpec(
        "extend-command",
        "X",
        "extend_command",
        "More time",
        "Give the running command more time (its timeout)",
        "sandbox",
    ),
    ControlSpec(
        "sandbox-transcript",
        "t",
        "open_transcript",
        "Transcript",
        "Open the transcript of this sandbox's rollout",
        "sandbox",
    ),
    # ---- history, transcripts, run insight
    ControlSpec(
        "closed-sandboxes",
        "C",
        "closed_sandboxes",
        "Closed",
        "Recently closed sandboxes and their last commands",
        "main",
        show=False,
    ),
    ControlSpec(
        "history", "h", "history", "History", "Finished rollouts (the focused group's, or the histogram bin's)", "main"
    ),
    ControlSpec("insight", "w", "insight", "Time", "Where the time goes, errors by kind, graphs", "app"),
    ControlSpec(
        "eval-history",
        "V",
        "eval_history",
        "Evals",
        "Every evaluation of this session (scores over training)",
        "app",
        show=False,
    ),
    ControlSpec(
        "config",
        "d",
        "config",
        "Config",
        "The resolved env / openai / phase2 config and each value's source",
        "app",
        show=False,
    ),
    ControlSpec(
        "freeze",
        "z",
        "toggle_freeze",
        "Freeze",
        "Freeze / unfreeze the display (events keep being read)",
        "app",
        show=False,
    ),
    ControlSpec(
        "replay-back",
        "left_square_bracket",
        "replay_back",
        "Back 10%",
        "Replay: seek back 10% of the log",
        "app",
        show=False,
    ),
    ControlSpec(
        "replay-forward",
        "right_square_bracket",
        "replay_forward",
        "Fwd 10%",
        "Replay: seek forward 10% of the log",
        "app",
        show=False,
    ),
    ControlSpec("replay-slower", "minus", "replay_slower", "Slower", "Replay: half the speed", "app", show=False),
    ControlSpec("replay-faster", "plus", "replay_faster", "Faster", "Replay: double the speed", "app", show=False),
    ControlSpec("open-rollout", "enter", "open_rollout", "Open", "Open the rollout's transcript", "rollouts"),
    ControlSpec(
        "filter-rollouts",
        "slash",
        "filter_rollouts",
        "Filter",
        "Filter by words over task / item / ids / errors",
        "rollouts",
    ),
    ControlSpec("quick-zero", "0", "quick_zero", "Score 0", "Only rollouts that scored 0 (again: all)", "rollouts"),
    ControlSpec("quick-errors", "E", "quick_errors", "Errors", "Only rollouts with errors (again: all)", "rollouts"),
    ControlSpec(
        "quick-dropped",
        "D",
        "quick_dropped",
        "Dropped",
        "Only rollouts of dropped / failed groups (again: all)",
        "rollouts",
    ),
    ControlSpec("clear-filters", "a", "clear_filters", "All", "Clear every filter", "rollouts"),
    ControlSpec("sort-next", "s", "sort_next", "Sort", "Sort by the next column (or click a header)", "rollouts"),
    ControlSpec("sort-reverse", "S", "sort_reverse", "Reverse", "Reverse the sort order", "rollouts"),
    ControlSpec(
        "filter-config", "slash", "filter_config", "Filter", "Filter the config by key / value / source", "config"
    ),
    ControlSpec(
        "sort-config", "s", "sort_config", "Sort", "Sort the config (again: reverse, then next column)", "config"
    ),
    ControlSpec("next-sibling", "n", "next_sibling", "Next sib", "Next rollout of the same group", "transcript"),
    ControlSpec(
        "previous-sibling", "N", "previous_sibling", "Prev sib", "Previous rollout of the same group", "transcript"
    ),
    ControlSpec("toggle-results", "t", "toggle_results", "Results", "Expand / collapse tool results", "transcript"),
    ControlSpec(
        "toggle-diff", "v", "toggle_diff", "Diff", "Diff against the best sibling (again: transcript)", "transcript"
    ),
]


class ScopedBindings(list[BindingType]):
    """A screen's BINDINGS, remembering which CONTROLS scope they came from."""

    def __init__(self, scope: str, bindings: Iterable[BindingType]) -> None:
        super().__init__(bindings)
        self.scope = scope


def bindings_for(scope: str) -> ScopedBindings:
    return ScopedBindings(
        scope,
        (
            Binding(
                spec.key,
                spec.action,
                spec.label,
                show=spec.show,
                priority=spec.priority,
                id=spec.id,
                tooltip=spec.description,
            )
            for spec in CONTROLS
            if spec.scope == scope
        ),
    )


def scopes_of(node: Any) -> set[str]:
    """The CONTROLS scopes a screen (or the app) binds, its base classes' included: what the
    command palette offers there, found without importing any screen class."""
    scopes: set[str] = set()
    for cls in type(node).__mro__:
        scope = getattr(vars(cls).get("BINDINGS"), "scope", None)
        if scope is not None:
            scopes.add(scope)
    return scopes


def binding_ids() -> list[str]:
    return sorted({spec.id for spec in CONTROLS})


def unique_controls() -> Iterable[ControlSpec]:
    """One spec per id (the sandbox screen repeats main-screen ids)."""
    seen: dict[str, ControlSpec] = {}
    for spec in CONTROLS:
        seen.setdefault(spec.id, spec)
    return seen.values()
