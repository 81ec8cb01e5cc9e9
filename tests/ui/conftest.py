"""UI test fixtures."""

from __future__ import annotations

import pytest

from tests.ui.helpers import scenario


@pytest.fixture
def main_events() -> list:
    """Behaviour tests use the small run (same five active groups, fewer finished ones)."""
    return scenario("small")
