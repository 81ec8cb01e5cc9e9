"""The console process's garbage-collector settings (runtime/gc_tuning.py): applied by the
process entry point, frozen again once the env is loaded, never by a bare ConsoleApp."""

from __future__ import annotations

import gc
import subprocess
import sys

from hermes_console.runtime import events as rev
from hermes_console.ui import app as app_module
from hermes_console_dev.fake_runtime import FakeRuntime
from tests.ui.eventlog import T0
from tests.ui.helpers import make_app, settle


def test_tune_raises_the_thresholds_and_freezes_what_is_alive() -> None:
    code = (
        "import gc\n"
        "from hermes_console.runtime import gc_tuning\n"
        "assert gc.get_freeze_count() == 0\n"
        "gc_tuning.tune()\n"
        "print(gc.get_threshold(), gc.get_freeze_count())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    thresholds, frozen = out.stdout.rsplit(" ", 1)
    assert thresholds.strip() == "(20000, 10, 10)"
    assert int(frozen) > 1_000  # what the interpreter and the imports made


async def test_the_app_freezes_after_the_runtime_started_only_when_asked(monkeypatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(app_module.gc_tuning, "freeze_loaded", lambda: calls.append("freeze"))
    before = gc.get_threshold()
    for asked in (False, True):
        app = make_app(FakeRuntime([rev.RuntimeStatus(ts=T0, status="running")]))
        app.config.freeze_gc_after_start = asked
        async with app.run_test(size=(120, 40)) as pilot:
            for _ in range(600):  # the start worker (a thread) has run runtime.start(), then froze or not
                await pilot.pause(0.05)
                if app.runtime.started and len(calls) == int(asked):
                    break
            await settle(pilot)
        assert calls == (["freeze"] if asked else [])
    assert gc.get_threshold() == before  # a bare ConsoleApp leaves the process's GC alone


async def test_the_app_freezes_only_once_the_env_is_loaded(monkeypatch) -> None:
    """``runtime.start()`` starts the runtime's thread and returns: the env is imported and set
    up after it. A freeze there froze little of it; the freeze waits for the status to leave
    "loading", and happens once."""
    statuses: list[str] = []
    runtime = FakeRuntime([rev.RuntimeStatus(ts=T0, status="loading")])
    app = make_app(runtime)
    app.config.freeze_gc_after_start = True
    monkeypatch.setattr(app_module.gc_tuning, "freeze_loaded", lambda: statuses.append(app.state.status))
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(40):
            await pilot.pause(0.05)
        assert runtime.started and app.state.status == "loading" and statuses == []
        runtime.feed([rev.RuntimeStatus(ts=T0 + 1, status="running")])
        for _ in range(200):
            await pilot.pause(0.05)
            if statuses:
                break
        runtime.feed([rev.RuntimeStatus(ts=T0 + 2, status="paused"), rev.RuntimeStatus(ts=T0 + 3, status="running")])
        await settle(pilot)
    assert statuses == ["running"]
