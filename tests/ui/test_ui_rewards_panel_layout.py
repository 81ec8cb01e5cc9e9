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
