"""Stops in the Textual console (issue 19, points 1-2): quit (q, y), SIGTERM and SIGHUP all drain
(every group finishing in the drain is kept), account every item, and stop the runtime
before the app exits."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from hermes_console.runtime.host import RuntimeHost
from hermes_console.ui.app import ConsoleApp
from hermes_console.ui.config import ConsoleConfig
from tests.faults.faults_helpers import fault_spec

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("name", ["SIGTERM", "SIGHUP", "q"])
async def test_stop_signal_in_the_console_drains_and_exits(sim, tmp_path, name):
    host = RuntimeHost(fault_spec(sim, tmp_path, total_steps=1000, max_in_flight=2), exit_when_finished=False)
    app = ConsoleApp(
        host, config=ConsoleConfig(tick_hz=10.0, drain_deadline_s=20.0, ui_cpu_share=0.0)
    )  # screen follows state at once
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            end = time.monotonic() + 60
            while app.state.accounting.received < 2 and time.monotonic() < end:
                await pilot.pause(0.1)
            assert app.state.accounting.received >= 2
            if name == "q":  # the operator quits and confirms
                await pilot.press("q")
                await pilot.pause(0.3)
                await pilot.press("y")
            else:
                sig = getattr(signal, name)
                # Only raise it when the console has its handler (never kill the test process).
                assert signal.getsignal(sig) not in (signal.SIG_DFL, signal.SIG_IGN, None)
                os.kill(os.getpid(), sig)
            end = time.monotonic() + 60
            while not host.done.done() and time.monotonic() < end:
                await pilot.pause(0.1)
            assert host.done.done(), "the signal did not stop the runtime"
            await pilot.pause(0.5)
        app.state.apply_all(host.drain())  # what arrived after the app's last tick
        a = app.state.accounting
        assert app.return_code in (None, 0)
        assert app.state.status == "stopped", app.state.status
        assert a.in_flight == 0 and a.received == a.completed + a.dropped_total + a.failed + a.cancelled, a
        assert a.cancelled == 0 and a.failed == 0, a  # a 20 s drain is plenty: everything in flight finished
        lines = Path(host.driver.jsonl_path).read_text().splitlines()
        assert len(lines) == a.completed  # groups finishing in the drain are in the jsonl too
    finally:
        host.stop(0.5).result(timeout=60)
        host.join(10)
