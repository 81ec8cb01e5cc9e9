"""The headless runner tunes the garbage collector like the console (runtime/gc_tuning.py):
thresholds raised before the start, what is alive frozen once the env is loaded. Only when
the CLI runs it, and CPython's settings are back afterwards (a test process builds many
runtimes, and the CLI's own tests run in it)."""

from __future__ import annotations

import gc
import io
from typing import Any

import pytest
from rich.console import Console

from hermes_console import cli
from hermes_console.runtime import events as rev
from hermes_console.runtime import gc_tuning, headless
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


@pytest.mark.parametrize("freeze", [True, False])
def test_headless_freezes_once_at_the_drain_that_shows_the_env_loaded(monkeypatch, freeze):
    runtime = Staged()
    calls: list[tuple[str, bool, int]] = []
    monkeypatch.setattr(headless, "REFRESH_S", 0.01)
    monkeypatch.setattr(
        headless.gc_tuning, "freeze_loaded", lambda: calls.append(("freeze", runtime.started, runtime.drain_calls))
    )
    headless.run_headless(runtime, console=Console(file=io.StringIO(), width=120), freeze_gc_when_loaded=freeze)
    assert runtime.drain_calls >= 5
    assert calls == ([("freeze", True, 3)] if freeze else [])


def test_the_cli_runs_headless_with_the_collector_tuned_and_gives_the_defaults_back(monkeypatch):
    seen: dict[str, Any] = {}
    before = gc.get_threshold()

    def fake_run_headless(runtime: Any, **kwargs: Any) -> int:
        seen.update(kwargs, thresholds=gc.get_threshold(), frozen=gc.get_freeze_count())
        return 0

    monkeypatch.setattr(headless, "run_headless", fake_run_headless)
    assert cli._front_end(FakeRuntime(), True, 0.0) == 0
    assert seen["freeze_gc_when_loaded"] is True
    assert seen["thresholds"] == gc_tuning.THRESHOLDS and seen["frozen"] > 0  # during the run
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0  # and CPython's back after it
