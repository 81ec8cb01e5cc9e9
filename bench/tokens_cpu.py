"""CPU of a finished rollout's trainer tokens: pieces between added tokens reused vs whole renderings.

    python -m bench.tokens_cpu [--rollouts 256] [--rounds 3]

``--rollouts`` terminal_tasks-like conversations (the env's system prompt and its terminal +
file tool schemas, a task, 4 tool turns with outputs of a few hundred bytes, a final answer;
every task, command and output different) go through ``render_conversation`` with the
repo's local tokenizer, as ``HermesAgentBaseEnv`` does for each finished rollout. One side
encodes pieces and reuses those seen before (``environments.piece_tokens``), the other has
``HERMES_PIECE_TOKENS=0`` (whole renderings, as before). Alternated rounds in one process;
CPU is this thread's (``time.thread_time``), per rollout. Both sides' tokens are compared.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from typing import Any

from bench.common import load_average, median, rnd


def _conversations(n: int, seed: int = 7) -> list[list[dict[str, Any]]]:
    from environments.terminal_tasks.env import SYSTEM_PROMPT

    rng = random.Random(seed)
    words = "alpha beta gamma delta error warn info disk file line count total sum name email".split()

    def text(k: int) -> str:
        return " ".join(rng.choice(words) for _ in range(k))

    out = []
    for i in range(n):
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"Task {i}: {text(30)}. Write the answer to out_{i}.txt."},
        ]
        for turn in range(4):
            call = {
                "id": f"call_{i}_{turn}",
                "type": "function",
                "function": {
                    "name": "terminal",
                    "arguments": json.dumps({"command": f"grep -c {text(2)} f{turn}.txt"}),
                },
            }
            messages.append({"role": "assistant", "content": text(rng.randint(0, 12)), "tool_calls": [call]})
            output = json.dumps({"output": "\n".join(text(8) for _ in range(rng.randint(2, 12))), "exit_code": 0})
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
        messages.append({"role": "assistant", "content": f"Done: {text(10)}"})
        out.append(messages)
    return out


def _side(tokenizer: Any, tools: Any, conversations: list[Any], whole: bool) -> tuple[float, list[Any]]:
    from environments.atropos_compat import render_conversation
    from environments.piece_tokens import OPT_OUT_VAR

    if whole:
        os.environ[OPT_OUT_VAR] = "0"
    try:
        t0 = time.thread_time()
        rendered = [render_conversation(tokenizer, m, tools=tools) for m in conversations]
        return 1000 * (time.thread_time() - t0) / len(conversations), rendered
    finally:
        os.environ.pop(OPT_OUT_VAR, None)


def run(rollouts: int = 256, rounds: int = 3) -> dict[str, Any]:
    from environments.atropos_compat import apply_offline_defaults

    apply_offline_defaults()
    from environments.tokenizer import load_tokenizer
    from environments.tools import get_tool_definitions

    tokenizer = load_tokenizer()
    tools = get_tool_definitions(enabled_toolsets=["terminal", "file"], quiet_mode=True)
    load_before = load_average()
    conversations = _conversations(rollouts)
    piece_ms: list[float] = []
    whole_ms: list[float] = []
    same = True
    for r in range(rounds):
        order = (False, True) if r % 2 == 0 else (True, False)
        results = {}
        for whole in order:
            ms, rendered = _side(tokenizer, tools, conversations, whole)
            (whole_ms if whole else piece_ms).append(ms)
            results[whole] = [(x.tokens, x.masks) for x in rendered]
        same = same and results[True] == results[False]
    chars = sum(len(tokenizer.apply_chat_template(m, tools=tools, tokenize=False)) for m in conversations[:16]) / 16
    return {
        "rollouts": rollouts,
        "rounds": rounds,
        "rendering_chars_mean": rnd(chars, 0),
        "whole_ms_per_rollout": rnd(median(whole_ms), 2),
        "pieces_ms_per_rollout": rnd(median(piece_ms), 2),
        "whole_over_pieces": rnd(median(whole_ms) / median(piece_ms), 2),
        "runs_whole_ms": [rnd(x, 2) for x in whole_ms],
        "runs_pieces_ms": [rnd(x, 2) for x in piece_ms],
        "same_tokens_and_masks": same,
        "load_average_before": load_before,
        "load_average_after": load_average(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.tokens_cpu", description=__doc__.splitlines()[0])
    ap.add_argument("--rollouts", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    result = run(args.rollouts, args.rounds)
    print(json.dumps(result, indent=1))
    return 0 if result["same_tokens_and_masks"] else 1


if __name__ == "__main__":
    sys.exit(main())
