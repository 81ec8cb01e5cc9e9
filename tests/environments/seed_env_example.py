"""An env written only against the seed API (as an upstream Hermes env author would).

It imports nothing from this project beyond ``environments``' public names and
atroposlib, uses the synchronous ToolContext in ``compute_reward`` and a
single-file layout with ``cli()``. The e2e tests run it unchanged in process mode;
the compat tests run the same file as a token-level (vLLM) training env, Phase 2, through
``SEED_SERVER_TYPE=vllm`` and ``SEED_BASE_URL``.
"""

import os
import random

from atroposlib.envs.server_handling.server_baseline import APIServerConfig

from environments import HermesAgentBaseEnv, HermesAgentEnvConfig

TASKS = [
    {
        "prompt": "Create a file named greeting.txt containing exactly: hello world",
        "path": "greeting.txt",
        "expected": "hello world",
    },
    {"prompt": "Create a file named result.txt containing only the number 42.", "path": "result.txt", "expected": "42"},
]


class SeedTerminalEnv(HermesAgentBaseEnv):
    name = "seed-terminal"
    env_config_cls = HermesAgentEnvConfig

    @classmethod
    def config_init(cls):
        config = HermesAgentEnvConfig(
            enabled_toolsets=["terminal", "file"],
            max_agent_turns=6,
            group_size=2,
            total_steps=2,
            ensure_scores_are_not_same=False,
            use_wandb=False,
            terminal_backend="local",
        )
        servers = [
            APIServerConfig(
                base_url=os.getenv("SEED_BASE_URL", "http://127.0.0.1:9001/v1"),
                model_name="hermes-sim",
                api_key=os.getenv("OPENROUTER_API_KEY", ""),
                server_type=os.getenv("SEED_SERVER_TYPE", "openai"),
                health_check=False,
            )
        ]
        return config, servers

    async def setup(self):
        self.iter = 0
        self.reward_buffer = []

    async def get_next_item(self):
        item = TASKS[self.iter % len(TASKS)]
        self.iter += 1
        return item

    def format_prompt(self, item):
        return item["prompt"]

    async def compute_reward(self, item, result, ctx):
        out = ctx.terminal(f"cat {item['path']}")
        if out.get("exit_code") != 0:
            reward = 0.0
        elif out.get("output", "").strip() == item["expected"]:
            reward = 1.0
        elif item["expected"] in out.get("output", ""):
            reward = 0.5
        else:
            reward = 0.0
        self.reward_buffer.append(reward)
        return reward

    async def evaluate(self, *args, **kwargs):
        random.choice(TASKS)


if __name__ == "__main__":
    SeedTerminalEnv.cli()
