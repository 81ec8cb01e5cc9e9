"""CPU of redacting what a rollout's events carry: every rule on every text vs rules skipped
on text that cannot match them.

    python -m bench.redact_cpu [--rounds 5] [--repeat 200]

Every tool call's argument and result heads, its result text (up to 4,000 characters for the
transcript) and every turn's content head go through ``environments.redact.redact`` on the
env's loop while a console watches (``safe_head``). The corpus is what a terminal_tasks rollout
and an ordinary agent produce: command lines as JSON, ``ls``/``cat``/python output, a
traceback, model prose, and texts that do hold the rules' key words (``token``, ``auth``,
``https://``, ``password=``). "every rule" applies the four pattern rules one after the other,
as ``redact`` did before it looked for their key words first; "skipped" is ``redact`` itself.
Outputs are compared for every text (they must be equal). Rounds alternate which goes first;
CPU per call (``time.thread_time``), medians; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

from bench.common import load_average, median, rnd
from environments import redact as R

REDACTED = R.REDACTED


def every_rule(text: str) -> str:
    """The pattern rules applied unconditionally (what ``redact`` did before it skipped any)."""
    if not text:
        return text
    text = R.redact_known(text)
    text = R._URL_CRED_RE.sub(lambda m: f"{m['scheme']}{m['user']}:{REDACTED}@", text)
    text = R._BEARER_RE.sub(lambda m: f"{m['kw']}{REDACTED}", text)
    text = R._ASSIGN_RE.sub(R._redact_assignment, text)
    return R._TOKEN_RE.sub(REDACTED, text)


def corpus() -> list[str]:
    listing = "".join(f"-rw-r--r-- 1 root root {4096 + i * 17} Nov 27 06:{i:02d} file_{i}.csv\n" for i in range(40))
    traceback = (
        "Traceback (most recent call last):\n"
        '  File "/workspace/solve.py", line 12, in <module>\n'
        "    result = compute(values)\n"
        '  File "/workspace/solve.py", line 7, in compute\n'
        "    return sum(v / len(values) for v in values)\n"
        "ZeroDivisionError: division by zero\n"
    )
    prose = (
        "I'll start by inspecting the input file to understand its structure, then compute the "
        "requested statistic with a short Python script and write the answer to output.txt. "
    ) * 4
    texts = [
        json.dumps({"command": "cat /workspace/data.csv | head -20"}),
        json.dumps({"command": "python3 -c 'import statistics; print(statistics.mean([3, 5, 8]))' > out.txt"}),
        json.dumps({"command": "ls -la /workspace && wc -l /workspace/*.csv"}),
        "5.333333333333333\n",
        listing[:700],
        listing * 3,
        traceback,
        prose,
        "x,y\n" + "".join(f"{i},{i * i}\n" for i in range(600)),
        # texts that hold the rules' key words: the rules run on these, as before
        "Tokenization splits the text into tokens; the author checked the auth flow.",
        "git clone https://github.com/example/repo.git && cd repo",
        "config: password=hunter2-value api_key: abcdefgh",
    ]
    return texts


def _timed(fn: Callable[[str], str], texts: list[str], repeat: int) -> float:
    start = time.thread_time()
    for _ in range(repeat):
        for text in texts:
            fn(text)
    return (time.thread_time() - start) / (repeat * len(texts))


def run(rounds: int = 5, repeat: int = 200) -> dict[str, object]:
    texts = corpus()
    for text in texts:
        assert R.redact(text) == every_rule(text), text[:80]
    plain = texts[:9]  # none of these holds a key word of the costly rules
    sides: dict[str, list[float]] = {
        "every rule": [],
        "skipped": [],
        "every rule (plain texts)": [],
        "skipped (plain texts)": [],
    }
    for r in range(rounds):
        order = [("every rule", every_rule), ("skipped", R.redact)]
        for name, fn in order if r % 2 == 0 else order[::-1]:
            sides[name].append(_timed(fn, texts, repeat))
            sides[f"{name} (plain texts)"].append(_timed(fn, plain, repeat))
    result: dict[str, object] = {
        "load_average": load_average(),
        "texts": len(texts),
        "chars": sum(len(t) for t in texts),
        "us_per_call": {k: rnd(1e6 * median(v), 2) for k, v in sides.items()},
    }
    us = result["us_per_call"]
    assert isinstance(us, dict)
    result["ratio_all_texts"] = rnd(us["every rule"] / us["skipped"], 2)
    result["ratio_plain_texts"] = rnd(us["every rule (plain texts)"] / us["skipped (plain texts)"], 2)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.redact_cpu", description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args(argv)
    print(json.dumps(run(args.rounds, args.repeat), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
