"""The operator gives a running command more time (not the idle lifetime): a real local
sandbox's command that would time out finishes instead, and the registry reports the new timeout."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from environments import sandboxes as sb
from hermes_console.runtime import sandbox_ops
from tests.helpers.sandboxes import local_sandbox

TASK = "extend-command-test"


@pytest.fixture
def box(tmp_path: Path):
    yield from local_sandbox(tmp_path, TASK)


def test_extend_command_lets_a_running_command_finish(box) -> None:
    assert box.execute("true", 30).exit_code == 0  # the shell is up: the next command starts at once
    with pytest.raises(LookupError, match="runs no command"):
        sandbox_ops.extend_command(TASK, 30)
    done = []
    # 10 s: the extension below must land before the command's own timeout, even on a stalled machine
    runner = threading.Thread(target=lambda: done.append(box.execute("sleep 12; echo finished", 10)), daemon=True)
    runner.start()
    end = time.monotonic() + 30
    while (sb.get_sandbox_info(TASK).running_command is None) and time.monotonic() < end:
        time.sleep(0.02)
    assert sb.get_sandbox_info(TASK).running_command is not None, "the command never showed as running"
    assert sandbox_ops.extend_command(TASK, 60) == pytest.approx(70)
    assert sb.get_sandbox_info(TASK).running_timeout_s == pytest.approx(70)
    runner.join(90)
    [result] = done
    assert not result.timed_out and result.exit_code == 0 and "finished" in result.output, result
    # the next command has its own timeout again (the extension is gone)
    result = box.execute("sleep 5", 1)
    assert result.timed_out and "timed out after 1s" in result.output
