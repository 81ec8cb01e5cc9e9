"""The typed RuntimeAPI payloads keep the ``--listen`` wire format: what a real local sandbox's
details and a diagnostic look like as JSON (the keys the listener always sent), and that an
attached console parses that JSON back into the same model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from environments import sandboxes as sb
from hermes_console.runtime import sandbox_ops
from hermes_console.runtime.payloads import ControlReply, DiagnosticResult, SandboxDetails, to_wire
from hermes_console.runtime.sinks import dumps_strict
from tests.helpers.sandboxes import local_sandbox

TASK = "payload-wire-test"
# The shape before the payloads were typed: asdict(SandboxInfo) plus the derived and live keys.
INFO_KEYS = {
    "task_id",
    "backend",
    "workspace",
    "state",
    "created_at",
    "last_activity",
    "lifetime_s",
    "running_command",
    "running_since",
    "running_timeout_s",
    "recent_commands",
    "idle_s",
    "age_s",
    "expires_in_s",
    "process_tree",
    "cwd",
}
LIVE_KEYS = {"limits", "shell", "live_output", "overrides"}  # only while the sandbox is live


@pytest.fixture
def box(tmp_path: Path) -> Iterator[sb.ManagedSandbox]:
    yield from local_sandbox(tmp_path, TASK)


def _wire(value: object) -> dict[str, object]:
    """What the listener puts in ``result`` (module doc), read back as JSON."""
    out = json.loads(dumps_strict(to_wire(value)))
    assert isinstance(out, dict)
    return out


def test_sandbox_details_and_diagnostics_keep_their_json_shape(box: sb.ManagedSandbox) -> None:
    assert box.execute("echo hello > greeting.txt", 30).exit_code == 0
    details = sandbox_ops.details(TASK)
    wire = _wire(details)
    assert set(wire) == INFO_KEYS | LIVE_KEYS
    assert wire["task_id"] == TASK and wire["backend"] == "local" and wire["live_output"] is None
    (record,) = wire["recent_commands"]  # type: ignore[misc]
    assert set(record) == {"command", "started_at", "duration_s", "exit_code", "output_head", "timed_out"}
    assert record["command"] == "echo hello > greeting.txt" and record["exit_code"] == 0
    assert all(set(p) == {"pid", "ppid", "command", "state", "elapsed_s"} for p in wire["process_tree"])  # type: ignore[attr-defined]
    # an attached console reads the same model back from the JSON
    assert SandboxDetails.model_validate(wire) == details

    diag = sandbox_ops.run(TASK, "cat greeting.txt", 10.0)
    wire_diag = _wire(diag)
    assert set(wire_diag) == {"output", "exit_code", "timed_out", "duration_s"}
    assert wire_diag["output"] == "hello\n" and wire_diag["exit_code"] == 0
    assert DiagnosticResult.model_validate(wire_diag) == diag


def test_control_replies_keep_their_json_shape() -> None:
    ok = json.loads(dumps_strict(ControlReply(ok=True, result=to_wire(3)).model_dump(exclude_unset=True)))
    assert ok == {"ok": True, "result": 3}
    failed = ControlReply(ok=False, error="KeyError: gone").model_dump(exclude_unset=True)
    assert failed == {"ok": False, "error": "KeyError: gone"}
    assert ControlReply.model_validate(failed).result is None
