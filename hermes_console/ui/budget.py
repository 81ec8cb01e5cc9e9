"""The UI's CPU budget: how often to drain and redraw so the UI thread stays cheap.

The UI shares one GIL with the env. While the env is busy (events keep arriving) the UI
thread may use at most ``share`` of one core, measured on the UI thread itself with
``time.thread_time()`` (CPU time, so waiting for the GIL is not counted as cost). Each
window the controller compares the share used with the budget: over it, redraws and
drains are spaced out (the queue folds what waits meanwhile, so a longer step is not a
longer backlog to apply); well under it, they speed up again; with the env idle it
returns to the fast base rates at once. The env is busy when events arrive faster than
``busy_events_per_s`` (a trickle such as lag and server heartbeats is not), or when the
process's other threads (the env loop, the tool pool) use more than ``busy_cpu_share`` of a
core: a CPU-bound env at one group in flight emits few events yet loses every cycle the UI
takes from its GIL. While the env's threads use that much CPU, the first window over budget
slows the UI down; an env busy only by its event rate (threads mostly waiting) gets
``patience`` windows over budget in a row first, so a burst (a log loaded, a group finishing)
changes nothing. Each slow-down goes as far as the window's overshoot says (up to
``max_step``×), so a run's first paint is followed by the budget's pace, not by seconds of
base-rate redraws.

Pure logic, no Textual: the clocks are injectable for tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable

Clock = Callable[[], float]


class UiBudget:
    def __init__(
        self,
        share: float,
        base_redraw_s: float,
        base_drain_s: float,
        *,
        max_redraw_s: float = 2.0,
        max_drain_s: float = 0.5,
        window_s: float = 1.0,
        patience: int = 2,
        busy_events_per_s: float = 100.0,
        busy_cpu_share: float = 0.3,
        max_step: float = 8.0,
        cpu: Clock = time.thread_time,
        wall: Clock = time.monotonic,
        others_cpu: Clock | None = None,
    ) -> None:
        if share < 0 or base_redraw_s <= 0 or base_drain_s <= 0:
            raise ValueError(
                f"UiBudget: share must be >= 0 and intervals > 0, got share={share}, "
                f"redraw={base_redraw_s}, drain={base_drain_s}"
            )
        self.share = share  # 0 disables the budget (always the base rates)
        self.base_redraw_s = base_redraw_s
        self.base_drain_s = base_drain_s
        self.max_redraw_s = max(max_redraw_s, base_redraw_s)
        self.max_drain_s = max(max_drain_s, base_drain_s)
        self.window_s = window_s
        self.busy_events_per_s = busy_events_per_s  # below this, heartbeats and a trickle: not busy
        # the other threads' share of a core that makes the env busy, and every UI cycle its loss
        self.busy_cpu_share = busy_cpu_share
        self.max_step = max(1.5, max_step)  # the most one window may slow the pace by
        # CPU of every other thread of this process (read on the UI thread, like ``cpu``)
        self._others = others_cpu or (lambda: time.process_time() - time.thread_time())
        self.patience = max(1, patience)  # over-budget windows in a row before slowing down (not a burst)
        self._over = 0
        self._cpu, self._wall = cpu, wall
        self.redraw_s = base_redraw_s
        self.drain_s = base_drain_s
        now = wall()
        self._last_redraw = self._last_drain = -1e18
        self._backlog = False  # the last drain step left items waiting
        self._win_wall, self._win_cpu = now, cpu()
        self._win_others = self._others()
        self._win_events = 0
        self.used_share = 0.0  # share of a core the UI thread used over the last window
        self._previous: float | None = None  # the window before's share, while busy
        self.others_share = 0.0  # and the process's other threads
        self.busy = False

    # ------------------------------------------------------------------ pacing

    def drain_due(self) -> bool:
        # A step that left a backlog is followed at the base rate: the budget spaces out
        # drawing, never the catching up that keeps the queue bounded.
        interval = self.base_drain_s if self._backlog else self.drain_s
        return self._wall() - self._last_drain >= interval * 0.95  # a timer tick early is on time

    def redraw_due(self) -> bool:
        return self._wall() - self._last_redraw >= self.redraw_s * 0.95

    def drained(self, events: int, backlog: bool = False) -> None:
        self._last_drain = self._wall()
        self._win_events += events
        self._backlog = backlog

    def redrawn(self) -> None:
        self._last_redraw = self._wall()

    def kick(self) -> None:
        """The operator did something: show its effect on the next tick."""
        self._last_redraw = -1e18

    # ------------------------------------------------------------------ control

    def update(self) -> float | None:
        """Close the window if it is over; returns the share used when it adjusted the rates."""
        now = self._wall()
        span = now - self._win_wall
        if span < self.window_s:
            return None
        cpu, others = self._cpu(), self._others()
        self.used_share = max(0.0, cpu - self._win_cpu) / span
        self.others_share = max(0.0, others - self._win_others) / span
        many_events = self._win_events > 0 and self._win_events >= self.busy_events_per_s * span
        self.busy = many_events or self.others_share > self.busy_cpu_share
        self._win_wall, self._win_cpu, self._win_others, self._win_events = now, cpu, others, 0
        # Decide on this window and the one before together: once redraws are spaced out
        # beyond a window, windows alternate between one with a redraw (over budget) and one
        # without (far under), and the share of one window swung the pace every window.
        seen = self.used_share if self._previous is None else 0.5 * (self.used_share + self._previous)
        self._previous = self.used_share if self.busy else None
        over = bool(self.share) and self.busy and min(seen, self.used_share) > self.share
        self._over = self._over + 1 if over else 0
        if not self.share or not self.busy:
            self.redraw_s, self.drain_s = self.base_redraw_s, self.base_drain_s  # idle: fast again
        elif over and self._over < self.patience and self.others_share <= self.busy_cpu_share:
            pass  # a burst (a log loaded, a group finishing) while the env's threads mostly wait
        elif over:
            factor = min(self.max_step, max(1.5, min(seen, self.used_share) / self.share))
            self.redraw_s = min(self.max_redraw_s, self.redraw_s * factor)
            self.drain_s = min(self.max_drain_s, self.drain_s * factor)
        elif seen < 0.5 * self.share:
            self.redraw_s = max(self.base_redraw_s, self.redraw_s / 1.5)
            self.drain_s = max(self.base_drain_s, self.drain_s / 1.5)
        return self.used_share

    @property
    def throttled(self) -> bool:
        return self.redraw_s > self.base_redraw_s * 1.01

    def note(self) -> str:
        """What the status bar says while throttling (empty otherwise)."""
        if not self.throttled:
            return ""
        return (
            f"UI throttled: redraw every {self.redraw_s:.1f}s "
            f"(CPU {self.used_share:.0%} of a core, budget {self.share:.0%})"
        )
