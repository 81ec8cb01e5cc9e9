"""Transcript: the data health of a real rollout -- trained vs masked tokens (prompt, tool
results and role headers) and the env's data checks -- for rollouts the embedded simulator
produced through the real env and runtime.

Oracles: groups.jsonl as the trainer receives it, counted here from the masks directly
(trained = mask != -100; prompt = masked positions before the first trained one), the data
contract's rule that masks are -100 or their token, and atroposlib's tokenize_for_trainer
over the same messages (only the assistant turns train: prompt and tool results masked)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from textual.widgets import Static

from environments import events as ev
from environments.data_health import rollout_problems
from hermes_console.runtime.host import RuntimeHost
from hermes_console.ui.screens.transcript import TranscriptScreen
from hermes_console_dev.fake_runtime import FakeRuntime
from tests.helpers.live import fixed_latency_sim, running_sim
from tests.runtime.runtime_helpers import make_spec
from tests.ui.helpers import make_app, settle

DATA = re.compile(r"data (\d+) trained \(\d+%, the model's own turns\) · (\d+) masked: prompt (\d+), tool results")


def _run_events(tmp_path: Path) -> list:
    """Every event of a real two-group run (process mode, Phase 1, local sandboxes)."""
    events: list = []
    for sim in running_sim(fixed_latency_sim(seed=7, latency_ms=5.0)):
        host = RuntimeHost(
            make_spec(sim, tmp_path, "--env.total_steps", "2", "--env.group_size", "2"), exit_when_finished=True
        )
        host.start()
        end = time.monotonic() + 180  # a ceiling: ~2 s idle
        while not host.done.done() and time.monotonic() < end:
            events += host.drain()
            time.sleep(0.05)
        assert host.done.done(), "the run did not finish"
        host.join(30)
        events += host.drain()
    return events


def _expected(tmp_path: Path) -> dict[str, list[tuple[int, int, int]]]:
    """Per group: (trained, masked, prompt) of each rollout, from the masks in groups.jsonl."""
    out: dict[str, list[tuple[int, int, int]]] = {}
    for line in (tmp_path / "run" / "groups.jsonl").read_text().splitlines():
        record = json.loads(line)
        rows = []
        for tokens, masks in zip(record["tokens"], record["masks"]):
            assert len(tokens) == len(masks) and all(m in (-100, t) for t, m in zip(tokens, masks))
            trained = sum(1 for m in masks if m != -100)
            first = next(j for j, m in enumerate(masks) if m != -100)
            rows.append((trained, len(masks) - trained, first))
        out[record["hermes_group_id"]] = sorted(rows)
    return out


def _atroposlib_counts(tmp_path: Path, tokenizer, toolsets: list[str]) -> dict[str, list[tuple[int, int, int]]]:
    """The same figures from atroposlib's own tokenize_for_trainer(train_on_all_assistant_turns=True)
    over each rollout's messages: trained = the assistant turns, nothing else."""
    from atroposlib.utils.tokenize_for_trainer import tokenize_for_trainer

    from environments.tools import get_tool_definitions
    from tests.data.test_phase1_masks import _WithTools

    schemas = list(get_tool_definitions(enabled_toolsets=toolsets, quiet_mode=True))
    out: dict[str, list[tuple[int, int, int]]] = {}
    for line in (tmp_path / "run" / "groups.jsonl").read_text().splitlines():
        record = json.loads(line)
        rows = []
        for messages in record["messages"]:
            masks = tokenize_for_trainer(_WithTools(tokenizer, schemas), messages, train_on_all_assistant_turns=True)[
                "masks"
            ]
            trained = sum(1 for m in masks if m != -100)
            rows.append((trained, len(masks) - trained, next(j for j, m in enumerate(masks) if m != -100)))
        out[record["hermes_group_id"]] = sorted(rows)
    return out


async def test_transcript_shows_trained_and_masked_tokens_of_real_rollouts(tmp_path: Path, tokenizer) -> None:
    events = _run_events(tmp_path)
    expected = _expected(tmp_path)
    toolsets = next(e.toolsets for e in events if isinstance(e, ev.GroupStarted))
    assert _atroposlib_counts(tmp_path, tokenizer, toolsets) == expected  # only assistant turns train
    finished = [e for e in events if isinstance(e, ev.RolloutFinished)]
    assert {e.group_id for e in finished} == set(expected) and len(finished) == 4
    app = make_app(FakeRuntime(events))
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        shown: dict[str, list[tuple[int, int, int]]] = {}
        for e in finished:
            app.push_screen(TranscriptScreen(e.rollout_id))
            await settle(pilot)
            header = str(app.screen.query_one("#rollout-header", Static).render())
            match = DATA.search(header)
            assert match, header
            shown.setdefault(e.group_id, []).append(tuple(int(x) for x in match.groups()))  # type: ignore[arg-type]
            assert "checks ok" in header and "✖" not in header, header
            await pilot.press("escape")
            await settle(pilot)
    assert {g: sorted(rows) for g, rows in shown.items()} == expected
    # every rollout trained something, after a prompt that trained nothing
    assert all(t > 0 and p > 0 for rows in expected.values() for t, _, p in rows)


async def test_transcript_lists_the_data_problems_of_a_broken_rollout() -> None:
    from tests.ui.eventlog import T0

    # what the env reports for a Phase 2 rollout whose masks train nothing and that lost its logprobs
    problems = [f"{k}: {d}" for k, d in rollout_problems([5, 6, 7], [-100, -100, -100], None, expect_logprobs=True)]
    assert [p.split(":")[0] for p in problems] == ["nothing_trained", "logprobs_missing"]
    events = [
        ev.RolloutStarted(ts=T0, rollout_id="r-bad", group_id="g-bad", item_summary="x", phase=2),
        ev.RolloutFinished(
            ts=T0 + 1,
            rollout_id="r-bad",
            group_id="g-bad",
            reward=0.0,
            turns_used=1,
            finished_naturally=True,
            token_count=3,
            phase=2,
            prompt_tokens=3,
            assistant_turns=1,
            data_problems=problems,
        ),
    ]
    app = make_app(FakeRuntime(events))
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        app.push_screen(TranscriptScreen("r-bad"))
        await settle(pilot)
        header = str(app.screen.query_one("#rollout-header", Static).render())
        assert "data 0 trained (0%, the model's own turns) · 3 masked: prompt 3" in header
        assert "✖ nothing_trained: all 3 positions are -100" in header
        assert "✖ logprobs_missing: no logprobs for 3 tokens" in header and "checks ok" not in header
