"""Files (issue 19, points 2 and 4): a jsonl whose last line is torn is repaired before
appending, a full disk under ``--record`` is reported at once and never hangs the stop,
and ``replay`` reads a truncated log up to its last whole event with a warning."""

from __future__ import annotations

import errno
import gzip
import io
import json
import time
from pathlib import Path
from typing import Any

import pytest

from hermes_console.runtime import events as rev
from hermes_console.runtime.recorder import Recorder
from hermes_console.runtime.replay import ReplaySource
from hermes_console.runtime.sinks import DroppedWriter, GroupWriter
from tests.faults.bad_data_envs import NonFiniteRewardEnv
from tests.faults.cli_stop_helpers import run_cli, whole_lines
from tests.faults.faults_helpers import fault_spec, write_tasks
from tests.helpers.waits import finishes

pytestmark = pytest.mark.timeout(120)

TORN = '{"tokens": [[1, 2, 3], [4, 5'  # a crash mid-write: no end of line, not JSON


# --------------------------------------------------------------------------- torn jsonl tails


def test_a_second_run_appending_to_a_torn_dropped_file_keeps_every_record_whole(sim, tmp_path, run):
    # A first run in this directory was killed while writing dropped.jsonl.
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    earlier = json.dumps({"group_id": "earlier", "reason": "identical_scores"})
    (run_dir / "dropped.jsonl").write_text(earlier + "\n" + TORN)
    tasks = write_tasks(tmp_path / "tasks.jsonl", [f"Run this command: echo {i}" for i in range(2)])
    r = run(fault_spec(sim, tmp_path, total_steps=2, tasks=tasks, env=NonFiniteRewardEnv))
    r.until_done_items(2, 60)
    lines = whole_lines(run_dir / "dropped.jsonl")  # the new records did not land on the torn line
    assert lines[0] == earlier
    assert [json.loads(ln)["reason"] for ln in lines[1:]] == ["non_finite_score", "non_finite_score"], (
        r.state.accounting,
        [
            (e.kind, getattr(e, "reason", getattr(e, "error", "")))
            for e in r.events
            if e.kind in ("item_dropped", "item_failed", "item_completed")
        ],
    )
    assert any(
        log.level == "WARNING" and "torn" in log.message and "dropped.jsonl" in log.message for log in r.state.logs
    ), [log.message for log in r.state.logs][-5:]
    r.stop_clean()


def test_group_writer_appending_to_a_torn_file_cuts_the_torn_tail(tmp_path):
    path = tmp_path / "groups.jsonl"
    earlier = json.dumps({"tokens": [[9]], "scores": [1.0]})
    path.write_text(earlier + "\n" + TORN)
    w = GroupWriter(str(path))
    w.write({"tokens": [[1, 2]], "scores": [0.5]})
    w.close()
    assert [json.loads(ln)["scores"] for ln in whole_lines(path)] == [[1.0], [0.5]]
    with pytest.raises(ValueError, match="NaN/inf"):  # strict JSON: never a bare NaN in a kept group
        GroupWriter(str(path)).write({"tokens": [[1]], "scores": [float("nan")]})
    assert len(whole_lines(path)) == 2


def test_dropped_writer_repairs_a_torn_last_line(tmp_path):
    path = tmp_path / "dropped.jsonl"
    path.write_text(json.dumps({"group_id": "old"}) + "\n" + TORN)
    w = DroppedWriter(str(path))
    w.write("g1", "non_finite_score", {"scores": [float("nan")]}, "score nan")
    w.close()
    lines = [json.loads(ln) for ln in whole_lines(path)]
    assert [d["group_id"] for d in lines] == ["old", "g1"]
    assert lines[1]["group"]["scores"] == ["NaN"]  # strict JSON: spelled out, never a bare NaN


# --------------------------------------------------------------------------- recorder on a full disk


