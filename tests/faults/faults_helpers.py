"""Shared pieces of the fault-injection suite: a small run config, task files whose
prompts make the simulator's policy issue an exact command, and the checks every
case ends with (alive, accounted, jsonl complete, nothing left behind).

Imported as ``faults_helpers`` (tests/ has no packages; the name is unique in tests/).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from hermes_console.runtime.config import RunSpec
from hermes_console.runtime.payloads import RuntimeDiagnostics
from hermes_console.sim.server import SimServer
from tests.runtime.runtime_helpers import Pump, child_pids, identity, our_threads, wait_no_children

MARKER = b"HERMES_SANDBOX_ID="


def write_tasks(
    path: Path, prompts: Sequence[str], eval_prompts: Sequence[str] = (), setups: Sequence[Sequence[str]] | None = None
) -> str:
    """A terminal_tasks JSONL (``--env.dataset_name``): one trivial-check task per prompt.
    Prompts like ``Run this command: CMD`` make the simulator run CMD on turn 1."""
    rows = []
    for split, items in (("train", prompts), ("eval", eval_prompts)):
        for i, prompt in enumerate(items):
            setup = list(setups[i]) if setups and split == "train" else []
            rows.append(
                {
                    "task_id": f"{split}-{i}",
                    "split": split,
                    "prompt": prompt,
                    "setup": setup,
                    "check": {"type": "command_exit_zero", "command": "true"},
                }
            )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def fault_spec(
    sim: SimServer,
    tmp_path: Path,
    *flags: str,
    total_steps: int = 4,
    group_size: int = 2,
    max_turns: int = 4,
    timeout_s: int = 5,
    tasks: str | None = None,
    **kw: Any,
) -> RunSpec:
    """Small and quick: few groups, few turns, a short request timeout."""
    base = [
        "--openai.base_url",
        f"{sim.base_url}/v1",
        "--openai.timeout",
        str(timeout_s),
        "--env.data_path_to_save_groups",
        str(tmp_path / "run" / "groups.jsonl"),
        "--env.total_steps",
        str(total_steps),
        "--env.group_size",
        str(group_size),
        "--env.max_agent_turns",
        str(max_turns),
    ]
    if tasks:
        base += ["--env.dataset_name", tasks]
    kw.setdefault("heartbeat_s", 0.1)
    kw.setdefault("stats_interval_s", 0.25)
    return RunSpec(
        env=kw.pop("env", "environments.terminal_tasks"), flags=[*base, *flags], runs_dir=str(tmp_path), **kw
    )


def marked_processes(task_ids: Iterable[str] | None = None) -> list[int]:
    """Live (non-zombie) processes carrying the sandbox marker, any backend; only those of
    ``task_ids``' sandboxes when given (other test sessions may share this machine)."""
    from environments.sandboxes import procfs
    from environments.sandboxes.base import _slug

    prefixes = None if task_ids is None else tuple(MARKER + _slug(t).encode() + b"-" for t in task_ids)
    found = []
    for pid in procfs.all_pids():
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
        except OSError:
            continue
        if any(v.startswith(prefixes if prefixes is not None else MARKER) for v in env):
            st = procfs.read_stat(pid)
            if st is not None and st.state not in ("Z", "X"):
                found.append(pid)
    return sorted(found)


def live_sandboxes() -> list[str]:
    from environments import sandboxes

    return [s.task_id for s in sandboxes.list_sandboxes() if s.state != "closed"]


