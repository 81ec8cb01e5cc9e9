"""``hermes-console check-data FILE.jsonl [--tokenizer DIR] [--tools toolsets] [--group-size N]``.

Verifies an Atropos groups JSONL (one ScoredDataGroup per line; ours or anyone's)
against the data contract in README "The data contract":

* every rollout has as many masks (and logprobs) as tokens, and each mask is -100
  or equal to its token; something is trained;
* Phase 2 logprobs: 1.0 on masked positions, finite and <= 0 on trained ones;
* groups have the same size (``--group-size`` to require one), finite scores,
  no group appears twice;
* with ``--tokenizer`` and ``messages`` in the data: tokens decode to the chat
  template rendering of the messages, and the trained positions are exactly the
  assistant spans (Phase 1, as atroposlib ``tokenize_for_trainer(train_on_all_
  assistant_turns=True)``) or lie inside them and touch every one (Phase 2).

Prints a table of problems with one example each and exits 1 on any (0 when
clean, 2 when the file or tokenizer cannot be read).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

# the env runs the same checks on each rollout it makes
from environments.data_health import rollout_problems, trained_runs

NOT_TRAINED = -100

#: Problem kinds, in the order the table lists them, with what each means.
KINDS: dict[str, str] = {
    "bad_line": "line is not a JSON object",
    "missing_field": "group lacks tokens/masks/scores",
    "length_mismatch": "tokens, masks, logprobs, scores or messages differ in length",
    "mask_value": "a mask is neither -100 nor its token",
    "nothing_trained": "every position is masked",
    "logprob_masked": "logprob on a masked position is not 1.0",
    "logprob_trained": "logprob on a trained position is not finite and <= 0",
    "score_not_finite": "score is not a finite number",
    "group_size": "group size differs (from --group-size or the rest of the file)",
    "duplicate_group": "the same group appears more than once",
    "decode_mismatch": "tokens do not decode to the chat-template rendering of messages",
    "mask_spans": "trained positions are not exactly the assistant turns",
}


@dataclass
class Report:
    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, str] = field(default_factory=dict)
    groups: int = 0
    rollouts: int = 0

    def add(self, kind: str, where: str, detail: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self.examples.setdefault(kind, f"{where}: {detail}")

    @property
    def ok(self) -> bool:
        return not self.counts


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


class Checker:
    """Checks groups one by one; ``tokenizer``/``tools`` enable the template checks."""

    def __init__(
        self, tokenizer: Any = None, tools: list[dict[str, Any]] | None = None, group_size: int | None = None
    ) -> None:
        self.tokenizer = tokenizer
        self.tools = tools or None
        self.group_size = group_size
        self.report = Report()
        self._seen: dict[str, str] = {}
        self._first_size: tuple[int, str] | None = None

    # ------------------------------------------------------------------ groups

    def check_line(self, line: str, where: str) -> None:
        try:
            group = json.loads(line)
        except ValueError as exc:
            self.report.add("bad_line", where, f"invalid JSON ({exc})")
            return
        if not isinstance(group, dict):
            self.report.add("bad_line", where, f"expected an object, got {type(group).__name__}")
            return
        self.check_group(group, where)

    def check_group(self, group: dict[str, Any], where: str) -> None:
        self.report.groups += 1
        missing = [k for k in ("tokens", "masks", "scores") if not isinstance(group.get(k), list)]
        if missing:
            self.report.add("missing_field", where, f"no list {', '.join(missing)}")
            return
        tokens, masks, scores = group["tokens"], group["masks"], group["scores"]
        logprobs = group.get("inference_logprobs")
        messages = group.get("messages")
        n = len(tokens)
        for name, other in (
            ("masks", masks),
            ("scores", scores),
            ("inference_logprobs", logprobs),
            ("messages", messages),
        ):
            if isinstance(other, list) and len(other) != n:
                self.report.add("length_mismatch", where, f"{n} token lists but {len(other)} {name}")
        self._check_size(group, n, where)
        self._check_duplicate(group, where)
        for i, score in enumerate(scores):
            if not _is_number(score) or not math.isfinite(score):
                self.report.add("score_not_finite", f"{where} rollout {i}", f"score {score!r}")
        for i in range(min(n, len(masks))):
            self.report.rollouts += 1
            lps = logprobs[i] if isinstance(logprobs, list) and i < len(logprobs) else None
            msgs = messages[i] if isinstance(messages, list) and i < len(messages) else None
            self.check_rollout(tokens[i], masks[i], lps, msgs, f"{where} rollout {i}")

    def _check_size(self, group: dict[str, Any], n: int, where: str) -> None:
        declared = (group.get("group_overrides") or {}).get("group_size")
        if declared is not None and declared != n:
            self.report.add("group_size", where, f"{n} rollouts, group_overrides.group_size {declared}")
        elif self.group_size is not None and n != self.group_size:
            self.report.add("group_size", where, f"{n} rollouts, expected {self.group_size}")
        elif self.group_size is None and declared is None:
            if self._first_size is None:
                self._first_size = (n, where)
            elif self._first_size[0] != n:
                self.report.add(
                    "group_size", where, f"{n} rollouts, but {self._first_size[1]} has {self._first_size[0]}"
                )

    def _check_duplicate(self, group: dict[str, Any], where: str) -> None:
        digest = hashlib.sha256(json.dumps([group.get("tokens"), group.get("masks")]).encode()).hexdigest()
        if digest in self._seen:
            self.report.add("duplicate_group", where, f"same tokens and masks as {self._seen[digest]}")
        else:
            self._seen[digest] = where

    # ------------------------------------------------------------------ rollouts

    def check_rollout(self, tokens: Any, masks: Any, logprobs: Any, messages: Any, where: str) -> None:
        for kind, detail in rollout_problems(tokens, masks, logprobs):
            self.report.add(kind, where, detail)
        if not isinstance(tokens, list) or not isinstance(masks, list) or len(tokens) != len(masks):
            return
        if self.tokenizer is not None and isinstance(messages, list) and messages:
            self._check_template(tokens, masks, messages, phase2=logprobs is not None, where=where)

    def _check_template(
        self, tokens: list[int], masks: list[int], messages: list[dict[str, Any]], phase2: bool, where: str
    ) -> None:
        from environments.atropos_compat import render_conversation

        try:
            expected = render_conversation(self.tokenizer, messages, tools=self.tools)
        except Exception as exc:  # noqa: BLE001 - foreign messages may not render at all
            self.report.add("decode_mismatch", where, f"messages do not render: {type(exc).__name__}: {exc}")
            return
        text = self.tokenizer.decode(tokens, skip_special_tokens=False)
        rendered = self.tokenizer.decode(expected.tokens, skip_special_tokens=False)
        if text != rendered:
            at = next((j for j, (a, b) in enumerate(zip(text, rendered)) if a != b), min(len(text), len(rendered)))
            hint = "" if self.tools else " (rendered without tools: pass --tools if the run had any)"
            self.report.add(
                "decode_mismatch",
                where,
                f"differs at char {at}: {text[at : at + 40]!r} vs template {rendered[at : at + 40]!r}{hint}",
            )
            return
        if all(m == NOT_TRAINED for m in masks):
            return  # reported as nothing_trained
        if not phase2:
            # positions, not values: a wrong mask value is mask_value's business
            is_trained = [m != NOT_TRAINED for m in masks]
            should = [m != NOT_TRAINED for m in expected.masks]
            if tokens == expected.tokens and is_trained != should:
                j = next(j for j, (a, b) in enumerate(zip(is_trained, should)) if a != b)
                what = "trained" if masks[j] != NOT_TRAINED else "masked"
                piece = self.tokenizer.decode(tokens[j : j + 8], skip_special_tokens=False)
                self.report.add("mask_spans", where, f"position {j} is {what} ({piece!r}...)")
            return
        # Phase 2: token boundaries are the sampler's; compare characters.
        spans = [self._char_span(expected.tokens, a, b) for a, b in expected.spans]
        trained = [self._char_span(tokens, a, b) for a, b in trained_runs(masks)]  # as the env reads its own
        outside = next(((a, b) for a, b in trained if not any(s <= a and b <= e for s, e in spans)), None)
        if outside is not None:
            self.report.add(
                "mask_spans", where, f"trained text outside assistant turns: {text[outside[0] : outside[1]][:40]!r}"
            )
            return
        untouched = next(((s, e) for s, e in spans if not any(s <= a < e for a, _ in trained)), None)
        if untouched is not None:
            self.report.add(
                "mask_spans", where, f"assistant turn not trained: {rendered[untouched[0] : untouched[1]][:40]!r}"
            )

    def _char_span(self, tokens: list[int], a: int, b: int) -> tuple[int, int]:
        start = len(self.tokenizer.decode(tokens[:a], skip_special_tokens=False))
        return start, start + len(self.tokenizer.decode(tokens[a:b], skip_special_tokens=False))


def check_lines(lines: Iterable[str], checker: Checker, name: str = "line") -> Report:
    for number, line in enumerate(lines, 1):
        if line.strip():
            checker.check_line(line, f"{name}:{number}")
    return checker.report


def print_report(report: Report, out: TextIO) -> None:
    print(f"{report.groups} groups, {report.rollouts} rollouts checked", file=out)
    if report.ok:
        print("no problems found", file=out)
        return
    rows = [(kind, str(report.counts[kind]), report.examples[kind]) for kind in KINDS if kind in report.counts]
    width = max(len(r[0]) for r in rows)
    print(f"{'problem':<{width}}  count  example", file=out)
    for kind, count, example in rows:
        print(f"{kind:<{width}}  {count:>5}  {example[:200]}", file=out)
    print(
        f"{sum(report.counts.values())} problem(s); kinds: "
        + "; ".join(f"{k} = {KINDS[k]}" for k in KINDS if k in report.counts),
        file=out,
    )


def _load_tokenizer(path: str) -> Any:
    from environments.atropos_compat import apply_offline_defaults

    apply_offline_defaults()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"tokenizer {path!r} has no chat_template; the template checks need one")
    return tokenizer


def _tools(spec: str | None) -> list[dict[str, Any]] | None:
    if not spec:
        return None
    from environments.tools import get_tool_definitions

    names = [s.strip() for s in spec.split(",") if s.strip()]
    return list(get_tool_definitions(enabled_toolsets=names, quiet_mode=True))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hermes-console check-data", description="Verify an Atropos groups JSONL against the data contract."
    )
    p.add_argument("file", help="groups JSONL (one ScoredDataGroup per line)")
    p.add_argument(
        "--tokenizer",
        metavar="DIR",
        help="tokenizer directory: enables decode/mask-span checks (use 'local' for the repo's tokenizer)",
    )
    p.add_argument(
        "--tools", metavar="TOOLSETS", help="comma-separated toolsets the run used (rendered into the system prompt)"
    )
    p.add_argument("--group-size", type=int, default=None, help="required rollouts per group")
    return p


def main(argv: list[str] | None = None, out: TextIO = sys.stdout) -> int:
    args = build_parser().parse_args(argv)
    path = Path(args.file)
    if not path.is_file():
        print(f"check-data: {path} is not a file; expected a groups JSONL", file=sys.stderr)
        return 2
    tokenizer = None
    if args.tokenizer:
        try:
            if args.tokenizer == "local":
                from environments.tokenizer import local_tokenizer_path

                args.tokenizer = local_tokenizer_path()
            tokenizer = _load_tokenizer(args.tokenizer)
        except (OSError, ValueError) as exc:
            print(f"check-data: cannot use tokenizer {args.tokenizer!r}: {exc}", file=sys.stderr)
            return 2
    checker = Checker(tokenizer, _tools(args.tools), args.group_size)
    with path.open(encoding="utf-8") as fh:
        report = check_lines(fh, checker, path.name)
    print_report(report, out)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
