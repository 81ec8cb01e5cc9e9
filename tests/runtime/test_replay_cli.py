"""Event logs (gzip/plain, malformed lines, paced replay), the headless front end and
the CLI's exit codes, and the host's own failure paths."""

from __future__ import annotations

import gzip
import io
import json
import socket
import time

import pytest
from rich.console import Console

from environments import events as ev
from hermes_console.cli import main as cli_main
from hermes_console.runtime import events as rev
from hermes_console.runtime.api import CommandUnavailable, RuntimeAPI
from hermes_console.runtime.config import RunSpec
from hermes_console.runtime.headless import EXIT_FATAL, EXIT_OK, run_headless
from hermes_console.runtime.host import RuntimeHost
from hermes_console.runtime.recorder import Recorder
from hermes_console.runtime.replay import ReplayError, ReplaySource
from tests.helpers.waits import finishes
from tests.runtime.runtime_helpers import make_spec


def _events(n: int = 5, t0: float = 100.0):
    out = [rev.RuntimeStatus(status="running", ts=t0)]
    for i in range(n):
        out.append(rev.ItemReceived(group_id=f"g{i}", ts=t0 + 0.1 * (i + 1)))
    out.append(ev.ItemFailed(group_id="g0", error="boom", ts=t0 + 1.0))
    return out


@pytest.mark.parametrize("name", ["events.jsonl", "events.jsonl.gz"])
def test_recorder_roundtrip(tmp_path, name):
    path = str(tmp_path / name)
    rec = Recorder(path, flush_s=0.01)
    src = _events()
    for e in src:
        rec.tap(e)
    rec.close()
    if name.endswith(".gz"):
        with gzip.open(path, "rt") as fp:
            assert len(fp.read().splitlines()) == len(src)
    replay = ReplaySource(path)
    assert isinstance(replay, RuntimeAPI) and not replay.is_live
    replay.start()
    assert replay.drain(max_events=2) == src[:2]
    assert replay.drain() == src[2:]
    assert replay.done.done() and replay.drain() == []


def test_malformed_log_line_is_reported_with_its_number(tmp_path):
    path = tmp_path / "bad.jsonl"
    good = json.dumps(rev.RuntimeStatus(status="running", ts=1.0).to_dict())
    path.write_text(good + "\n" + good + "\n{not json\n")
    with pytest.raises(ReplayError, match=r"bad\.jsonl: line 3 is not valid JSON"):
        ReplaySource(str(path))
    path.write_text(good + "\n" + json.dumps({"kind": "no_such_event"}) + "\n")
    with pytest.raises(ReplayError, match=r"line 2: unknown event kind 'no_such_event'"):
        ReplaySource(str(path))
    path.write_text("[1, 2]\n")
    with pytest.raises(ReplayError, match=r"line 1 is a JSON list; expected an event object"):
        ReplaySource(str(path))


def test_paced_replay_and_commands_unavailable(tmp_path):
    path = str(tmp_path / "e.jsonl")
    rec = Recorder(path)
    for e in _events(n=3, t0=100.0):  # spans 1.0 s of recorded time
        rec.tap(e)
    rec.close()
    replay = ReplaySource(path, speed=4.0)  # -> 0.25 s
    replay.start()
    first = replay.drain()
    assert 1 <= len(first) < 5
    time.sleep(0.3)
    assert len(first) + len(replay.drain()) == 5
    for call in (
        replay.pause,
        replay.resume,
        replay.cancel_in_flight,
        lambda: replay.switch_phase(2),
        replay.evaluate,
        lambda: replay.kill_sandbox("x"),
        lambda: replay.run_in_sandbox("x", "ls"),
    ):
        with pytest.raises(CommandUnavailable, match="not available while replaying"):
            call()


def test_cli_replay_headless_and_bad_log(tmp_path, capsys):
    path = str(tmp_path / "e.jsonl")
    rec = Recorder(path)
    for e in _events():
        rec.tap(e)
    rec.close()
    assert cli_main(["replay", path, "--headless"]) == EXIT_OK
    assert "received 5" in capsys.readouterr().out
    (tmp_path / "bad.jsonl").write_text("nope\n")
    assert cli_main(["replay", str(tmp_path / "bad.jsonl"), "--headless"]) == 1
    assert "line 1 is not valid JSON" in capsys.readouterr().err


def _headless(host: RuntimeHost):
    buf = io.StringIO()
    code = run_headless(host, console=Console(file=buf, width=200))
    return code, buf.getvalue()


def test_headless_success_and_summary(sim, tmp_path):
    host = RuntimeHost(make_spec(sim, tmp_path, "--env.total_steps", "3"), exit_when_finished=True)
    code, out = _headless(host)
    assert code == EXIT_OK, out
    assert "received 3 = completed" in out and "groups.jsonl" in out
    assert not host._thread.is_alive()


def test_headless_fatal_errors_exit_nonzero(tmp_path):
    # env file without an env class
    f = tmp_path / "not_an_env.py"
    f.write_text("VALUE = 1\n")
    code, out = _headless(RuntimeHost(RunSpec(env=str(f), runs_dir=str(tmp_path))))
    assert code == EXIT_FATAL and "defines no env class" in out
    # unreachable server: a loopback port nobody listens on
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spec = RunSpec(
        env="environments.terminal_tasks",
        flags=["--openai.base_url", f"http://127.0.0.1:{port}/v1"],
        runs_dir=str(tmp_path),
    )
    code, out = _headless(RuntimeHost(spec))
    assert code == EXIT_FATAL and f"127.0.0.1:{port}/v1' is not reachable" in out


