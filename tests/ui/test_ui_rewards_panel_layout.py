"""The rewards summary asks for a layout pass (a re-arrangement of the whole screen) only
when its height may change: a new number of lines."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from rich.text import Text
from textual.app import App, ComposeResult
from textual.widgets import Static

from hermes_console.ui.widgets.rewards_panel import RewardsPanel


class _Host(App[None]):
    def compose(self) -> ComposeResult:
        yield RewardsPanel()


def _state(n: int) -> Any:
    return SimpleNamespace(
        rollouts_finished=n,
        groups_scored=n,
        recent_rewards=[0.5] * n,
        reward_histogram=lambda bins, lo, hi: [n] + [0] * (bins - 1),
        reward_steps=[],
    )


async def test_the_summary_lays_out_again_only_when_its_line_count_changes(monkeypatch) -> None:
    app = _Host()
    async with app.run_test(size=(120, 20)) as pilot:
        panel = app.query_one(RewardsPanel)
        summary = app.query_one("#reward-summary", Static)
        asked: list[bool] = []
        real = Static.update

        def update(self: Static, content: Any = "", *, layout: bool = True) -> None:
            if self is summary:
                asked.append(layout)
            real(self, content, layout=layout)

        monkeypatch.setattr(Static, "update", update)
        texts = iter(["a\nb", "c\nd", "e\nf\ng", "h\ni\nj"])
        monkeypatch.setattr(RewardsPanel, "_summary", staticmethod(lambda state: Text(next(texts))))
        for n in range(1, 5):
            panel.update_from(_state(n))
            await pilot.pause()
        assert asked == [True, False, True, False]  # first show, same height, one more line, same
        assert "h" in str(summary.render())


async def test_in_the_console_the_first_step_line_lays_out_only_in_compact_mode(monkeypatch) -> None:
    """Beside the histogram the summary is as tall as its row: a third line (the first
    reward step) is a repaint. In compact mode (80x24) its height follows its text."""
    from hermes_console_dev.screenshots import build_app
    from tests.helpers.ui import layout_passes, settle
    from tests.ui.eventlog import FIXTURES

    for size, laid_out in (((160, 45), 0), ((80, 24), 1)):
        app = build_app("main", FIXTURES)
        async with app.run_test(size=size) as pilot:
            await settle(pilot)
            panel = app.screen.query_one(RewardsPanel)
            texts = iter(["a\nb", "a\nb\nc"])
            monkeypatch.setattr(RewardsPanel, "_summary", staticmethod(lambda state, t=texts: Text(next(t))))
            panel.update_from(_state(1_000))
            await settle(pilot)
            with layout_passes() as passes:
                panel.update_from(_state(1_001))
                await settle(pilot)
            assert passes[0] == laid_out, (size, passes[0])
            assert "c" in app.screen.query_one("#reward-summary", Static).render().plain  # drawn either way
            monkeypatch.undo()
