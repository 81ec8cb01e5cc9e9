"""TerminalBench-2 evaluation env: ``terminalbench2_env.TerminalBench2EvalEnv``.

Run the offline fixture: ``hermes-console run environments.benchmarks.terminalbench_2 --mode evaluate``.
"""
