"""Errors the runtime reports to operators (CLI, headless printer, UI status bar)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class ConfigError(ValueError):
    """Bad input found before anything starts: env reference, config file, flag, server.

    The message is complete on its own (names the field or file, the value and
    what was expected), so front ends print it as is, without a traceback.
    """


class UsageError(ConfigError):
    """A command-line value is wrong (the CLI exits 2, like argparse): the message names the
    flag, the value and what was expected, on one line."""


class IntakeStopped(RuntimeError):
    """The env can no longer supply items (get_next_item raised) or the run can no longer
    store them (the jsonl write failed). Intake stops, in-flight groups finish, the run
    ends with this message (hook or file, and the cause)."""


class EvalBusy(RuntimeError):
    """An evaluation is already running; only one at a time."""


def close_matches(word: str, candidates: Iterable[str], n: int = 3) -> str:
    """' Did you mean: a, b?' or '' — appended to unknown-name errors."""
    found = difflib.get_close_matches(word, sorted(set(candidates)), n=n, cutoff=0.6)
    return f" Did you mean: {', '.join(found)}?" if found else ""


def describe_value(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def first_line(exc: BaseException | None) -> str:
    if exc is None:
        return ""
    from environments.redact import redact  # start-up errors quote URLs and keys: never show them

    text = str(exc).strip().splitlines()
    head = redact(text[0]) if text else ""
    return f"{type(exc).__name__}: {head}" if head else type(exc).__name__