class FullDisk(io.StringIO):
    """A text file on a disk that fills up after ``limit`` characters."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def write(self, text: str) -> int:
        if self.tell() + len(text) > self.limit:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(text)


def _event(i: int) -> Any:
    return rev.ItemReceived(group_id=f"g{i:05d}", item_summary=f"task {i} " + "x" * (i % 37), ts=1000.0 + i)


def test_recorder_disk_full_is_reported_at_once_and_close_does_not_hang(tmp_path):
    errors: list[str] = []
    rec = Recorder(
        str(tmp_path / "e.jsonl"), flush_s=0.01, on_error=errors.append, opener=lambda path, mode: FullDisk(2_000)
    )
    for i in range(200):
        rec.tap(_event(i))
    end = time.monotonic() + 30
    while not errors and time.monotonic() < end:
        time.sleep(0.01)
    assert errors and "No space left on device" in errors[0] and "recording stopped" in errors[0], errors
    for i in range(10_000):  # events after the failure are not kept in memory
        rec.tap(_event(i))
    assert len(rec._pending) == 0
    assert finishes(rec.close), "close() hung on the full disk"
    assert len(errors) == 1 and rec.error is not None


def test_record_on_a_full_disk_shows_an_error_while_the_run_goes_on(sim, tmp_path, run, monkeypatch):
    monkeypatch.setattr("hermes_console.runtime.recorder.open_log", lambda path, mode: FullDisk(4_000))
    r = run(fault_spec(sim, tmp_path, total_steps=3, record_path=str(tmp_path / "events.jsonl")))
    r.until(
        lambda s: any(log.logger == "recorder" and log.level == "ERROR" for log in s.logs),
        30,
        "the recorder's error shown",
    )
    [msg] = [log.message for log in r.state.logs if log.logger == "recorder"]
    assert "No space left on device" in msg and "events.jsonl" in msg
    r.until_done_items(3, 60)  # the run itself is unaffected
    r.assert_accounted()
    r.stop_clean()


# --------------------------------------------------------------------------- truncated event logs


def _recorded(path: Path, n: int) -> list[Any]:
    src = [_event(i) for i in range(n)]
    rec = Recorder(str(path), flush_s=0.01)
    for e in src:
        rec.tap(e)
    rec.close()
    return src


def test_replay_reads_a_truncated_gzip_log_up_to_its_last_whole_event(tmp_path):
    full = tmp_path / "full.jsonl.gz"
    src = _recorded(full, 3_000)
    data = full.read_bytes()
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(data[: len(data) // 2])  # the run was killed mid-write
    with pytest.raises(EOFError):
        gzip.open(cut, "rt").read()  # independent check: really a truncated gzip stream
    source = ReplaySource(str(cut))
    got = source.drain()
    assert 0 < len(got) < len(src)
    assert got == src[: len(got)]  # a prefix of whole events, in order
    assert source.warnings and "truncated" in source.warnings[0]
    proc = run_cli("replay", str(cut), "--headless")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "warning" in proc.stderr and "truncated" in proc.stderr
    assert f"received {len(got)} =" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_replay_reads_a_plain_log_with_a_torn_last_line(tmp_path):
    path = tmp_path / "e.jsonl"
    src = _recorded(path, 20)
    path.write_text(path.read_text() + '{"kind": "item_rece')
    source = ReplaySource(str(path))
    assert source.drain() == src
    assert source.warnings and "partial event (line 21)" in source.warnings[0]


def test_eval_files_are_strict_json_even_with_nan_metrics(tmp_path):
    from hermes_console.runtime.evaluation import write_eval_files

    samples = write_eval_files(
        tmp_path, {"eval/pass_rate": float("nan"), "eval/n": 3}, [{"score": float("inf"), "task": "t"}]
    )
    metrics = json.loads((tmp_path / "metrics.json").read_text(), parse_constant=_refuse)
    assert metrics["results"]["all"] == {"eval/pass_rate": "NaN", "eval/n": 3}
    assert [json.loads(ln, parse_constant=_refuse) for ln in Path(samples).read_text().splitlines()] == [
        {"score": "Infinity", "task": "t"}
    ]


def _refuse(name: str) -> None:
    raise ValueError(f"non-JSON constant {name}")


def test_recorder_on_a_real_full_tmpfs(tmp_path):
    """The same on a real full filesystem: a 64 KiB tmpfs (root can mount one; else skipped, saying why)."""
    import os
    import subprocess

    mount = tmp_path / "small"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if made.returncode != 0:
        why = "needs root" if os.geteuid() != 0 else "root, but mounting is not allowed here (no CAP_SYS_ADMIN)"
        pytest.skip(f"cannot mount a tmpfs here ({made.stderr.strip() or made.returncode}): {why}")
    try:
        errors: list[str] = []
        rec = Recorder(str(mount / "events.jsonl.gz"), flush_s=0.01, on_error=errors.append)
        for i in range(2_000):  # incompressible text: the 64 KiB fill up fast
            rec.tap(rev.ItemReceived(group_id=f"g{i}", item_summary=os.urandom(200).hex()))
        end = time.monotonic() + 30
        while not errors and time.monotonic() < end:
            time.sleep(0.01)
        assert errors and "No space left on device" in errors[0], errors
        assert finishes(rec.close), "close() hung on the full disk"
        assert rec.error is not None
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)
