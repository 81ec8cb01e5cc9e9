"""Kept for seed compatibility: ``apply_patches()`` is an idempotent no-op.

Upstream once monkeypatched async backends here; nothing needs patching now
(atroposlib traps are handled explicitly in ``environments.atropos_compat``).
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

_applied = False


def apply_patches() -> None:
    """No-op; safe to call any number of times."""
    global _applied
    if _applied:
        return
    _applied = True
    logger.debug("apply_patches(): nothing to patch")


def patches_applied() -> bool:
    return _applied
