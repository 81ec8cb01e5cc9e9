"""The UI's CPU budget controller (pure logic, fake clocks): throttle while busy, fast when idle."""

from __future__ import annotations

import pytest

from hermes_console.ui.budget import UiBudget


class Clocks:
    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0
        self.others = 0.0  # the env's threads
        self.env_share = 0.0

    def advance(self, seconds: float, cpu_share: float) -> None:
        self.wall += seconds
        self.cpu += seconds * cpu_share
        self.others += seconds * self.env_share


def make(clocks: Clocks, share: float = 0.05) -> UiBudget:
    return UiBudget(
        share,
        0.25,
        0.05,
        max_redraw_s=2.0,
        max_drain_s=0.5,
        window_s=1.0,
        cpu=lambda: clocks.cpu,
        wall=lambda: clocks.wall,
        others_cpu=lambda: clocks.others,
    )


def window(b: UiBudget, clocks: Clocks, cpu_share: float, events: int) -> None:
    clocks.advance(1.0, cpu_share)
    b.drained(events)
    assert b.update() == pytest.approx(cpu_share)


def test_busy_and_over_budget_spaces_redraws_out_up_to_the_cap_and_says_so() -> None:
    clocks = Clocks()
    b = make(clocks)
    assert not b.throttled and b.note() == ""
    seen: list[float] = []
    for _ in range(10):
        window(b, clocks, 0.40, events=10_000)  # the UI used 40% of a core while events arrived
        seen.append(b.redraw_s)
    assert seen[0] == 0.25  # one busy window is a burst, not a busy env
    assert seen == sorted(seen) and seen[1] > 0.25 and seen[-1] == 2.0  # then grows, capped
    assert b.drain_s == 0.5
    assert b.throttled and "UI throttled" in b.note() and "budget 5%" in b.note()


def test_idle_env_returns_to_the_fast_rates_at_once() -> None:
    clocks = Clocks()
    b = make(clocks)
    for _ in range(5):
        window(b, clocks, 0.5, events=1_000)
    assert b.throttled
    window(b, clocks, 0.5, events=0)  # no events: nothing to protect, redraw fast
    assert (b.redraw_s, b.drain_s) == (0.25, 0.05) and not b.throttled
    for _ in range(5):
        window(b, clocks, 0.5, events=1_000)
    assert b.throttled
    window(b, clocks, 0.5, events=20)  # heartbeats only (lag, server stats): idle too
    assert not b.busy and not b.throttled


def test_well_under_budget_speeds_up_step_by_step() -> None:
    clocks = Clocks()
    b = make(clocks)
    for _ in range(5):
        window(b, clocks, 0.5, events=1_000)
    slow = b.redraw_s
    window(b, clocks, 0.01, events=1_000)
    assert b.redraw_s == slow  # one quiet window may be one between two spaced-out redraws
    window(b, clocks, 0.01, events=1_000)
    assert 0.25 <= b.redraw_s < slow
    for _ in range(20):
        window(b, clocks, 0.01, events=1_000)
    assert b.redraw_s == 0.25


def test_pacing_and_kick() -> None:
    clocks = Clocks()
    b = make(clocks)
    assert b.drain_due() and b.redraw_due()
    b.drained(1)
    b.redrawn()
    assert not b.drain_due() and not b.redraw_due()
    clocks.advance(0.05, 0.0)
    assert b.drain_due() and not b.redraw_due()
    b.kick()  # a key press: its effect shows on the next tick
    assert b.redraw_due()


def test_budget_zero_never_throttles() -> None:
    clocks = Clocks()
    b = make(clocks, share=0.0)
    for _ in range(5):
        window(b, clocks, 1.0, events=1_000)
    assert not b.throttled and b.redraw_s == 0.25


def test_bad_settings_are_refused_with_the_values() -> None:
    with pytest.raises(ValueError, match="share must be >= 0"):
        UiBudget(-1.0, 0.25, 0.05)


def test_a_step_that_left_a_backlog_is_followed_at_the_base_rate() -> None:
    clocks = Clocks()
    b = make(clocks)
    for _ in range(6):
        window(b, clocks, 0.5, events=1_000)
    assert b.drain_s == 0.5
    b.drained(1_000, backlog=True)
    clocks.advance(0.05, 0.0)
    assert b.drain_due()  # catching up is never throttled
    b.drained(10, backlog=False)
    clocks.advance(0.05, 0.0)
    assert not b.drain_due()


def test_a_cpu_bound_env_with_few_events_is_busy_too() -> None:
    """One group in flight against a fast server: ~50 events/s, but the env's loop thread
    needs the whole GIL; the UI must keep to its budget then as well (BENCHMARKS P1)."""
    clocks = Clocks()
    b = make(clocks)
    clocks.env_share = 0.9
    window(b, clocks, 0.30, events=50)
    # the env's threads use the CPU: throttled from the first window, no patience for a burst
    assert b.busy and b.others_share == pytest.approx(0.9) and b.throttled
    for _ in range(5):
        window(b, clocks, 0.30, events=50)
    assert b.redraw_s == 2.0
    clocks.env_share = 0.4  # half a core is busy too (one GIL): the UI's cycles are the env's loss
    b2 = make(clocks)
    window(b2, clocks, 0.30, events=50)
    assert b2.busy and b2.throttled
    clocks.env_share = 0.05  # the env went quiet (waiting on its server): fast again at once
    window(b, clocks, 0.30, events=50)
    assert not b.busy and not b.throttled


def test_windows_alternating_around_a_spaced_out_redraw_hold_the_pace() -> None:
    """Redraws every ~1.7 s, windows of 1 s: one window holds a redraw (over budget), the
    next none (far under). Together they are on budget: the pace must hold, not swing."""
    clocks = Clocks()
    b = make(clocks)
    for _ in range(4):
        window(b, clocks, 0.3, events=1_000)
    paced = b.redraw_s
    assert paced > 0.25
    seen = []
    for _ in range(6):
        window(b, clocks, 0.08, events=1_000)
        seen.append(b.redraw_s)
        window(b, clocks, 0.01, events=1_000)
        seen.append(b.redraw_s)
    assert seen == [paced] * 12


def test_a_run_starting_on_a_busy_env_is_paced_from_its_first_window() -> None:
    """The console's first paint of a run costs ~45 % of a core for a window (BENCHMARKS P1):
    with the env's threads busy, the next window is already at the pace the overshoot asks
    for, not one more window at the base rate and then a 4x step."""
    clocks = Clocks()
    clocks.env_share = 0.4
    b = make(clocks, share=0.02)
    window(b, clocks, 0.45, events=50)
    assert b.throttled and b.redraw_s == 2.0  # 22x over budget: one step to the cap
    b = UiBudget(
        0.02,
        0.25,
        0.05,
        max_step=4.0,
        cpu=lambda: clocks.cpu,
        wall=lambda: clocks.wall,
        others_cpu=lambda: clocks.others,
    )
    window(b, clocks, 0.45, events=50)
    assert b.redraw_s == 1.0  # a step never goes beyond max_step
    clocks.env_share = 0.1  # the env mostly waits: the same window is a burst
    b = make(clocks, share=0.02)
    window(b, clocks, 0.45, events=500)
    assert b.busy and not b.throttled