def test_setup_raising_is_fatal_with_cause(sim, tmp_path):
    from environments.terminal_tasks.env import TerminalTasksEnv

    class BrokenSetup(TerminalTasksEnv):
        async def setup(self) -> None:
            raise FileNotFoundError("tasks file missing: /nowhere/tasks.jsonl")

    code, out = _headless(RuntimeHost(make_spec(sim, tmp_path, env=BrokenSetup)))
    assert code == EXIT_FATAL
    assert "setup() raised FileNotFoundError: tasks file missing" in out


def test_blocking_env_code_does_not_block_the_caller(sim, tmp_path, live):
    """A reward that blocks the runtime loop shows up as LoopLag; drain and the
    command future stay usable from this (the UI's) thread."""
    import threading

    from environments.terminal_tasks.env import TerminalTasksEnv

    entered, release = threading.Event(), threading.Event()

    class BlockingReward(TerminalTasksEnv):
        async def compute_reward(self, item, result, ctx):
            entered.set()
            release.wait(30)  # the classic mistake: sync work on the event loop (held by the test)
            return await super().compute_reward(item, result, ctx)

    p = live(make_spec(sim, tmp_path, "--env.total_steps", "2", env=BlockingReward, heartbeat_s=0.05))
    try:
        assert entered.wait(60), "no reward was computed"
        time.sleep(0.3)  # the loop stays blocked at least this long (a lower bound, not a deadline)
        # The loop is held until after these checks, so neither can be waiting for it.
        assert finishes(p.pump), "drain waited for the blocked runtime loop"
        fut = None

        def ask_resume() -> None:
            nonlocal fut
            fut = p.host.resume()

        assert finishes(ask_resume), "sending a command waited for the blocked runtime loop"
        assert fut is not None and not fut.done()  # the loop answers it once it is free
        assert p.host.pause().done()  # a pause closes intake from this thread, at once
    finally:
        release.set()
    fut.result(30)
    p.until(lambda s: s.loop_lag_max_ms >= 200, 60, "loop lag observed")


def test_host_and_the_fake_runtime_implement_the_runtime_api(tmp_path):
    """Front ends use done/join/fatal as well as the commands: all are in the protocol.
    (mypy checks the signatures: hermes_console_dev.fake_runtime._implementations.)"""
    from hermes_console_dev.fake_runtime import FakeRuntime

    assert {"done", "join", "fatal"} <= set(dir(RuntimeAPI)) | set(RuntimeAPI.__annotations__)
    host = RuntimeHost(RunSpec(env="environments.terminal_tasks", runs_dir=str(tmp_path)))
    fake = FakeRuntime(_events())
    for runtime in (host, fake):
        assert isinstance(runtime, RuntimeAPI), type(runtime).__name__
    assert fake.stop().done() and fake.done.done() and fake.join(1) and fake.fatal is None


def test_cli_rejects_bad_flags_before_starting(capsys):
    assert cli_main(["run", "environments.terminal_tasks", "--headless", "stray"]) == 1
    assert "unexpected argument 'stray'" in capsys.readouterr().err


def test_commands_after_stop_fail_clearly(sim, tmp_path, live):
    p = live(make_spec(sim, tmp_path, "--env.total_steps", "1000"))
    p.until(lambda s: s.status == "running", 30, "running")
    p.stop(deadline=0.1)
    with pytest.raises(RuntimeError, match="not running"):
        p.host.pause().result(5)
    assert p.host.done.done() and not p.host._thread.is_alive()


def test_start_returns_at_once_and_heavy_imports_happen_on_the_runtime_thread(tmp_path):
    """In a fresh interpreter: importing the CLI/host does not import atroposlib, and
    start() returns immediately with RuntimeStatus("loading") already queued."""
    import subprocess
    import sys

    code = f"""
import importlib.abc, sys, threading
from hermes_console.cli import main
from hermes_console.runtime.host import RuntimeHost
from hermes_console.runtime.config import RunSpec
assert "atroposlib.envs.base" not in sys.modules and "transformers" not in sys.modules, "heavy import at module level"
h = RuntimeHost(RunSpec(env="environments.terminal_tasks", runs_dir={str(tmp_path)!r},
                        flags=["--openai.base_url", "http://127.0.0.1:9/v1"]))
# Hold the runtime thread inside its first heavy import: start() must return anyway.
entered, release = threading.Event(), threading.Event()
class Hold(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "atroposlib.envs.base" and threading.current_thread() is not threading.main_thread():
            entered.set()
            release.wait(60)
        return None
sys.meta_path.insert(0, Hold())
started = threading.Event()
threading.Thread(target=lambda: (h.start(), started.set()), daemon=True).start()
assert started.wait(60), "start() waited for the heavy imports"
assert entered.wait(60), "the runtime thread never imported atroposlib"
first = h.drain()
assert first and first[0].kind == "runtime_status" and first[0].status == "loading", first
release.set()
h.done.result(60); h.join(10)
print("OK")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr
