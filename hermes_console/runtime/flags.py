"""Run flags (``--env.group_size 8``, ``--openai.base_url URL``): parsed, and their
values checked, before anything starts.

Kept apart from :mod:`hermes_console.runtime.config` (pydantic, the env's configs) so the
CLI can refuse a bad flag at once without importing pydantic on the way to the first frame.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from hermes_console.runtime.errors import ConfigError, UsageError, close_matches, describe_value

NAMESPACES = ("env", "openai", "phase2")


def parse_flags(flags: list[str]) -> dict[str, dict[str, str]]:
    """``["--env.group_size", "8", "--openai.model_name=m"]`` -> {"env": {...}, "openai": {...}}.

    A flag without a value (followed by another flag or nothing) means "true".
    """
    out: dict[str, dict[str, str]] = {ns: {} for ns in NAMESPACES}
    i = 0
    while i < len(flags):
        token = flags[i]
        if not token.startswith("--"):
            raise ConfigError(f"unexpected argument {token!r}; expected flags like --env.group_size 8")
        name, eq, value = token[2:].partition("=")
        ns, dot, key = name.partition(".")
        if not dot or not key:
            raise ConfigError(
                f"flag {token!r} is not namespaced; expected --env.<field>, --openai.<field> or --phase2.<field>"
            )
        if ns not in NAMESPACES:
            raise ConfigError(
                f"flag {token!r}: unknown namespace {ns!r}; expected one of {', '.join(NAMESPACES)}.{close_matches(ns, NAMESPACES)}"
            )
        if not eq:
            if i + 1 < len(flags) and not flags[i + 1].startswith("--"):
                value = flags[i + 1]
                i += 1
            else:
                value = "true"
        out[ns][key] = value
        i += 1
    return out


def is_http_url(value: Any) -> bool:
    parts = urlsplit(str(value))
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _whole(minimum: int, allow: tuple[int, ...] = ()) -> Callable[[str], str | None]:
    def check(text: str) -> str | None:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or (value < minimum and value not in allow):
            extra = "".join(f" or {a}" for a in allow)
            return f"expected a whole number >= {minimum}{extra}"
        return None

    return check


def _positive_number(text: str) -> str | None:
    try:
        value = float(text)
    except ValueError:
        return "expected a number of seconds > 0"
    return None if value > 0 and value == value and value != float("inf") else "expected a number of seconds > 0"


def _url(text: str) -> str | None:
    return None if is_http_url(text) else "expected an http(s) URL such as http://127.0.0.1:9001/v1"


# What the CLI checks before anything starts (the pydantic configs accept these values).
_FLAG_CHECKS: dict[str, Callable[[str], str | None]] = {
    "env.group_size": _whole(1),
    "env.total_steps": _whole(1, allow=(-1,)),
    "env.max_token_length": _whole(1),
    "env.max_agent_turns": _whole(1),
    "env.batch_size": _whole(1, allow=(-1,)),
    "env.max_num_workers": _whole(1, allow=(-1,)),
    "openai.base_url": _url,
    "openai.timeout": _positive_number,
    "phase2.base_url": _url,
    "phase2.timeout": _positive_number,
}


def check_flag_values(flags: list[str]) -> None:
    """Raise :class:`UsageError` for a flag value no run can use (``--env.group_size -1``,
    ``--openai.base_url not-a-url``): one line naming the flag, the value and what is expected."""
    parsed = parse_flags(flags)
    for ns, values in parsed.items():
        for key, text in values.items():
            check = _FLAG_CHECKS.get(f"{ns}.{key}")
            problem = check(text) if check is not None else None
            if problem:
                raise UsageError(f"--{ns}.{key} {describe_value(text)}: {problem}")
