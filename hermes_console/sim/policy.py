"""The scripted agent policy: plays terminal tasks turn by turn, deterministically.

``respond(messages, tools, sample=k)`` finds the task's script from the first
user message, replays the script over the conversation so far (one step per
earlier assistant turn) and returns the next :class:`Action`. Randomness comes
only from hashes of (seed, task text, turn, sample), so the same conversation
always gets the same reply; ``sample`` distinguishes the members of a group.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from hermes_console.sim.actions import Action, StepContext, result_text
from hermes_console.sim.rng import unit
from hermes_console.sim.scripts import Step, TaskScript, build_steps, find_script, generic_steps, no_tools_answer

_DONE = "The task is complete."
# How an episode opens varies by sample, as a sampled model's would. Later turns
# hash the opening back in, so group members whose histories differ (fresh call
# ids, timestamps in tool output) still take independent decisions.
OPENERS: tuple[str, ...] = (
    "Let me look at the workspace first.",
    "First, I'll check what is in the directory.",
    "I'll start by inspecting the files.",
    "Let me see what I'm working with.",
    "Before changing anything, I'll look around.",
    "Let me inspect the current state first.",
    "I'll take a quick look at the files.",
    "Checking the workspace before I start.",
    "Let me get my bearings.",
    "Starting with a look at the directory.",
    "I'll look at the relevant files first.",
    "First things first: what's here?",
    "Let me examine the workspace.",
    "I'll begin by listing and reading the inputs.",
    "Let me check the inputs before acting.",
    "A quick survey of the files first.",
)


def message_text(content: Any) -> str:
    """OpenAI content can be a string, None, or a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def offered_tool_names(tools: Iterable[dict[str, Any]] | None) -> frozenset[str]:
    names = set()
    for t in tools or ():
        fn = t.get("function", t) if isinstance(t, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            names.add(fn["name"])
    return frozenset(names)


@lru_cache(maxsize=4096)
def _script_for(task_text: str) -> TaskScript | None:
    return find_script(task_text)


@lru_cache(maxsize=256)
def _steps_for(script: TaskScript | None) -> tuple[Step, ...]:
    return tuple(build_steps(script) if script is not None else generic_steps())


class ScriptedPolicy:
    def __init__(self, seed: int = 0, solve_rate: float = 0.6) -> None:
        self.seed = seed
        self.solve_rate = solve_rate

    def respond(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        sample: int = 0,
        offered: frozenset[str] | None = None,
    ) -> Action:
        task_text, turn, results, episode = _read_conversation(messages)
        script = _script_for(task_text)
        if offered is None:
            offered = offered_tool_names(tools)
        if not offered:
            return no_tools_answer(script, task_text) if turn == 0 else Action(content=_DONE)

        def fate_at(step_turn: int) -> Any:
            return lambda label: unit(self.seed, task_text, label, step_turn, episode, sample)

        emitted = 0
        for step in _steps_for(script):
            ctx = StepContext(
                offered=offered,
                results=results[:emitted],
                turn=emitted,
                current=emitted == turn,
                fate=fate_at(emitted),
                solve_rate=self.solve_rate,
                task_text=task_text,
            )
            action = step(ctx)
            if action is None:
                continue  # not possible with the offered tools / nothing to act on
            if emitted == turn:
                if turn == 0 and action.tool_calls:
                    pick = int(unit(self.seed, task_text, "opener", sample) * len(OPENERS))
                    action.content = OPENERS[pick]
                return action
            if action.final:
                break
            emitted += 1
        # The conversation went on past the script's end (e.g. the env asked again).
        return Action(content=_DONE)


def _read_conversation(messages: list[dict[str, Any]]) -> tuple[str, int, list[list[str]], str]:
    """(first user text, number of assistant turns after it, tool results per assistant turn,
    the episode's identity: its first assistant reply's text and first call id)."""
    task_text = ""
    started = False
    results: list[list[str]] = []
    episode = ""
    for msg in messages:
        role = msg.get("role")
        if not started:
            if role == "user":
                task_text = message_text(msg.get("content")).strip()
                started = True
            continue
        if role == "assistant":
            if not results:
                calls = msg.get("tool_calls") or [{}]
                first_id = calls[0].get("id", "") if isinstance(calls[0], dict) else ""
                episode = f"{message_text(msg.get('content'))}\x1f{first_id}"
            results.append([])
        elif role == "tool" and results:
            results[-1].append(result_text(message_text(msg.get("content"))))
    return task_text, len(results), results, episode
