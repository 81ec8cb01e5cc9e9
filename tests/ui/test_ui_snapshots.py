"""SVG snapshots of the real app fed by the fixture logs (fixed clock = the log's last event).

The scenes are the ones `python -m hermes_console_dev.screenshots` writes, so the
README screenshots are what this checks. Update with `--snapshot-update` after looking
at the diff report.
"""

from __future__ import annotations

import pytest

from hermes_console_dev.screenshots import SCENES, build_app
from tests.ui.eventlog import FIXTURES


# Every scene is compared, `errors` included: the panels render from ConsoleState alone,
# so how the drain batched the events does not change the picture (test_ui_determinism.py).
@pytest.mark.parametrize("scene", sorted(SCENES))
def test_scene_snapshot(snap_compare, scene: str) -> None:
    spec = SCENES[scene]
    assert snap_compare(build_app(scene, FIXTURES), terminal_size=spec.size, run_before=spec.run_before)


def test_fixture_logs_match_the_builder() -> None:
    """The committed fixture logs are exactly what tests/ui/eventlog.py builds (regenerate if not)."""
    from tests.ui.eventlog import SCENARIOS, read_log

    for name, build in SCENARIOS.items():
        if name == "small":
            continue  # built on the fly, not stored
        stored = [e.to_dict() for e in read_log(FIXTURES / f"{name}.jsonl")]
        assert stored == [e.to_dict() for e in build()], f"{name}.jsonl is stale: python -m tests.ui.eventlog"


def test_make_screenshots_finds_the_fixture_logs_by_default() -> None:
    """`make screenshots` passes no --fixtures: the builder's default is this repo's fixtures."""
    from hermes_console_dev.screenshots import DEFAULT_FIXTURES

    assert DEFAULT_FIXTURES.resolve() == FIXTURES.resolve()
