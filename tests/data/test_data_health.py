"""Data health: per-rollout figures on RolloutFinished, summed in ConsoleState, shown in the headless summary."""

from __future__ import annotations

import io

from rich.console import Console

from environments import events as ev
from hermes_console.runtime.headless import summary_table
from hermes_console.runtime.state import ConsoleState


def finished(rid: str, **kw) -> ev.RolloutFinished:
    base = dict(
        rollout_id=rid,
        group_id="g",
        reward=1.0,
        turns_used=3,
        finished_naturally=True,
        phase=2,
        token_count=100,
        node_count=1,
        trainable_tokens=40,
        trainable_turns=3,
        assistant_turns=3,
    )
    base.update(kw)
    return ev.RolloutFinished(**base)


def summary(state: ConsoleState) -> str:
    buf = io.StringIO()
    Console(file=buf, width=220).print(summary_table(state))
    return buf.getvalue()


def test_healthy_run_is_summed_and_shown():
    state = ConsoleState()
    state.apply_all([finished("a"), finished("b", trainable_tokens=20, token_count=60)])
    dh = state.data_health
    assert (dh.rollouts, dh.tokens, dh.trainable_tokens, dh.trainable_turns, dh.assistant_turns) == (2, 160, 60, 6, 6)
    assert dh.healthy and state.rollouts["a"].trainable_turns == 3
    text = summary(state)
    assert "trained 60/160 tokens" in text and "turns 6/6" in text and "UNHEALTHY" not in text


def test_unhealthy_run_says_why():
    state = ConsoleState()
    state.apply_all(
        [
            finished("a"),
            finished("b", node_count=3, drift_count=2, trainable_turns=1),  # the old Phase 2 behaviour
            finished("c", phase=1, node_count=0, placeholder_tokens=True, trainable_turns=0),
        ]
    )
    dh = state.data_health
    assert dh.multi_node == 1 and dh.drift == 2 and dh.placeholder == 1 and dh.missing_turns == 2
    assert not dh.healthy
    text = summary(state)
    assert "UNHEALTHY" in text and "placeholder tokens" in text and "untrained assistant turns" in text
    assert "split over several nodes" in text


def test_old_event_logs_without_health_fields_stay_quiet():
    # Logs recorded before these fields existed replay with the defaults: no false alarm.
    state = ConsoleState()
    state.apply(
        ev.event_from_dict(
            {
                "kind": "rollout_finished",
                "rollout_id": "r",
                "group_id": "g",
                "reward": 0.5,
                "turns_used": 2,
                "finished_naturally": True,
                "token_count": 900,
            }
        )
    )
    assert state.data_health.healthy and state.data_health.rollouts == 1


def test_status_bar_and_rollout_header_show_health():
    from hermes_console.ui.screens.rollout import RolloutScreen
    from hermes_console.ui.widgets.status_bar import StatusBar

    state = ConsoleState()
    assert "data" not in StatusBar._items_line(None, state).plain  # nothing reported yet: nothing shown
    state.apply(finished("a"))
    line = StatusBar._items_line(None, state)
    assert "data trained 40% turns 3/3" in line.plain and "UNHEALTHY" not in line.plain
    state.apply(finished("b", node_count=2, drift_count=1, trainable_turns=2))
    line = StatusBar._items_line(None, state)
    assert "DATA UNHEALTHY" in line.plain
    assert any("red" in str(span.style) for span in line.spans if "UNHEALTHY" in line.plain[span.start : span.end])
    header = RolloutScreen._header(state.rollouts["b"], state, now=0.0).plain
    assert "trained 40/100 tokens, turns 2/3, drift 1" in header


def test_rollout_header_shows_which_turns_train():
    from hermes_console.ui.screens.rollout import RolloutScreen

    state = ConsoleState()
    state.apply(finished("a", trained_run_tokens=[12, 20, 8], trained_run_logprob=[-0.5, -0.25, -1.0]))
    header = RolloutScreen._header(state.rollouts["a"], state, now=0.0).plain
    assert "trained per turn: 12 (lp -0.50) · 20 (lp -0.25) · 8 (lp -1.00)" in header
    # and it survives the event log round trip (record / replay)
    again = ev.event_from_dict(finished("a", trained_run_tokens=[3]).to_dict())
    assert again.trained_run_tokens == [3]
