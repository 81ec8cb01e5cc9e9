"""Verdicts: what the env found about one group, handed straight to whoever runs it.

Events (``events.py``) are telemetry: shown, logged and recorded, never read to decide
anything, because an observer may be slow, lossy or repeat what it saw. A runner that
accounts for every item (the console's driver) opens a :class:`GroupReport` around a
group's ``collect_trajectories``; the env writes each rollout's outcome into it, once,
on the rollout's own task. The runner reads the report when the group returns, and may
also hear each outcome as it happens (``on_rollout``).

A report being open also tells the env that the runner judges the group's data itself
(``atropos_compat.drop_reason``, before handing it to ``handle_send_to_api``) and accounts
for it, so the env does not judge it a second time. With no report open (atroposlib
running the env on its own) nothing is recorded here and the env's events tell the story.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class GroupReport:
    group_id: str
    # Called once per finished rollout with its failure (None when it produced data), on the
    # env's loop thread: the runner's "every rollout fails" check runs on it.
    on_rollout: Callable[[str | None], None] | None = None
    failures: dict[str, str] = field(default_factory=dict)  # rollout id -> why it gave no usable data
    rollouts: int = 0

    @property
    def first_failure(self) -> str | None:
        return next(iter(self.failures.values()), None)

    def rollout_finished(self, rollout_id: str, failure: str | None) -> None:
        self.rollouts += 1
        if failure:
            self.failures.setdefault(rollout_id, failure)
        if self.on_rollout is not None:
            self.on_rollout(failure or None)


# The report of the group the current task belongs to (asyncio tasks copy the context, so a
# group's rollouts see their group's report).
current_report: contextvars.ContextVar[GroupReport | None] = contextvars.ContextVar("hermes_group_report", default=None)


def report_rollout(rollout_id: str, failure: str | None) -> None:
    """The env: a rollout ended, with ``failure`` when it produced no usable data."""
    report = current_report.get()
    if report is not None:
        report.rollout_finished(rollout_id, failure)


def runner_judges() -> bool:
    """True inside a group whose runner judges and accounts its data (a report is open)."""
    return current_report.get() is not None
