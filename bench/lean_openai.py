"""P2 A/B switch for the openai request fast path now in ``environments.patches``.

``apply()`` / ``remove()`` turn it on and off so the benchmark can measure the
env with and without it (``python -m bench.p2_efficiency --full-transform``).
"""

from __future__ import annotations

from environments.patches import (
    disable_lean_chat_transform,
    enable_lean_chat_transform,
    lean_chat_transform_enabled,
    plain_json,
)

__all__ = ["apply", "remove", "active", "plain_json"]


def apply() -> None:
    enable_lean_chat_transform()


def remove() -> None:
    disable_lean_chat_transform()


def active() -> bool:
    return lean_chat_transform_enabled()
