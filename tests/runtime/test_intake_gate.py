"""IntakeGate on its own (no env, no loop thread): each hold closes it, only its owner's release
reopens it, the serve pacer is asked per admission, stop and close are for good, and the status
the operator sees follows pause/drain/resume. The live behaviour is in test_intake.py."""

from __future__ import annotations

import asyncio

from environments import events
from hermes_console.runtime.intake import OPERATOR, PHASE_SWITCH, TRAINER, IntakeGate


def test_holds_pacer_stop_and_close():
    flying = [0]
    gate = IntakeGate(lambda: flying[0], max_in_flight=2)
    assert gate.open and gate.has_room
    gate.hold(TRAINER)
    gate.hold(PHASE_SWITCH)
    assert not gate.open
    assert gate.held_elsewhere()  # a phase switch is not the trainer
    gate.release(PHASE_SWITCH)
    assert not gate.open and not gate.held_elsewhere()  # only the trainer holds it now
    gate.release(TRAINER)
    asked: list[int] = []
    gate.pace_with(lambda n: asked.append(n) is None and n < 1)
    flying[0] = 1
    assert not gate.open and asked == [1]  # the pacer sees the groups in flight
    flying[0] = 0
    assert gate.open
    flying[0] = 2
    assert not gate.has_room
    assert gate.close("the env cannot give items") and not gate.close("second reason")
    assert gate.closed_reason == "the env cannot give items" and not gate.open
    gate2 = IntakeGate(lambda: 0, 1)
    gate2.stop()
    assert not gate2.open and gate2.held_elsewhere()


def test_operator_status_follows_pause_drain_and_resume():
    seen: list[tuple[str, str]] = []

    def watch(event: events.Event) -> None:
        if event.kind == "runtime_status":
            seen.append((event.status, event.detail))  # type: ignore[attr-defined]

    flying = [1]
    gate = IntakeGate(lambda: flying[0], 4)
    gate.set_status("running")
    events.add_observer(watch)
    try:
        gate.pause()
        assert gate.held_by(OPERATOR) and not gate.open
        gate.group_ended()  # still one in flight: still draining
        flying[0] = 0
        gate.group_ended()
        gate.resume()
        gate.finished = True
        gate.pause()  # a finished run stays "finished" in the status line
    finally:
        events.remove_observer(watch)
    assert [s for s, _ in seen] == ["draining", "paused", "running"]


async def test_wait_wakes_on_any_change():
    gate = IntakeGate(lambda: 0, 1)
    gate.hold(OPERATOR)
    waiter = asyncio.create_task(gate.wait())
    await asyncio.sleep(0)
    assert not waiter.done()
    gate.release(OPERATOR)
    await asyncio.wait_for(waiter, 30)
