"""IntakeGate: whether the driver may take the next item (``get_next_item``).

The driver owns one gate; the trainer link and evaluation hold and release it through
these methods and never touch the driver (nor the driver theirs). What the gate knows:

- the *holds*: the operator (pause), the trainer (not registered yet), a phase switch;
- ``stopping`` (a stop was asked: never opens again) and ``closed_reason`` (intake stopped for
  good because the env or the sinks cannot go on);
- the serve-mode pacer: a callable asked per admission with the groups in flight;
- the in-flight count and its cap (read through a callable: the driver owns the groups);
- the wake event the intake loop sleeps on, and the run status shown to the operator.

Everything here runs on the host's loop thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from environments import events
from hermes_console.runtime import events as rev

OPERATOR = "operator"
TRAINER = "trainer"
PHASE_SWITCH = "phase switch"


class IntakeGate:
    def __init__(self, in_flight: Callable[[], int], max_in_flight: int) -> None:
        self.in_flight = in_flight
        self.max_in_flight = max_in_flight
        self.status = "loading"
        self.stopping = False
        self.finished = False  # the run ended by itself: it stays "finished"
        self.closed_reason: str | None = None
        self._holds: set[str] = set()
        # The operator's hold is a flag of its own: a plain bool any thread may set, so a pause
        # closes intake the moment the key is handled, not when a busy loop gets to it.
        self._operator_hold = False
        self._pacer: Callable[[int], bool] | None = None
        self._wake = asyncio.Event()

    # ------------------------------------------------------------------ holds

    def hold(self, who: str) -> None:
        if who == OPERATOR:
            self._operator_hold = True
        else:
            self._holds.add(who)
        self.poke()

    def release(self, who: str) -> None:
        if who == OPERATOR:
            self._operator_hold = False
        else:
            self._holds.discard(who)
        self.poke()

    def held_by(self, who: str) -> bool:
        return self._operator_hold if who == OPERATOR else who in self._holds

    def hold_for_operator_now(self) -> None:
        """From any thread: no item is taken from here on. The loop then does the rest
        (status, wake-up) in :meth:`pause`; a resume queued before it still runs before it."""
        self._operator_hold = True

    def pace_with(self, admits: Callable[[int], bool] | None) -> None:
        """Serve mode: ``admits(in_flight)`` says whether the trainer takes another group now."""
        self._pacer = admits
        self.poke()

    def close(self, reason: str) -> bool:
        """Intake stops for good (the first reason wins); False when it was already closed."""
        if self.closed_reason is not None:
            return False
        self.closed_reason = reason
        self.poke()
        return True

    def stop(self) -> None:
        self.stopping = True
        self.poke()

    @property
    def open(self) -> bool:
        """No hold, no stop, not closed, and (serve mode) the trainer takes another group."""
        if self._holds or self._operator_hold or self.stopping or self.closed_reason is not None:
            return False
        return self._pacer is None or self._pacer(self.in_flight())

    @property
    def has_room(self) -> bool:
        return self.in_flight() < self.max_in_flight

    def held_elsewhere(self) -> bool:
        """Held by something other than the trainer (the trainer link's wait accounting)."""
        return bool(self._holds - {TRAINER}) or self._operator_hold or self.stopping

    # ------------------------------------------------------------------ operator

    def pause(self) -> None:
        self.hold(OPERATOR)
        if not self.stopping and not self.finished:
            self.set_status("draining" if self.in_flight() else "paused")

    def resume(self) -> None:
        self.release(OPERATOR)
        if not self.stopping and not self.finished:
            self.set_status("running")

    def group_ended(self) -> None:
        """A group left flight: a drain may be over, and the loop may take the next item."""
        if not self.in_flight() and self.status == "draining":
            self.set_status("paused")
        self.poke()

    # ------------------------------------------------------------------ status and wake-ups

    def set_status(self, status: str, detail: str = "") -> None:
        if status != self.status:
            self.status = status
            events.emit(rev.RuntimeStatus(status=status, detail=detail))

    def poke(self) -> None:
        self._wake.set()

    async def wait(self) -> None:
        """Sleep until something may have changed (a hold, a group ending, the trainer)."""
        self._wake.clear()
        await self._wake.wait()
