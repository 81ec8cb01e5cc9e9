"""What the scripted policy produces, and the helpers scripts use to build it.

A script step returns an :class:`Action` (tool calls or a final answer) built
through :class:`StepContext`, which only ever uses tools the request offered
and falls back to ``terminal`` when a file tool is missing.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_LINE_NO = re.compile(r"^\s*\d+\|", re.MULTILINE)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


@dataclass
class SimToolCall:
    name: str
    arguments: dict[str, Any] | str  # a str only for the malformed-JSON fault


@dataclass
class Action:
    """One assistant turn: optional reasoning, optional text, tool calls (none = final answer)."""

    content: str | None = None
    tool_calls: list[SimToolCall] = field(default_factory=list)
    reasoning: str | None = None

    @property
    def final(self) -> bool:
        return not self.tool_calls


def result_text(raw: Any) -> str:
    """The useful text of a tool result: terminal ``output``, read_file ``content``, or the raw string."""
    text: str = raw if isinstance(raw, str) else (json.dumps(raw) if raw is not None else "")
    try:
        obj = json.loads(text)
    except ValueError:
        return text
    if isinstance(obj, dict):
        for key in ("output", "content", "stdout", "result", "error"):
            val = obj.get(key)
            if isinstance(val, str) and (val or key == "error"):
                return _LINE_NO.sub("", val) if key == "content" else val
        return text
    return text if not isinstance(obj, (int, float)) else str(obj)


def first_number(text: str) -> str | None:
    m = _NUMBER.search(text)
    return m.group(0) if m else None


@dataclass
class StepContext:
    """What a script step sees: the offered tools, earlier results, and (for the
    turn being produced) the deterministic solve decision."""

    offered: frozenset[str]
    results: list[list[str]]  # tool result texts, one list per earlier assistant turn
    turn: int  # index of the assistant turn this step would produce
    current: bool  # True only for the turn actually being answered
    fate: Callable[[str], float]  # label -> uniform [0,1), stable for (seed, task, turn, sample)
    solve_rate: float
    task_text: str

    # ---- decisions -------------------------------------------------------------
    def solved(self) -> bool:
        # Replaying an earlier turn: its exact choice no longer matters, only that it happened.
        return True if not self.current else self.fate("solve") < self.solve_rate

    def stops_early(self) -> bool:
        return self.current and self.fate("fail_mode") < 0.5

    # ---- what earlier turns returned -------------------------------------------
    def last_output(self) -> str:
        for turn in reversed(self.results):
            if turn:
                return turn[-1]
        return ""

    def all_output(self) -> str:
        return "\n".join(t for turn in self.results for t in turn)

    # ---- tool helpers (None when no offered tool can do it) --------------------
    def has(self, name: str) -> bool:
        return name in self.offered

    def shell(self, command: str) -> SimToolCall | None:
        return SimToolCall("terminal", {"command": command}) if self.has("terminal") else None

    def read(self, path: str) -> SimToolCall | None:
        if self.has("read_file"):
            return SimToolCall("read_file", {"path": path})
        return self.shell(f"cat {shlex.quote(path)}")

    def write(self, path: str, content: str) -> SimToolCall | None:
        if self.has("write_file"):
            return SimToolCall("write_file", {"path": path, "content": content})
        return self.shell(f"printf '%s' {shlex.quote(content)} > {shlex.quote(path)}")

    def patch(self, path: str, old: str, new: str, fallback_cmd: str) -> SimToolCall | None:
        if self.has("patch"):
            return SimToolCall(
                "patch", {"mode": "replace", "path": path, "old_string": old, "new_string": new, "replace_all": True}
            )
        return self.shell(fallback_cmd)

    # ---- action builders ----------------------------------------------------------
    @staticmethod
    def act(*calls: SimToolCall | None, say: str | None = None, think: str | None = None) -> Action | None:
        real = [c for c in calls if c is not None]
        if not real:
            return None  # nothing we can do with the offered tools: the step is skipped
        return Action(content=say, tool_calls=real, reasoning=think)

    @staticmethod
    def answer(text: str, think: str | None = None) -> Action:
        return Action(content=text, reasoning=think)
