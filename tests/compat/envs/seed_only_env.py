"""An env using only the seed API, configured the way training envs usually are:
``config_init`` asks for a vLLM server (token-level), so it runs through ManagedServer
(phase 2). Nothing from this project beyond ``environments``' top-level names."""

import os

from atroposlib.envs.server_handling.server_baseline import APIServerConfig

from environments import HermesAgentBaseEnv, HermesAgentEnvConfig

TASKS = [
    {"prompt": "Create a file named greeting.txt containing exactly: hello world", "path": "greeting.txt",
     "expected": "hello world"},
    {"prompt": "Create a file named result.txt containing only the number 42.", "path": "result.txt",
     "expected": "42"},
]


class SeedOnlyEnv(HermesAgentBaseEnv):
    name = "compat-seed-only"
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
                base_url=os.getenv("COMPAT_BASE_URL", "http://127.0.0.1:9001/v1"),
                model_name="hermes-sim",
                api_key="x",
                server_type=os.getenv("COMPAT_SERVER_TYPE", "vllm"),
                health_check=False,
            )
        ]
        return config, servers

    async def setup(self):
        self.iter = 0

    async def get_next_item(self):
        item = TASKS[self.iter % len(TASKS)]
        self.iter += 1
        return item

    def format_prompt(self, item):
        return item["prompt"]

    async def compute_reward(self, item, result, ctx):
        out = ctx.terminal(f"cat {item['path']}")
        return 1.0 if out.get("exit_code") == 0 and out.get("output", "").strip() == item["expected"] else 0.0

    async def evaluate(self, *args, **kwargs):
        return None


if __name__ == "__main__":
    SeedOnlyEnv.cli()
