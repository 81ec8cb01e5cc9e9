"""Toolset distributions: per-group random toolset selection for training.

Each toolset carries an *independent* inclusion chance in percent (they are
not shares of 100). ``sample_toolsets_from_distribution`` never returns an
empty list: if nothing was drawn, the highest-probability valid toolset is used.

Note on ``terminal_tasks``: upstream's comments described different numbers
than the values the code used. We keep the values (they are what trained
runs actually sampled) and describe them accurately here.
"""

from __future__ import annotations

import copy
import logging
import random
from typing import Any

from environments.toolsets import validate_toolset

logger = logging.getLogger(__name__)

_ALL_SEVEN = ["web", "vision", "image_gen", "terminal", "file", "moa", "browser"]

DISTRIBUTIONS: dict[str, dict[str, Any]] = {
    "default": {"description": "Every toolset, always", "toolsets": {t: 100 for t in _ALL_SEVEN}},
    "image_gen": {
        "description": "Image generation and analysis first",
        "toolsets": {"image_gen": 90, "vision": 90, "web": 55, "terminal": 45, "moa": 10},
    },
    "research": {
        "description": "Web research with browsing",
        "toolsets": {"web": 90, "browser": 70, "vision": 50, "moa": 40, "terminal": 10},
    },
    "science": {
        "description": "Scientific work: web, terminal and files",
        "toolsets": {"web": 94, "terminal": 94, "file": 94, "vision": 65, "browser": 50, "image_gen": 15, "moa": 10},
    },
    "development": {
        "description": "Software development",
        "toolsets": {"terminal": 80, "file": 80, "moa": 60, "web": 30, "vision": 10},
    },
    "safe": {
        "description": "No terminal or file access",
        "toolsets": {"web": 80, "browser": 70, "vision": 60, "image_gen": 60, "moa": 50},
    },
    "balanced": {"description": "Every toolset at even odds", "toolsets": {t: 50 for t in _ALL_SEVEN}},
    "minimal": {"description": "Web only", "toolsets": {"web": 100}},
    "terminal_only": {"description": "Terminal and files only", "toolsets": {"terminal": 100, "file": 100}},
    "terminal_web": {"description": "Terminal, files and web", "toolsets": {"terminal": 100, "file": 100, "web": 100}},
    "creative": {"description": "Image generation and vision", "toolsets": {"image_gen": 90, "vision": 90, "web": 30}},
    "reasoning": {"description": "Mixture of agents first", "toolsets": {"moa": 90, "web": 30, "terminal": 20}},
    "browser_use": {"description": "Browser automation", "toolsets": {"browser": 100, "web": 80, "vision": 70}},
    "browser_only": {"description": "Browser only", "toolsets": {"browser": 100}},
    "browser_tasks": {
        "description": "Browser tasks with occasional vision/terminal",
        "toolsets": {"browser": 97, "vision": 12, "terminal": 15},
    },
    "terminal_tasks": {
        "description": "Terminal tasks: terminal, file and web almost always (97%), browser 75%, vision 50%, image_gen 10%",
        "toolsets": {"terminal": 97, "file": 97, "web": 97, "browser": 75, "vision": 50, "image_gen": 10},
    },
    "mixed_tasks": {
        "description": "Browser, terminal and file mostly, some web/vision/image_gen",
        "toolsets": {"browser": 92, "terminal": 92, "file": 92, "web": 35, "vision": 15, "image_gen": 15},
    },
}


def get_distribution(name: str) -> dict[str, Any] | None:
    entry = DISTRIBUTIONS.get(name)
    return copy.deepcopy(entry) if entry is not None else None


def list_distributions() -> dict[str, dict[str, Any]]:
    """A deep copy: callers may mutate it freely."""
    return copy.deepcopy(DISTRIBUTIONS)


def validate_distribution(name: str) -> bool:
    return name in DISTRIBUTIONS


def sample_toolsets_from_distribution(name: str, rng: random.Random | None = None) -> list[str]:
    """Draw each toolset independently with its percent chance; never empty.

    Pass a seeded ``random.Random`` for reproducible draws."""
    entry = DISTRIBUTIONS.get(name)
    if entry is None:
        raise ValueError(f"Unknown distribution: {name!r}; expected one of {', '.join(sorted(DISTRIBUTIONS))}")
    draw = rng.random if rng is not None else random.random
    chosen: list[str] = []
    valid: dict[str, float] = {}
    for toolset, percent in entry["toolsets"].items():
        if not validate_toolset(toolset):
            logger.warning("distribution %s: skipping unknown toolset %r", name, toolset)
            continue
        valid[toolset] = percent
        if draw() * 100 < percent:
            chosen.append(toolset)
    if not chosen and valid:
        chosen.append(max(valid, key=lambda t: valid[t]))  # first of the highest on ties
    return chosen


def print_distribution_info(name: str) -> None:
    entry = DISTRIBUTIONS.get(name)
    if entry is None:
        print(f"Unknown distribution: {name}")
        return
    print(f"{name}: {entry['description']}")
    for toolset, percent in sorted(entry["toolsets"].items(), key=lambda kv: -kv[1]):
        print(f"  {toolset:<12} {percent:>5}%")
