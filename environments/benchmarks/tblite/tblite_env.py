"""TBLiteEvalEnv ("tblite"): the TerminalBench-2 env with TBLite's dataset and task timeout.

Same fields as :class:`TerminalBench2EvalConfig`; ``dataset_name`` defaults to
``NousResearch/openthoughts-tblite`` (Hub, needs network) and ``task_timeout`` to 1200 s.
``config_init`` uses the offline TerminalBench-2 fixture, like the parent env.
"""

from __future__ import annotations

from pydantic import Field

from environments.benchmarks.terminalbench_2.terminalbench2_env import (
    TerminalBench2EvalConfig,
    TerminalBench2EvalEnv,
)


class TBLiteEvalConfig(TerminalBench2EvalConfig):
    dataset_name: str | None = Field(
        default="NousResearch/openthoughts-tblite", description="Hub dataset name or a local JSONL file / dataset dir"
    )
    task_timeout: int = Field(default=1200, description="seconds per task (agent + verifier)")


class TBLiteEvalEnv(TerminalBench2EvalEnv):
    name = "tblite"
    env_config_cls = TBLiteEvalConfig


if __name__ == "__main__":
    TBLiteEvalEnv.cli()
