"""A real ``hermes-console run ... --headless`` subprocess, stopped by signals, and the
oracles every stop ends with: the event log and groups.jsonl parse completely, and
every item received is in exactly one of completed / dropped / failed / cancelled.

Imported as ``cli_stop_helpers`` (tests/ has no packages; the name is unique in tests/).
The oracles read the files with gzip/json directly, never through the runtime's own reader.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
TERMINAL = {"item_completed", "item_dropped", "item_failed", "item_cancelled"}
WAIT_S = 60.0


def cli_env() -> dict[str, str]:
    """The test's environment minus pytest's own variables (the child is not a test)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}


def run_cli(*args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hermes_console", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(REPO),
        env=cli_env(),
    )


@dataclass
class CliRun:
    proc: subprocess.Popen[bytes]
    out_path: Path
    groups: Path
    record: Path
    dropped: Path = field(init=False)

    def __post_init__(self) -> None:
        self.dropped = self.groups.with_name("dropped.jsonl")

    def output(self) -> str:
        return self.out_path.read_text(errors="replace") if self.out_path.exists() else ""

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait_exit(self, timeout: float = WAIT_S) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"the CLI did not exit within {timeout}s of the stop; output:\n{self.output()[-3000:]}"
            ) from None

    def until(self, pred: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if pred():
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"the CLI exited ({self.proc.returncode}) before: {what}\n{self.output()[-3000:]}")
            time.sleep(0.05)
        self.kill()
        raise AssertionError(f"timed out after {timeout}s waiting for: {what}\n{self.output()[-3000:]}")

    def groups_written(self) -> int:
        """Lines written so far; the line being written (no newline yet) is not one: a line longer
        than the writer's buffer reaches the file in pieces, and the test reads while it writes."""
        return len(whole_lines(self.groups, finished_only=True))


def start_run(tmp_path: Path, sim_url: str, *flags: str, record_name: str = "events.jsonl.gz") -> CliRun:
    """``hermes-console run environments.terminal_tasks --headless`` against ``sim_url`` (long run)."""
    groups = tmp_path / "run" / "groups.jsonl"
    record = tmp_path / record_name
    out = tmp_path / "cli-output.txt"
    args = [
        "run",
        "environments.terminal_tasks",
        "--headless",
        "--runs-dir",
        str(tmp_path),
        "--record",
        str(record),
        "--openai.base_url",
        f"{sim_url}/v1",
        "--openai.timeout",
        "20",
        "--env.data_path_to_save_groups",
        str(groups),
        "--env.total_steps",
        "1000",
        "--env.group_size",
        "2",
        "--env.max_agent_turns",
        "4",
        *flags,
    ]
    with open(out, "wb") as fp:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hermes_console", *args],
            stdout=fp,
            stderr=subprocess.STDOUT,
            cwd=str(REPO),
            env=cli_env(),
        )
    return CliRun(proc, out, groups, record)


def whole_lines(path: Path, finished_only: bool = False) -> list[str]:
    """Lines of a jsonl, all of which must be whole JSON (a torn line fails here).
    ``finished_only``: leave out a last line with no newline yet (read while it is written)."""
    if not path.exists():
        return []
    text = path.read_text()
    if finished_only and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    lines = [ln for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        json.loads(ln, parse_constant=_no_constants)  # strict JSON: NaN/Infinity are not JSON
    return lines


def _no_constants(name: str) -> Any:
    raise ValueError(f"non-JSON constant {name} in the file")


def read_record(path: Path) -> list[dict[str, Any]]:
    """Every event of a gzip event log; the file must be a complete gzip stream."""
    with gzip.open(path, "rt", encoding="utf-8") as fp:
        text = fp.read()  # raises EOFError on a truncated (unclosed) gzip
    return [json.loads(ln, parse_constant=_no_constants) for ln in text.splitlines() if ln.strip()]


@dataclass
class Outcome:
    received: list[str]
    by_kind: dict[str, list[str]]
    events: list[dict[str, Any]]

    def count(self, kind: str) -> int:
        return len(self.by_kind.get(kind, []))


def assert_every_item_accounted(events: list[dict[str, Any]]) -> Outcome:
    """Each item received has exactly one terminal event; no terminal event without an item."""
    received = [e["group_id"] for e in events if e["kind"] == "item_received"]
    assert len(received) == len(set(received)), "an item was received twice"
    outcomes: dict[str, list[str]] = {}
    by_kind: dict[str, list[str]] = {}
    for e in events:
        if e["kind"] in TERMINAL:
            outcomes.setdefault(e["group_id"], []).append(e["kind"])
            by_kind.setdefault(e["kind"], []).append(e["group_id"])
    twice = {g: k for g, k in outcomes.items() if len(k) != 1}
    assert not twice, f"items with more than one outcome: {twice}"
    missing = [g for g in received if g not in outcomes]
    assert not missing, f"{len(missing)} of {len(received)} item(s) never accounted: {missing[:5]}"
    unknown = [g for g in outcomes if g not in set(received)]
    assert not unknown, f"outcomes for items never received: {unknown[:5]}"
    return Outcome(received, by_kind, events)


def completed_after_stop(events: list[dict[str, Any]]) -> int:
    """Groups completed after the runtime began stopping (i.e. during the drain)."""
    seen_stop = False
    n = 0
    for e in events:
        if e["kind"] == "runtime_status" and e["status"] == "stopping":
            seen_stop = True
        elif seen_stop and e["kind"] == "item_completed":
            n += 1
    return n


def final_status(events: list[dict[str, Any]]) -> str | None:
    statuses = [e["status"] for e in events if e["kind"] == "runtime_status"]
    return statuses[-1] if statuses else None


SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGHUP": signal.SIGHUP}
