"""Items 1-3 through the whole stack on bwrap: the model (simulator) asks the file tools
to write outside its workspace -- '..', an absolute path, a symlink planted by the task
setup -- and every attempt is refused with a message, shown in the console, and leaves
nothing outside. (Tool-level and sandbox-level checks: test_file_tool_paths.py,
test_sandbox_security.py.)"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_console.runtime.host import RuntimeHost
from hermes_console.sim.config import LatencyConfig, SimConfig
from hermes_console.sim.server import SimServer
from tests.faults.faults_helpers import FaultRun, fault_spec, restore_env, snapshot_env, write_tasks

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def sim() -> Iterator[SimServer]:
    server = SimServer(SimConfig(seed=17, solve_rate=1.0, latency=LatencyConfig(mode="fixed", mean_ms=5.0)))
    server.start()
    yield server
    server.stop()


def test_model_cannot_write_outside_its_bwrap_workspace(sim, tmp_path):
    from environments.sandboxes import current_settings, reset_configuration

    outside = tmp_path / "outside"
    outside.mkdir()
    tag = uuid.uuid4().hex[:8]
    attempts = {
        f"../escape-{tag}.txt": None,
        f"/etc/hermes-pwned-{tag}.txt": None,
        f"link/pwned-{tag}.txt": [f"ln -s {outside} link"],
    }
    prompts = [f"Create a file named {name} containing pwned." for name in attempts]
    tasks = write_tasks(tmp_path / "tasks.jsonl", prompts, setups=[v or [] for v in attempts.values()])
    saved = snapshot_env()
    host = RuntimeHost(
        fault_spec(sim, tmp_path, "--env.terminal_backend", "bwrap", total_steps=3, group_size=1, tasks=tasks),
        exit_when_finished=False,
    )
    r = FaultRun(host)
    host.start()
    try:
        r.until_done_items(3, 60)
        writes = [x for x in r.state.tool_rows if x.tool_name == "write_file"]
        assert len(writes) >= 3, [(x.tool_name, x.args_head) for x in r.state.tool_rows]
        for name in attempts:
            rows = [x for x in writes if name in x.args_head]
            assert rows, f"the model never tried {name}"
            assert all(x.status == "error" and "outside the sandbox workspace" in (x.error or "") for x in rows), rows
        assert r.state.errors_by_kind["tool:tool_error"] >= 3
        assert list(outside.iterdir()) == []
        assert not os.path.exists(f"/etc/hermes-pwned-{tag}.txt")
        # '..' from a workspace is the sandbox root on the host: nothing may land there.
        root = Path(current_settings().root)
        assert not list(root.glob(f"escape-{tag}.txt")) and not list(root.glob(f"*/escape-{tag}.txt"))
        r.stop_clean()
    finally:
        host.stop(0.5).result(timeout=60)
        host.join(10)
        restore_env(saved)
        reset_configuration()
