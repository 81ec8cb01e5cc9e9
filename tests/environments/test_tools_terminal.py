"""The terminal tool over a real local sandbox (behaviour 33)."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from environments.sandboxes import cleanup_vm, get_sandbox
from environments.tools import handle_function_call
from environments.tools.terminal import (
    exit_code_meaning,
    long_lived_reason,
    redact_output,
    terminal_tool,
    truncate_middle,
)
from tests.helpers.waits import wait_for


@pytest.fixture
def task():
    task_id = f"term-{uuid.uuid4().hex[:8]}"
    yield task_id
    cleanup_vm(task_id)


def run(task, command, **args):
    return json.loads(handle_function_call("terminal", {"command": command, **args}, task_id=task))


def test_output_exit_code_and_no_error(task):
    out = run(task, "echo hello; echo oops >&2; exit 3")
    assert out["output"] == "hello\noops\n"
    assert out["exit_code"] == 3
    assert out["error"] is None


def test_session_state_persists_between_calls(task):
    run(task, "mkdir -p sub && cd sub && export GREETING=hi")
    out = run(task, 'echo "$GREETING $(basename "$PWD")"')
    assert out["output"].strip() == "hi sub"


def test_workdir_runs_one_command_elsewhere(task):
    run(task, "mkdir -p elsewhere")
    assert run(task, "basename $PWD", workdir="elsewhere")["output"].strip() == "elsewhere"
    assert run(task, "basename $PWD")["output"].strip() != "elsewhere"
    bad = run(task, "ls", workdir="x; rm -rf /")
    assert bad["exit_code"] == -1 and "'workdir'" in bad["error"]


def test_non_string_command_is_exit_minus_one():
    out = terminal_tool(["ls", "-l"])
    assert out["exit_code"] == -1 and "'command' must be a string, got list" in out["error"]
    assert terminal_tool("   ")["exit_code"] == -1


def test_timeout_above_cap_is_rejected_with_guidance(task, monkeypatch):
    out = run(task, "echo hi", timeout=601)
    assert out["exit_code"] == -1
    assert "exceeds the foreground limit of 600 seconds" in out["error"] and "background=true" in out["error"]
    monkeypatch.setenv("TERMINAL_MAX_FOREGROUND_TIMEOUT", "5")
    assert "limit of 5 seconds" in run(task, "echo hi", timeout=6)["error"]
    assert run(task, "echo hi", timeout=5)["exit_code"] == 0


@pytest.mark.parametrize(
    "command",
    [
        "nohup python3 app.py",
        "sleep 100 &",
        "sleep 100 & echo started",
        "setsid ./server",
        "python3 -m http.server 8000",
        "uvicorn app:app --port 8000",
        "npm run dev",
        "npm start",
        "flask run",
        "tail -f log.txt",
    ],
)
def test_long_lived_foreground_commands_are_refused(task, command):
    out = run(task, command)
    assert out["exit_code"] == -1
    assert "background=true" in out["error"]


@pytest.mark.parametrize("command", ["make 2>&1 | tail", "a && b", "echo 'a & b'", "ls &> out.txt", "echo nohupx"])
def test_ordinary_commands_are_not_mistaken_for_servers(command):
    assert long_lived_reason(command) is None


def test_background_returns_at_once_with_a_pid_and_log(task):
    started = time.monotonic()
    out = run(task, "echo started-bg; sleep 300", background=True)
    assert time.monotonic() - started < 60  # returned at once, not after the job's 300 s
    assert out["exit_code"] == 0 and out["error"] is None and out["pid"] > 0
    assert wait_for(lambda: run(task, f"cat {out['log_path']}")["output"].strip() == "started-bg")
    assert run(task, f"kill -0 {out['pid']} && echo alive")["output"].strip() == "alive"


def test_timeout_gives_124_and_a_message(task):
    started = time.monotonic()
    out = run(task, "sleep 300", timeout=1)
    assert time.monotonic() - started < 60  # cut by the timeout, not after 300 s
    assert out["exit_code"] == 124
    assert out["error"] == "Command timed out after 1 seconds"


def test_default_timeout_comes_from_sandbox_settings(task):
    from environments.sandboxes import configure

    configure(timeout=1)  # explicit override: wins over TERMINAL_TIMEOUT and anything a test left behind
    try:
        out = run(task, "sleep 10")
    finally:
        configure(timeout=None)
    assert out["exit_code"] == 124 and out["error"] == "Command timed out after 1 seconds"


def test_ansi_is_stripped(task):
    out = run(task, r"printf '\033[1;31mred\033[0m plain \033]0;title\007done\n'")
    assert out["output"] == "red plain done\n"


def test_secrets_printed_by_a_command_are_redacted(task):
    secret = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2"
    out = run(task, f"echo 'token is {secret}'; echo API_KEY=hunter2hunter2")
    assert secret not in out["output"] and "hunter2hunter2" not in out["output"]
    assert "«redacted»" in out["output"]


def test_long_output_keeps_head_and_tail(task):
    out = run(task, "python3 -c \"print('A' * 30000 + 'B' * 40000)\"")
    text = out["output"]
    assert len(text) < 51_000
    assert text.startswith("A" * 20_000)
    assert text.rstrip("\n").endswith("B" * 29_000)
    assert "output truncated" in text


def test_truncate_middle_split():
    text = "h" * 60 + "t" * 60
    cut = truncate_middle(text, 100)
    assert cut.startswith("h" * 40) and cut.endswith("t" * 60) and "20 characters omitted" in cut
    assert truncate_middle("short", 100) == "short"


def test_exit_code_meaning(task):
    out = run(task, "echo abc | grep zzz")
    assert out["exit_code"] == 1 and out["exit_code_meaning"].startswith("No matches")
    assert exit_code_meaning("diff a b", 1).startswith("Files differ")
    assert exit_code_meaning("test -f nope", 1) == "Condition evaluated to false"
    assert exit_code_meaning("ls nope", 2) is None
    assert "exit_code_meaning" not in run(task, "false")


def test_sandbox_failure_is_reported_not_raised(task):
    get_sandbox(task).cleanup()  # closed under the tool's feet: the next call gets a fresh one
    assert run(task, "echo again")["output"] == "again\n"


def test_redaction_stays_fast_and_correct_on_long_unbroken_output():
    secret = "sk-" + "Z9" * 20
    text = "A" * 200_000 + " " + secret + " API_KEY=" + "q" * 300 + " " + "b" * 500 + secret + "\n"
    started = time.thread_time()  # CPU time of this thread: a loaded machine does not inflate it
    out = redact_output(text)
    assert time.thread_time() - started < 3.0
    assert secret not in out and "q" * 300 not in out
    assert out.startswith("A" * 200_000) and "b" * 500 in out


def test_background_is_refused_where_it_cannot_survive(task, monkeypatch):
    from environments.tools import sandbox_access
    from environments.tools import terminal as term

    real = sandbox_access.get_sandbox

    class Ephemeral:
        backend = "ephemeral"

        def __init__(self, inner):
            self.workspace = inner.workspace

    monkeypatch.setattr(term, "NO_BACKGROUND_BACKENDS", frozenset({"ephemeral"}))
    monkeypatch.setattr(sandbox_access, "get_sandbox", lambda tid: Ephemeral(real(tid)))
    out = run(task, "sleep 30", background=True)
    assert out["exit_code"] == -1 and "not supported on the ephemeral sandbox" in out["error"]


@pytest.mark.parametrize(
    "command",
    [
        "sleep 100 >/dev/null 2>&1 &",
        "nohup python3 -m http.server 8000 > srv.log 2>&1 &",
        "setsid sleep 100 &>/dev/null &",
    ],
)
def test_background_job_with_redirected_output_is_allowed(task, command):
    out = run(task, command, timeout=20)
    # exit 0 before the 20 s timeout, while each job runs 100 s or forever: returned at once,
    # the job lives on in the machine
    assert out["exit_code"] == 0 and out["error"] is None, out
