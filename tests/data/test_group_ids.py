"""groups.jsonl records carry ``hermes_group_id``/``hermes_item`` (extra keys atroposlib's
readers ignore), and the records still pass check-data and atroposlib's own trainer model."""

from __future__ import annotations

import io
import json
from pathlib import Path

from atroposlib.api.server import ScoredData
from rich.console import Console

from environments import events
from hermes_console.check_data import Checker
from hermes_console.runtime.headless import EXIT_OK, run_headless
from hermes_console.runtime.host import RuntimeHost
from hermes_console.runtime.sinks import GroupWriter
from tests.helpers.live import fixed_latency_sim, running_sim
from tests.runtime.runtime_helpers import make_spec


def test_groups_jsonl_records_carry_group_and_item_ids(tmp_path: Path) -> None:
    for sim in running_sim(fixed_latency_sim(seed=7, latency_ms=5.0)):
        host = RuntimeHost(
            make_spec(sim, tmp_path, "--env.total_steps", "2", "--env.group_size", "2"), exit_when_finished=True
        )
        buf = io.StringIO()
        assert run_headless(host, console=Console(file=buf, width=200)) == EXIT_OK, buf.getvalue()
    lines = [ln for ln in (tmp_path / "run" / "groups.jsonl").read_text().splitlines() if ln.strip()]
    assert lines
    checker = Checker()
    ids = set()
    for i, line in enumerate(lines):
        record = json.loads(line)
        gid = record["hermes_group_id"]
        assert isinstance(gid, str) and len(gid) == 12 and int(gid, 16) >= 0, record.keys()
        assert isinstance(record["hermes_item"], str) and record["hermes_item"], record.keys()
        ids.add(gid)
        # atroposlib's run-api model takes the record as it is (extra keys ignored, not rejected).
        model = ScoredData(**record)
        assert model.tokens == record["tokens"] and not hasattr(model, "hermes_group_id")
        checker.check_line(line, f"line {i + 1}")
    assert len(ids) == len(lines)  # one id per group
    assert checker.report.ok, checker.report.examples


def test_the_object_handed_on_is_never_tagged(tmp_path: Path) -> None:
    """The same group object goes to the trainer after the jsonl: the writer must tag a copy."""
    writer = GroupWriter(str(tmp_path / "groups.jsonl"), item_of=lambda gid: f"task-of-{gid}")
    group = {"tokens": [[1, 2]], "masks": [[-100, 2]], "scores": [1.0]}
    token = events.current_group_id.set("abc123abc123")
    try:
        writer.write(group)
    finally:
        events.current_group_id.reset(token)
    writer.write({"tokens": [[3]], "masks": [[3]], "scores": [0.0]})  # outside any group: untouched
    writer.close()
    assert group == {"tokens": [[1, 2]], "masks": [[-100, 2]], "scores": [1.0]}
    first, second = [json.loads(x) for x in (tmp_path / "groups.jsonl").read_text().splitlines()]
    assert first["hermes_group_id"] == "abc123abc123" and first["hermes_item"] == "task-of-abc123abc123"
    assert "hermes_group_id" not in second
