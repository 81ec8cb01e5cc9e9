"""The operator's `/` filter: a substring matched against group and rollout ids."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class StreamFilter:
    text: str = ""

    def __bool__(self) -> bool:
        return bool(self.text)

    def matches(self, rollout_id: str, group_id: str) -> bool:
        if not self.text:
            return True
        needle = self.text.lower()
        return needle in rollout_id.lower() or needle in group_id.lower()
