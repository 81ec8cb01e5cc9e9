"""Eval-only benchmark envs (TerminalBench-2 style), written against this layer.

The env modules import atroposlib (slow); import them explicitly, e.g.
``from environments.benchmarks.terminalbench_2.terminalbench2_env import TerminalBench2EvalEnv``.
"""
