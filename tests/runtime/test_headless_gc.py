"""The headless runner tunes the garbage collector like the console (runtime/gc_tuning.py):
thresholds raised before the start, what is alive frozen once the env is loaded. Only when
the CLI asks: a test process builds many runtimes and must keep CPython's defaults."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from hermes_console import cli
from hermes_console.runtime import events as rev
from hermes_console.runtime import headless
from hermes_console_dev.fake_runtime import FakeRuntime


class Staged(FakeRuntime):
    """Loading for two drains, then running; finished after the fifth."""

    def drain(self, max_events: int | None = None) -> list[Any]:
        self.drain_calls += 1
        if self.drain_calls == 1:
            return [rev.RuntimeStatus(status="loading")]
        if self.drain_calls == 3:
            return [rev.RuntimeStatus(status="running")]
        if self.drain_calls == 5 and not self._finished.done():
            self._finished.set_result(None)
        return []


@pytest.mark.parametrize("tune_gc", [True, False])
def test_headless_tunes_before_the_start_and_freezes_once_the_env_is_loaded(monkeypatch, tune_gc):
    runtime = Staged()
    calls: list[tuple[str, bool, int]] = []
    monkeypatch.setattr(headless, "REFRESH_S", 0.01)
    monkeypatch.setattr(headless.gc_tuning, "tune", lambda: calls.append(("tune", runtime.started, runtime.drain_calls)))
    monkeypatch.setattr(
        headless.gc_tuning, "freeze", lambda: calls.append(("freeze", runtime.started, runtime.drain_calls))
    )
    headless.run_headless(runtime, console=Console(file=io.StringIO(), width=120), tune_gc=tune_gc)
    assert runtime.drain_calls >= 5
    assert calls == ([("tune", False, 0), ("freeze", True, 3)] if tune_gc else [])


def test_the_cli_runs_headless_with_the_collector_tuned(monkeypatch):
    seen: dict[str, Any] = {}

    def fake_run_headless(runtime: Any, **kwargs: Any) -> int:
        seen.update(kwargs)
        return 0

    monkeypatch.setattr(headless, "run_headless", fake_run_headless)
    assert cli._front_end(FakeRuntime(), True, 0.0) == 0
    assert seen.get("tune_gc") is True
