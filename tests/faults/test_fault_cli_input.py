"""Bad command-line input (issue 19, point 7), through the real CLI: one line naming the
flag, the value and what is expected; exit 2; no traceback; nothing started."""

from __future__ import annotations

import pytest

from tests.faults.cli_stop_helpers import run_cli

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize(
    "args, flag, value",
    [
        (["--max-in-flight", "0"], "--max-in-flight", "0"),
        (["--max-in-flight", "many"], "--max-in-flight", "many"),
        (["--env.group_size", "-1"], "--env.group_size", "-1"),
        (["--env.total_steps=0"], "--env.total_steps", "0"),
        (["--openai.base_url", "not-a-url"], "--openai.base_url", "not-a-url"),
        (["--openai.timeout", "0"], "--openai.timeout", "0"),
        (
            ["--record", "/proc/sys/hermes-no-such-dir/events.jsonl"],
            "--record",
            "/proc/sys/hermes-no-such-dir/events.jsonl",
        ),
        (["--drain-deadline", "-1"], "--drain-deadline", "-1"),
    ],
)
def test_bad_run_flag_is_one_clear_line_and_exit_2(tmp_path, args, flag, value):
    proc = run_cli("run", "environments.terminal_tasks", "--headless", "--runs-dir", str(tmp_path), *args, timeout=60)
    err = proc.stderr.strip()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert len(err.splitlines()) == 1, err
    assert flag in err and value in err and "expected" in err, err
    assert not list(tmp_path.glob("*/groups.jsonl"))  # nothing started


@pytest.mark.parametrize("args, flag", [(["--speed", "0"], "--speed")])
def test_bad_replay_flag(tmp_path, args, flag):
    log = tmp_path / "e.jsonl"
    log.write_text("")
    proc = run_cli("replay", str(log), "--headless", *args, timeout=60)
    assert proc.returncode == 2 and flag in proc.stderr and "expected" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_bad_value_in_a_config_file_names_the_field(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("env:\n  group_size: -1\n")
    proc = run_cli(
        "run",
        "environments.terminal_tasks",
        "--headless",
        "--runs-dir",
        str(tmp_path),
        "--config",
        str(cfg),
        "--no-server-check",
        timeout=90,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "env.group_size = -1: expected a whole number >= 1" in out
    assert "Traceback" not in out


def test_the_console_ui_drains_for_the_given_drain_deadline(monkeypatch, tmp_path):
    from concurrent.futures import Future

    from hermes_console import cli

    seen = {}

    class Runtime:
        def stop(self, deadline):
            seen.setdefault("stops", []).append(deadline)
            done: Future = Future()
            done.set_result(None)
            return done

        def join(self, timeout=None):
            return True

    def fake_console(runtime, config=None):
        seen["ui_deadline"] = config.drain_deadline_s
        return 0

    monkeypatch.setattr("hermes_console.ui.app.run_console", fake_console)
    monkeypatch.setattr("hermes_console.ui.config.DEFAULT_KEYS_FILE", tmp_path / "no-keys.yaml")
    assert cli._front_end(Runtime(), headless=False, drain_deadline_s=42.0) == 0
    assert seen == {"ui_deadline": 42.0, "stops": [42.0]}
