"""Stop accounting for sandboxes (issue 19, point 8): every sandbox reported created is
reported closed before the runtime says it is done, even one a cancelled rollout's tool
thread created after the stop's first sweep."""

from __future__ import annotations

import pytest

from tests.faults.faults_helpers import fault_spec, live_sandboxes
from tests.faults.late_sandbox_envs import LateSandboxEnv

pytestmark = pytest.mark.timeout(120)


def test_a_sandbox_created_after_the_stop_began_is_closed_and_reported(sim, tmp_path, run):
    from environments.sandboxes import cleanup_all_environments

    r = run(fault_spec(sim, tmp_path, total_steps=2, group_size=1, env=LateSandboxEnv, max_in_flight=2))
    try:
        r.until(lambda s: s.accounting.received >= 2, 60, "2 rollouts waiting on their first tool call")
        r.stop(0.0)  # cancels both while their tool threads are still creating sandboxes
        created = {e.task_id for e in r.of("sandbox_created")}
        closed = {e.task_id for e in r.of("sandbox_closed")}
        assert sum(t.startswith("late-") for t in created) == 2, created
        assert created <= closed, f"created but never reported closed: {created - closed}"
        assert live_sandboxes() == []
        r.assert_accounted()
    finally:
        cleanup_all_environments()
