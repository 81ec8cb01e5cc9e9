"""Small pure formatting helpers shared by the widgets (no Textual imports)."""

from __future__ import annotations

import math
import time

from rich.text import Text

WARN_FRACTION = 0.75
ERROR_FRACTION = 0.90


def duration(seconds: float | None) -> str:
    """Compact human duration: 850ms, 4.2s, 3m05s, 2h04m."""
    if seconds is None or math.isnan(seconds):
        return "–"
    if seconds < 0:
        seconds = 0.0
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s" if seconds != int(seconds) else f"{int(seconds)}s"
    if seconds < 3600:
        m, s = divmod(int(seconds), 60)
        return f"{m}m{s:02d}s"
    h, m = divmod(int(seconds) // 60, 60)
    return f"{h}h{m:02d}m"


def age(seconds: float | None) -> str:
    """Like :func:`duration` but in whole seconds: ages tick once a second, not every frame."""
    if seconds is None or math.isnan(seconds):
        return "–"
    return duration(float(int(max(0.0, seconds)))) if seconds >= 1 else "0s"


def clock(ts: float) -> str:
    """HH:MM:SS in UTC, so snapshots do not depend on the machine's timezone."""
    return time.strftime("%H:%M:%S", time.gmtime(ts))


def number(value: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _visible_table() -> dict:
    table = {c: chr(0x2400 + c) for c in range(32) if chr(c) not in "\n\t"}  # C0 -> ␀..␟ (ESC -> ␛)
    table[0x7F] = "␡"
    table.update({c: f"\\x{c:02x}" for c in range(0x80, 0xA0)})  # C1 (0x9b is a one-byte CSI)
    # bidi overrides/isolates reorder what the operator reads
    table.update({c: f"\\u{c:04x}" for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))})
    return table


_VISIBLE = _visible_table()


def visible(text: str) -> str:
    """Model- or env-supplied text as inert characters: every control character (ESC of
    CSI/OSC sequences, BEL, CR, C1, bidi overrides) becomes a visible symbol, so nothing
    reaches the operator's terminal as a command (title change, OSC 52 clipboard...).
    Newlines and tabs are kept. Every string from a rollout or sandbox goes through here
    (``head`` and ``shown`` call it)."""
    return text.translate(_VISIBLE) if isinstance(text, str) else visible(str(text))


def shown(text: object, style: str = "") -> Text:
    """Rich Text of untrusted text, control characters made visible (never markup)."""
    return Text(visible(text if isinstance(text, str) else str(text)), style=style)


def head(text: str, width: int) -> str:
    """One line, at most ``width`` characters, control characters made visible."""
    flat = " ".join(visible(text).split())
    return flat if len(flat) <= width else flat[: max(0, width - 1)] + "…"


def level_style(fraction: float) -> str:
    """Colour for a used-up fraction of some budget (timeouts, lifetimes)."""
    if fraction >= ERROR_FRACTION:
        return "bold red"
    if fraction >= WARN_FRACTION:
        return "yellow"
    return ""


def budget(elapsed: float, limit: float | None) -> Text:
    """``elapsed / limit`` coloured by how much of the limit is used."""
    if not limit:
        return Text(age(elapsed))
    return Text(f"{age(elapsed)} / {duration(limit)}", style=level_style(elapsed / limit))


def bar(fraction: float, width: int = 10) -> str:
    """A text bar with eighth-block resolution; ``fraction`` is clamped to [0, 1]."""
    fraction = min(1.0, max(0.0, fraction))
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    partial = " ▏▎▍▌▋▊▉"[part] if part else ""
    return ("█" * full + partial).ljust(width, "░")[:width]
