"""Quit always ends with the runtime's cleanup done: the UI waits for the whole stop
(however long past the drain deadline), counts down while it drains, a second `q`
leaves the screen without cancelling the stop, and the CLI still waits for cleanup."""

from __future__ import annotations

import asyncio
import io
import time
from concurrent.futures import Future
from contextlib import redirect_stderr

from hermes_console.cli import wait_for_stop
from hermes_console.runtime.config import RunSpec
from hermes_console.runtime.host import RuntimeHost
from hermes_console.ui.config import ConsoleConfig
from hermes_console.ui.screens.confirm import ConfirmModal
from hermes_console_dev.fake_runtime import FakeRuntime
from tests.ui.helpers import make_app, settle


def _status(app) -> str:
    return str(app.screen.query_one("#status").render())


async def _quit(pilot, app) -> None:
    await pilot.press("q")
    await settle(pilot)
    if isinstance(app.screen, ConfirmModal):
        await pilot.press("y")
        await settle(pilot)


async def test_a_stop_that_outlasts_the_drain_deadline_is_waited_for_never_cancelled(main_events) -> None:
    runtime = FakeRuntime(main_events, hold={"stop"})
    app = make_app(runtime, config=ConsoleConfig(tick_hz=20.0, drain_deadline_s=0.2))
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        await _quit(pilot, app)
        stop = runtime.pending["stop"]
        await pilot.pause(1.6)  # well past deadline + the old 1 s grace
        await settle(pilot)
        assert app.is_running and not stop.cancelled()
        assert "cleaning up sandboxes and outputs" in _status(app)
        runtime.resolve("stop", None)
        await settle(pilot)
        end = time.monotonic() + 30  # returns as soon as the app has exited (was 50 x 0.05 s)
        while app.is_running and time.monotonic() < end:
            await pilot.pause(0.05)
        assert not app.is_running
    assert app.return_code == 0


async def test_the_status_bar_counts_down_the_drain(main_events) -> None:
    runtime = FakeRuntime(main_events, hold={"stop"})
    app = make_app(runtime, config=ConsoleConfig(tick_hz=20.0, drain_deadline_s=30.0))
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        in_flight = app.state.accounting.in_flight
        assert in_flight > 0
        await _quit(pilot, app)
        text = _status(app)
        assert f"draining {in_flight} group(s), cancelling the rest in " in text
        seconds = int(text.split("cancelling the rest in ")[1].split("s")[0])
        assert 1 <= seconds <= 30  # counting down from the 30 s deadline (a loaded machine is slow to draw)
        runtime.resolve("stop", None)
        await settle(pilot)


async def test_second_q_leaves_the_screen_but_never_cancels_the_stop(main_events) -> None:
    runtime = FakeRuntime(main_events, hold={"stop"})
    app = make_app(runtime)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        await _quit(pilot, app)
        stop = runtime.pending["stop"]
        await pilot.press("q")
        await settle(pilot)
        assert not app.is_running
    await asyncio.sleep(0.1)  # the worker awaiting the stop is cancelled with the app
    assert not stop.cancelled() and not stop.done()
    assert app.return_code == 0
    stop.set_result(None)  # the CLI would be waiting on it now


def test_host_stop_futures_are_per_caller():
    from hermes_console.runtime.host import _follow

    shared: Future = Future()
    first, second = _follow(shared), _follow(shared)
    first.cancel()  # one caller gives up waiting ...
    assert not shared.cancelled() and not second.done()  # ... nobody else is affected
    shared.set_result(None)
    assert second.result(timeout=1) is None
    failed: Future = Future()
    follower = _follow(failed)
    failed.set_exception(RuntimeError("teardown failed"))
    assert isinstance(follower.exception(timeout=1), RuntimeError)
    host = RuntimeHost(RunSpec(env="environments.terminal_tasks"))  # never started: stop resolves at once
    assert host.stop(1.0).result(timeout=5) is None


class _Runtime:
    def __init__(self, future: Future) -> None:
        self.future = future
        self.joined = False

    def stop(self, drain_deadline_s: float) -> Future:
        return self.future

    def join(self, timeout: float) -> bool:
        self.joined = True
        return True


def test_cli_wait_for_stop_reports_a_cancelled_stop_instead_of_a_traceback():
    cancelled: Future = Future()
    cancelled.cancel()
    runtime = _Runtime(cancelled)
    err = io.StringIO()
    with redirect_stderr(err):
        assert wait_for_stop(runtime, 0.1) is False
    assert "stop was cancelled" in err.getvalue() and runtime.joined
    done: Future = Future()
    done.set_result(None)
    assert wait_for_stop(_Runtime(done), 0.1) is True


async def test_palette_has_one_quit_and_it_confirms(main_events) -> None:
    runtime = FakeRuntime(main_events, hold={"stop"})
    app = make_app(runtime)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "Quit" not in titles  # Textual's exits at once; ours is in ConsoleCommands
        await app.action_quit()  # any route to Textual's quit takes the console's path
        await settle(pilot)
        assert isinstance(app.screen, ConfirmModal) and app.is_running
        await pilot.press("y")
        await settle(pilot)
        runtime.resolve("stop", None)
        await settle(pilot)


def test_a_run_that_failed_under_the_ui_says_why_on_exit(monkeypatch):
    import hermes_console.ui.app as ui_app
    from hermes_console import cli
    from hermes_console.runtime.errors import ConfigError

    done: Future = Future()
    done.set_result(None)
    runtime = _Runtime(done)
    runtime.fatal = ConfigError("env.group_size: expected a positive integer, got -3")
    monkeypatch.setattr(ui_app, "run_console", lambda *a, **kw: 0)  # the operator pressed q at once
    err = io.StringIO()
    with redirect_stderr(err):
        code = cli._front_end(runtime, headless=False, drain_deadline_s=1.0)
    assert code == 1 and "error: env.group_size: expected a positive integer, got -3" in err.getvalue()
