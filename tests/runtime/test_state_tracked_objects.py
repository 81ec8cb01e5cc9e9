"""Objects the garbage collector tracks per rollout in the console's state (issue 16, P3).

At 1,024 rollouts in flight the young collections walk every tracked object made since
the last one, holding the GIL while a key waits; a rollout's view should not carry lists
that stay empty until it finishes. Oracle: ``gc.get_objects()`` (every tracked object),
counted around the reducer applying the events.
"""

from __future__ import annotations

import gc

from environments import events as ev
from hermes_console.runtime.state import ConsoleState

N = 800


def _tracked_growth(s: ConsoleState, events: list[object]) -> float:
    gc.collect()
    before = len(gc.get_objects())
    for e in events:
        s.apply(e)
    gc.collect()
    return (len(gc.get_objects()) - before) / N


def test_a_running_rollout_holds_no_lists_it_fills_only_at_its_end() -> None:
    s = ConsoleState()
    started = [ev.RolloutStarted(rollout_id=f"r{i}", group_id=f"g{i // 8}", prompt="p") for i in range(N)]
    # Its view, its turns (a deque), its tool-call list, its share of a group view and the
    # history's timing record: under 6 (8.6 when the data-health lists were made at start).
    assert _tracked_growth(s, started) < 6.0


def test_finished_rollouts_keep_their_trainer_figures() -> None:
    s = ConsoleState()
    s.apply(ev.RolloutStarted(rollout_id="r1", group_id="g1", prompt="p"))
    s.apply(
        ev.RolloutFinished(
            rollout_id="r1",
            group_id="g1",
            reward=1.0,
            turns_used=2,
            finished_naturally=True,
            trained_run_tokens=[5, 7],
            trained_run_logprob=[-0.5, -0.25],
            data_problems=["drift: turn 2"],
        )
    )
    r = s.rollouts["r1"]
    assert list(r.trained_run_tokens) == [5, 7]
    assert list(r.trained_run_logprob) == [-0.5, -0.25]
    assert list(r.data_problems) == ["drift: turn 2"]
    # a tuple of numbers or strings is untracked by the collector once it has looked at it
    gc.collect()
    assert not gc.is_tracked(r.trained_run_tokens) and not gc.is_tracked(r.data_problems)
