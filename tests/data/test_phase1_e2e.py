"""Phase 1 end to end: terminal_tasks through the simulator's OpenAI chat endpoint, real tools."""

from __future__ import annotations

import pytest

from environments import events
from hermes_console.sim import SimConfig, SimServer
from tests.data.checks import assert_rollout_trains_only_assistant_text
from tests.data.test_phase1_masks import _WithTools


@pytest.fixture(scope="module")
def sim_url():
    sim = SimServer(SimConfig(solve_rate=0.5, seed=9))
    url = sim.start()
    yield url
    sim.stop()


async def test_phase1_group_matches_oracle_and_reports_health(sim_url, tokenizer_path, tokenizer):
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig
    from atroposlib.utils.tokenize_for_trainer import tokenize_for_trainer

    from environments.terminal_tasks.env import TerminalTasksEnv

    config, _ = TerminalTasksEnv.config_init()
    config.group_size = 2
    servers = [
        APIServerConfig(
            base_url=f"{sim_url}/v1",
            model_name="hermes-sim",
            api_key="x",
            server_type="openai",
            tokenizer_name=tokenizer_path,
            health_check=False,
            timeout=30,
        )
    ]
    env = TerminalTasksEnv(config, servers)
    assert not env._use_managed_server()
    seen = []
    events.add_observer(seen.append)
    try:
        await env.setup()
        group, _ = await env.collect_trajectories(await env.get_next_item())
    finally:
        events.remove_observer(seen.append)
    schemas = env._tools_for_toolsets(config.enabled_toolsets)[0]
    for tokens, masks, messages in zip(group["tokens"], group["masks"], group["messages"]):
        assert any(m["role"] == "tool" for m in messages)
        oracle = tokenize_for_trainer(_WithTools(tokenizer, schemas), messages, train_on_all_assistant_turns=True)
        assert tokens == oracle["tokens"] and masks == oracle["masks"]
        assert tokenizer.decode(tokens, skip_special_tokens=False) == tokenizer.apply_chat_template(
            messages, tools=schemas, tokenize=False
        )
        assert_rollout_trains_only_assistant_text(tokenizer, tokens, masks, messages)
        assert all("<think>" not in (m.get("content") or "") for m in messages if m["role"] == "assistant")
    done = [e for e in seen if e.kind == "rollout_finished"]
    assert len(done) == 2
    for e in done:
        assert e.phase == 1 and e.node_count == 0 and e.drift_count == 0 and not e.placeholder_tokens
        assert e.trainable_turns == e.assistant_turns == e.turns_used > 1 and e.trainable_tokens > 0
