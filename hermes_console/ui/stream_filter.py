"""The operator's `/` filter: a substring matched against group and rollout ids and
their readable labels (g0033, g0033-r2)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class StreamFilter:
    text: str = ""
    # The run's RolloutHistory (label_of / group_label_of), read at match time: labels are
    # given as rollouts start, so a filter typed early matches rollouts that come later.
    history: Callable[[], Any] | None = None

    def __bool__(self) -> bool:
        return bool(self.text)

    def matches(self, rollout_id: str, group_id: str) -> bool:
        if not self.text:
            return True
        needle = self.text.lower()
        if needle in rollout_id.lower() or needle in group_id.lower():
            return True
        history = self.history() if self.history is not None else None
        if history is None:
            return False
        return needle in history.label_of(rollout_id).lower() or needle in history.group_label_of(group_id).lower()
