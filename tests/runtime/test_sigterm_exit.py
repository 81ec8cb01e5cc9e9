"""What a SIGTERM'd headless host reports: 0 for the stop a scheduler asked for and got (nothing
cancelled, nothing left unconfirmed), 143 when the drain lost something. The end-to-end checks
are in tests/faults/test_fault_stop.py and tests/scaleout/test_sigterm_one_host.py."""

from __future__ import annotations

from hermes_console.runtime import events as rev
from hermes_console.runtime.headless import lost_nothing
from hermes_console.runtime.state import ConsoleState


def _state(received: int, completed: int, cancelled: int = 0, send_errors: int | None = None) -> ConsoleState:
    s = ConsoleState()
    s.accounting.received, s.accounting.completed, s.accounting.cancelled = received, completed, cancelled
    if send_errors is not None:
        s.trainer = rev.TrainerStatus(state="running", groups_sent=completed - send_errors, send_errors=send_errors)
    return s


def test_a_clean_drain_lost_nothing() -> None:
    assert lost_nothing(_state(5, 5))
    assert lost_nothing(_state(5, 5, send_errors=0))


def test_cancelled_in_flight_or_unconfirmed_groups_are_losses() -> None:
    assert not lost_nothing(_state(5, 4, cancelled=1))
    assert not lost_nothing(_state(5, 4))  # one still in flight when the host gave up waiting
    assert not lost_nothing(_state(5, 5, send_errors=1))  # kept, but the trainer never confirmed it
