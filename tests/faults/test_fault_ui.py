"""Pilot checks: the Textual console over the real runtime shows a fault's cause in the
panel an operator looks at, and stays responsive while the env loop is blocked."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from textual.pilot import Pilot

from hermes_console.runtime.host import RuntimeHost
from hermes_console.runtime.state import ConsoleState
from hermes_console.ui.app import ConsoleApp
from hermes_console.ui.config import ConsoleConfig
from tests.faults.fault_envs import BlockingRewardEnv, RewardRaisesEnv
from tests.faults.faults_helpers import fault_spec

pytestmark = pytest.mark.timeout(120)


async def _wait(pilot: Pilot, pred: Callable[[ConsoleState], bool], what: str, timeout: float = 40.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred(pilot.app.state):
            return
        await pilot.pause(0.1)
    raise AssertionError(f"timed out waiting for {what}: {pilot.app.state.status} {pilot.app.state.accounting}")


def _panel_text(app: ConsoleApp, selector: str) -> str:
    widget = app.screen.query_one(selector)
    lines = getattr(widget, "lines", None)
    if lines is not None:  # RichLog
        return "\n".join(strip.text for strip in lines)
    return str(widget.render())


async def _console(host: RuntimeHost, body: Callable[[Pilot, ConsoleApp], Any]) -> None:
    app = ConsoleApp(
        host, config=ConsoleConfig(tick_hz=10.0, drain_deadline_s=1.0, ui_cpu_share=0.0)
    )  # screen follows state at once
    try:
        async with app.run_test(size=(200, 60)) as pilot:
            await body(pilot, app)
    finally:
        host.stop(0.5).result(timeout=60)
        host.join(10)


async def test_reward_error_and_server_errors_are_on_screen_with_their_cause(sim, tmp_path):
    sim.set_faults(http_500=0.3)
    host = RuntimeHost(fault_spec(sim, tmp_path, total_steps=2, env=RewardRaisesEnv), exit_when_finished=False)

    async def body(pilot: Pilot, app: ConsoleApp) -> None:
        await _wait(
            pilot,
            lambda s: s.accounting.completed >= 2 and s.errors_by_kind.get("server_http_error", 0) > 0,
            "2 groups and counted 500s",
        )
        await pilot.pause(0.3)
        turns = _panel_text(app, "#turns")
        assert "compute_reward raised: KeyError" in turns, turns[-1500:]
        status = _panel_text(app, "#status")
        errors = sum(v for k, v in app.state.errors_by_kind.items() if not k.startswith("dropped:"))
        assert errors > 0 and f"errors {errors}" in status, status

    await _console(host, body)


async def test_console_keeps_ticking_while_the_env_loop_is_blocked(sim, tmp_path):
    env = BlockingRewardEnv.held()
    host = RuntimeHost(fault_spec(sim, tmp_path, total_steps=2, group_size=1, env=env), exit_when_finished=False)
    drains: list[int] = []  # the app's drain calls (one per UI tick)
    real_drain = host.drain

    def counted_drain(*args: Any, **kwargs: Any) -> Any:
        drains.append(1)
        return real_drain(*args, **kwargs)

    host.drain = counted_drain  # type: ignore[method-assign]

    async def body(pilot: Pilot, app: ConsoleApp) -> None:
        await _wait(pilot, lambda s: env.entered.is_set(), "a reward blocking the env loop")
        try:
            # The env loop stays blocked until these UI rounds are done: had a tick waited on
            # it, they could not finish (the app and this test share the UI loop).
            ticks = len(drains)
            for _ in range(10):
                await pilot.pause(0.05)
            await _wait(pilot, lambda s: len(drains) >= ticks + 3, "UI ticks while the env loop is blocked")
            await pilot.pause(1.0)  # keep it blocked at least this long (a lower bound) for the heartbeat
        finally:
            env.release.set()
        await _wait(pilot, lambda s: s.loop_lag_max_ms >= 800, "the lag reached the console")
        await _wait(pilot, lambda s: s.accounting.completed >= 2, "the run recovered")
        assert "lag" in _panel_text(app, "#status")

    await _console(host, body)
