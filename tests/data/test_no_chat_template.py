"""A tokenizer without a chat template is refused at start (issue 11, point 4)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from atroposlib.envs.server_handling.server_baseline import APIServerConfig

from environments.hermes_base_env import HermesAgentBaseEnv, HermesAgentEnvConfig
from tests.helpers.events import recording


class AnswerEnv(HermesAgentBaseEnv):
    name = "answer"

    async def setup(self):
        pass

    async def get_next_item(self):
        return {"prompt": "p"}

    def format_prompt(self, item):
        return item["prompt"]

    async def compute_reward(self, item, result, ctx):
        return 1.0

    async def evaluate(self, *a, **kw):
        pass


class OneAnswer:
    """Phase 1 stand-in for the ServerManager: one final answer, no tools."""

    servers: list = []

    async def chat_completion(self, **kwargs):
        message = SimpleNamespace(content="an answer", tool_calls=None)
        return SimpleNamespace(choices=[SimpleNamespace(message=message)])


def make_env(tokenizer_name, **overrides):
    cfg = HermesAgentEnvConfig(
        tokenizer_name=tokenizer_name, use_wandb=False, group_size=1, enabled_toolsets=[], **overrides
    )
    servers = [APIServerConfig(base_url="http://127.0.0.1:1/v1", api_key="x", model_name="m", health_check=False)]
    return AnswerEnv(cfg, servers)


@pytest.fixture(scope="module")
def no_template_path(tmp_path_factory, tokenizer_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_path)
    tok.chat_template = None
    out = tmp_path_factory.mktemp("tok-no-template")
    tok.save_pretrained(str(out))
    return str(out)


def test_missing_chat_template_is_a_clear_error_at_start(no_template_path):
    with pytest.raises(ValueError) as info:
        make_env(no_template_path)
    message = str(info.value)
    assert no_template_path in message and "chat_template" in message and "allow_placeholder_tokens" in message


async def test_opt_in_placeholder_rollouts_say_so(no_template_path):
    env = make_env(no_template_path, allow_placeholder_tokens=True, terminal_backend="local")
    env.server = OneAnswer()
    with recording() as seen:
        scored, _ = await env.collect_trajectory({"prompt": "p"})
    done = next(e for e in seen if e.kind == "rollout_finished")
    assert done.placeholder_tokens is True and done.trainable_turns == 0