class FaultRun(Pump):
    """A Pump with the checks every fault case ends with."""

    def __init__(self, host: Any) -> None:
        super().__init__(host)
        self.threads_before = set(our_threads())

    # ---- the console keeps running -----------------------------------------------
    def assert_alive(self) -> RuntimeDiagnostics:
        """The runtime thread is up and answers a command."""
        assert self.host._thread is not None and self.host._thread.is_alive(), "runtime thread died"
        assert not self.host.done.done(), f"runtime ended: {self.state.status} {self.state.status_detail}"
        diag = self.host.diagnostics().result(timeout=10)
        assert isinstance(diag.in_flight, int)
        return diag

    # ---- every item accounted -----------------------------------------------------
    def assert_accounted(self) -> None:
        assert identity(self.state, self.events) is None, identity(self.state, self.events)
        # The driver's own counters agree with what the console shows -- once the console has
        # drained what the driver emitted: a live run may take an item between drain and check.
        drv = self.host.driver
        if drv is not None:
            self.until(
                lambda s: (drv.received, drv.completed) == (s.accounting.received, s.accounting.completed),
                60,
                "the console's counters to catch up with the driver's",
            )
            assert identity(self.state, self.events) is None, identity(self.state, self.events)

    def completed_ids(self) -> list[str]:
        return [e.group_id for e in self.of("item_completed")]

    def assert_jsonl_complete(self) -> None:
        """Every group accounted completed has its line(s) in the jsonl, flushed."""
        completed = self.completed_ids()
        path = self.state.run.jsonl_path
        if not completed and not path:
            return  # the run never started (a start error): nothing to keep
        assert path, "no jsonl path in RunConfigured"
        lines = Path(path).read_text().splitlines() if Path(path).exists() else []
        assert len(lines) >= len(completed), (len(lines), len(completed))
        for line in lines:
            json.loads(line)  # every line is whole JSON (nothing torn)
        writer = self.host.driver.writer if self.host.driver is not None else None
        if writer is not None:
            missing = [g for g in completed if writer.count_for(g) == 0]
            assert not missing, f"completed groups not in the jsonl: {missing}"

    def sandbox_ids(self) -> list[str]:
        return [e.task_id for e in self.of("sandbox_created")]

    def own_processes(self) -> list[int]:
        """Live processes of the sandboxes this run created."""
        self.pump()
        return marked_processes(self.sandbox_ids())

    # ---- stop leaves nothing behind -------------------------------------------------
    def stop_clean(self, deadline: float = 2.0) -> None:
        t0 = time.monotonic()
        self.stop(deadline)
        assert time.monotonic() - t0 < deadline + 40, "stop took far longer than its deadline"
        assert self.state.accounting.in_flight == 0, self.state.accounting
        self.assert_accounted()
        self.assert_jsonl_complete()
        assert not [t for t in threading.enumerate() if t.name == "hermes-runtime"]
        assert self.host._loop is not None and self.host._loop.is_closed()
        assert wait_no_children(30) == [], f"child processes left: {child_pids()}"
        assert live_sandboxes() == [], f"sandboxes left open: {live_sandboxes()}"
        end = time.monotonic() + 30  # polls: returns as soon as the kills have landed
        while self.own_processes() and time.monotonic() < end:
            time.sleep(0.05)
        assert self.own_processes() == [], f"sandbox processes left: {self.own_processes()}"
        leaked = set(our_threads()) - self.threads_before
        end = time.monotonic() + 30
        while leaked and time.monotonic() < end:  # cleanup-* threads finishing
            time.sleep(0.05)
            leaked = set(our_threads()) - self.threads_before
        assert not leaked, f"threads left: {sorted(leaked)}"

    # ---- small conveniences -----------------------------------------------------------
    def until_done_items(self, n: int, timeout: float = 60.0) -> None:
        self.until(
            lambda s: s.accounting.completed + s.accounting.dropped_total + s.accounting.failed >= n,
            timeout,
            f"{n} items finished",
        )

    def stream_texts(self, kind: str | None = None) -> list[str]:
        return [e.text for e in self.state.stream if kind is None or e.kind == kind]

    def tool_rows(self, **match: Any) -> list[Any]:
        return [r for r in self.state.tool_rows if all(getattr(r, k) == v for k, v in match.items())]


def env_restore_keys() -> Iterable[str]:
    """Process-global vars the env constructor sets (seed behaviour); tests put them back."""
    return ("TERMINAL_ENV", "TERMINAL_TIMEOUT", "TERMINAL_LIFETIME_SECONDS")


def snapshot_env() -> dict[str, str | None]:
    return {k: os.environ.get(k) for k in env_restore_keys()}


def restore_env(saved: dict[str, str | None]) -> None:
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
