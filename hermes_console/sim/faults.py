"""Fault injection by rate, decided by hashes (reproducible per seed)."""

from __future__ import annotations

import json

from hermes_console.sim.actions import Action, SimToolCall
from hermes_console.sim.config import validate_fault_rates
from hermes_console.sim.rng import rng, unit

# Faults that change one choice's content rather than the whole response.
CONTENT_FAULTS: tuple[str, ...] = ("garbage_text", "malformed_tool_json", "unknown_tool")

_WORDS = (
    "flurb",
    "quantum",
    "zz",
    "lorem",
    "ipsum",
    "#@!",
    "banana",
    "0x7f",
    "::",
    "ntdll",
    "~~~",
    "meh",
    "sudo",
    "xyzzy",
    "{{",
    "]]",
    "tokenize",
    "grommet",
    "42",
    "wibble",
)


class FaultInjector:
    def __init__(self, seed: int, rates: dict[str, float] | None = None) -> None:
        self.seed = seed
        self._rates: dict[str, float] = validate_fault_rates(rates or {})

    @property
    def rates(self) -> dict[str, float]:
        return dict(self._rates)

    def set(self, rates: dict[str, float], *, replace: bool = False) -> dict[str, float]:
        """Merge (or replace) rates; 0 removes a kind. Swapped in one assignment: safe across threads."""
        checked = validate_fault_rates(rates)
        new = {} if replace else dict(self._rates)
        new.update(checked)
        self._rates = {k: v for k, v in new.items() if v > 0}
        return self.rates

    def hit(self, kind: str, *key: object) -> bool:
        rate = self._rates.get(kind, 0.0)
        if rate <= 0.0:
            return False
        return rate >= 1.0 or unit(self.seed, "fault", kind, *key) < rate

    def content_fault(self, *key: object) -> str | None:
        for kind in CONTENT_FAULTS:
            if self.hit(kind, *key):
                return kind
        return None


def garbage_text(*key: object) -> str:
    r = rng("garbage", *key)
    return " ".join(r.choice(_WORDS) for _ in range(r.randint(6, 24)))


def apply_content_fault(kind: str, action: Action, offered: frozenset[str], *key: object) -> Action:
    """Turn a good action into the faulty one the kind describes."""
    if kind == "garbage_text":
        return Action(content=garbage_text(*key))
    calls = list(action.tool_calls) or [SimToolCall(next(iter(sorted(offered)), "terminal"), {"command": "ls"})]
    first = calls[0]
    if kind == "malformed_tool_json":
        args = first.arguments if isinstance(first.arguments, dict) else {}
        broken = json.dumps(args)[:-1] + ', "'  # unterminated: never valid JSON
        calls[0] = SimToolCall(first.name, broken)
    elif kind == "unknown_tool":
        name = "browser_navigate"
        while name in offered:
            name += "_x"
        calls[0] = SimToolCall(name, first.arguments)
    return Action(content=action.content, tool_calls=calls, reasoning=action.reasoning)
