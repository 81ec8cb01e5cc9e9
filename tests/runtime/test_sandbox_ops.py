"""Operator sandbox commands: clear, short errors for toasts."""

from __future__ import annotations


def test_acting_on_a_closed_sandbox_is_one_short_line():
    import uuid

    import pytest

    from environments import sandboxes
    from hermes_console.runtime import sandbox_ops

    others = [str(uuid.uuid4()) for _ in range(3)]
    for task_id in others:
        sandboxes.get_sandbox(task_id)
    try:
        gone = str(uuid.uuid4())
        with pytest.raises(KeyError) as info:
            sandbox_ops.kill(gone)
        message = str(info.value)
        assert "is closed (or never existed)" in message and gone[:12] in message
        assert not any(other[:8] in message for other in others)  # no list of unrelated ids
    finally:
        for task_id in others:
            sandboxes.cleanup_vm(task_id)
