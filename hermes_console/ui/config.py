"""UI settings: the keymap file (binding id → keys) and a few tunables.

Default keymap location is ``~/.config/hermes-console/keys.yaml``; ``--keys FILE``
overrides it. A bad file never half-applies: every problem is collected and
reported in one :class:`KeymapError` naming the file, the entry and what was expected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from hermes_console.ui.bindings import binding_ids

DEFAULT_KEYS_FILE = Path("~/.config/hermes-console/keys.yaml")

# A key is a Textual key name ("f", "P", "ctrl+p", "question_mark", "f5")
# or one printable character ("?", "/"). Several keys: comma-separated.
_KEY_NAME = re.compile(r"^(?:(?:ctrl|shift|alt|meta|super)\+)*[A-Za-z0-9_]+$")


class KeymapError(ValueError):
    """The keymap file is unreadable or has invalid entries."""


@dataclass
class ConsoleConfig:
    keymap: dict[str, str] = field(default_factory=dict)
    tick_hz: float = 4.0  # how often panels are redrawn (4 Hz: half the redraw CPU of 8 Hz, see BENCHMARKS P1)
    # Events are drained more often than panels are drawn, each step applying about
    # drain_budget_ms worth of events: drain_hz normally, flood_drain_hz while a backlog waits
    # (flood_drain_hz x budget: 160 ms/s, ~50k events/s, keeps the queue bounded in a flood).
    # Short steps keep keys responsive, and a step shorter than the interpreter's switch
    # interval (5 ms) is rarely cut by the runtime's thread taking the GIL: 8 ms steps at
    # 20 Hz took 3-10x their CPU in wall time in P3's flood. The fast rhythm only runs in a
    # flood: at 80 Hz all the time its timer alone cost ~1.5 % of a core in P1 (BENCHMARKS).
    drain_hz: float = 20.0
    flood_drain_hz: float = 80.0
    drain_budget_ms: float = 2.0
    max_events_per_tick: int = 50_000  # hard cap per drain step
    # CPU budget (ui/budget.py): while the env is busy the UI thread takes at most this share
    # of one core, spacing redraws and drains out up to these intervals; 0 turns it off.
    # 2 %: a CPU-bound env hosted in-process loses about what the UI takes from its GIL, and
    # P1's 0.97 leaves 3 % for the UI and everything else the console adds (BENCHMARKS P1).
    ui_cpu_share: float = 0.02
    max_redraw_interval_s: float = 2.0
    max_drain_interval_s: float = 0.5
    throttled_panels_per_redraw: int = 2  # while throttled, one tick draws at most this many panels
    # The process entry point tuned the garbage collector (runtime/gc_tuning.py): freeze again once
    # the runtime has loaded the env (the status leaves "loading"), so its objects leave every
    # later full collection too.
    freeze_gc_after_start: bool = False
    extend_minutes: float = 5.0
    drain_deadline_s: float = 10.0
    keys_file: Path | None = None


def _valid_key(key: str) -> bool:
    return bool(_KEY_NAME.match(key)) or (len(key) == 1 and key.isprintable() and not key.isspace())


def parse_keymap(data: object, source: str = "keymap") -> dict[str, str]:
    """Validate a mapping of binding id → key string(s); raise KeymapError listing every problem."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise KeymapError(f"{source}: expected a mapping of binding id to key, got {type(data).__name__}")
    known = set(binding_ids())
    problems: list[str] = []
    keymap: dict[str, str] = {}
    for raw_id, raw_keys in data.items():
        binding_id = str(raw_id)
        if binding_id not in known:
            problems.append(f"unknown binding id {binding_id!r} (valid ids: {', '.join(sorted(known))})")
            continue
        if isinstance(raw_keys, list):
            raw_keys = ",".join(str(k) for k in raw_keys)
        if not isinstance(raw_keys, str) or not raw_keys.strip():
            problems.append(f"{binding_id}: expected a key such as 'p' or 'ctrl+r', got {raw_keys!r}")
            continue
        keys = [k.strip() for k in raw_keys.split(",")]
        bad = [k for k in keys if not _valid_key(k)]
        if bad:
            problems.append(f"{binding_id}: invalid key {bad[0]!r} (expected e.g. 'p', 'P', 'ctrl+r', 'f5', '?')")
            continue
        keymap[binding_id] = ",".join(keys)
    if problems:
        raise KeymapError(f"{source}: " + "; ".join(problems))
    return keymap


def load_keymap(path: Path) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise KeymapError(f"{path}: cannot read keymap file ({exc.strerror or exc})") from exc
    import yaml  # only when there is a keymap file: off the way to the first frame

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise KeymapError(f"{path}: not valid YAML ({exc})") from exc
    return parse_keymap(data, str(path))


def load_console_config(keys_file: Path | None = None) -> ConsoleConfig:
    """Read the keymap from ``keys_file`` (must exist) or the default location (optional)."""
    if keys_file is not None:
        path = Path(keys_file).expanduser()
        return ConsoleConfig(keymap=load_keymap(path), keys_file=path)
    default = DEFAULT_KEYS_FILE.expanduser()
    if default.is_file():
        return ConsoleConfig(keymap=load_keymap(default), keys_file=default)
    return ConsoleConfig()
