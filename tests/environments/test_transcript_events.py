"""What the console's transcript needs from a rollout's events: the real system and user
prompt, tool results beyond the 200-character head, the time compute_reward took and the
env's optional explanation of the reward (ctx.reward_details) — with compute_reward still
returning a plain float."""

from __future__ import annotations

import json
from unittest import mock

from test_agent_loop import call, reply  # same directory (pytest prepends it to sys.path)
from test_base_env import FakeManager, fake_ctx, make_env  # noqa: F401 - fake_ctx is an autouse fixture

from environments import agent_loop, events

BIG = "x" * 3000 + "END"


async def test_rollout_events_carry_prompts_full_results_and_reward_details(tokenizer_path) -> None:
    def handler(name, args, task_id=None, user_task=None, **kw):
        return json.dumps({"output": BIG, "exit_code": 0, "error": None})

    def reward(item, result, ctx):
        ctx.reward_details = {"tests passed": "3/4", "ratio": 0.75, "obj": object()}
        return 0.75

    script = iter([reply(None, [call("terminal", {"command": "cat big"})]), reply("done")])
    env = make_env(
        tokenizer_path,
        reward=reward,
        manager=FakeManager(lambda m: next(script, reply("x"))),
        system_prompt="You are terse.",
    )
    seen = []
    events.add_observer(seen.append)
    try:
        with mock.patch.object(agent_loop, "handle_function_call", side_effect=handler):
            scored, _ = await env.collect_trajectory({"prompt": "Count the lines"})
    finally:
        events.remove_observer(seen.append)
    assert scored["scores"] == 0.75  # the float contract is unchanged
    started = next(e for e in seen if e.kind == "rollout_started")
    assert (started.system_prompt, started.prompt) == ("You are terse.", "Count the lines")
    tool = next(e for e in seen if e.kind == "tool_call_finished")
    sent = next(m["content"] for m in scored["messages"] if m["role"] == "tool")
    assert len(tool.result_head) <= 200 and tool.result_text == sent and tool.result_text.endswith('"error": null}')
    finished = next(e for e in seen if e.kind == "rollout_finished")
    assert finished.reward_details["tests passed"] == "3/4" and finished.reward_details["ratio"] == 0.75
    assert finished.reward_details["obj"].startswith("<object object")  # anything else becomes text
    assert finished.reward_s >= 0.0
    # the event round-trips through the event log
    again = events.event_from_dict(json.loads(json.dumps(finished.to_dict())))
    assert again.reward_details == finished.reward_details


async def test_a_prompt_that_cannot_be_built_is_still_a_failed_rollout(tokenizer_path) -> None:
    env = make_env(tokenizer_path)
    seen = []
    events.add_observer(seen.append)
    try:
        scored, _ = await env.collect_trajectory({"no prompt": 1})  # format_prompt raises KeyError
    finally:
        events.remove_observer(seen.append)
    assert scored["scores"] == 0.0
    started = next(e for e in seen if e.kind == "rollout_started")
    assert started.prompt == ""
    finished = next(e for e in seen if e.kind == "rollout_finished")
    assert finished.error and "KeyError" in finished.error
