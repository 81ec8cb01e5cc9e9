"""Redaction: every credential shape we know is masked, and cost stays linear."""

from __future__ import annotations

import random
import re
import time

import pytest

from bench.redact_cpu import every_rule
from environments import redact as R
from environments.redact import REDACTED, is_secret_env_name, redact, safe_head, truncate


@pytest.mark.parametrize(
    "text, secret",
    [
        ("export OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwx", "sk-proj-abcdefghijklmnopqrstuvwx"),
        ('{"api_key": "hunter2-value"}', "hunter2-value"),
        ("curl -H 'Authorization: Bearer abcdefghijklmnop123'", "abcdefghijklmnop123"),
        ("git clone https://bob:s3cretpw@example.com/repo.git", "s3cretpw"),
        ("token ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaa", "ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
        ("HF token hf_abcdefghijklmnopqrstuvwxyz", "hf_abcdefghijklmnopqrstuvwxyz"),
        ("aws AKIAABCDEFGHIJKLMNOP key", "AKIAABCDEFGHIJKLMNOP"),
        ("password: correct-horse", "correct-horse"),
        ("DB_PASSWORD=pa55", "pa55"),
    ],
)
def test_credentials_are_masked(text: str, secret: str) -> None:
    out = redact(text)
    assert secret not in out
    assert REDACTED in out


def test_plain_text_is_untouched() -> None:
    text = "ls -la /workspace && grep -c error log.txt > count.txt"
    assert redact(text) == text


def test_cost_is_linear_on_long_unbroken_runs() -> None:
    # An unbounded regex here once took 30 s on 16 kB; now 200 kB is instant.
    start = time.thread_time()  # CPU time of this thread: a loaded machine does not inflate it
    redact("a" * 200_000)
    redact("key" * 50_000)
    assert time.thread_time() - start < 5.0  # was 30 s+ before the fix


def test_safe_head_truncates_after_redacting_and_handles_non_strings() -> None:
    head = safe_head("x" * 30 + " OPENAI_API_KEY=sk-abcdefghijklmnopqrstuvwxyz", limit=60)
    assert "sk-abc" not in head and len(head) <= 60
    assert safe_head({"a": 1}, 50) == "{'a': 1}"
    assert truncate("abcdef", 4) == "abc…"
    assert truncate("abc", 4) == "abc"


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "GITHUB_TOKEN", "MY_SECRET", "DB_PASSWORD", "AWS_SESSION_TOKEN"])
def test_secret_env_names(name: str) -> None:
    assert is_secret_env_name(name)


@pytest.mark.parametrize("name", ["PATH", "HOME", "LANG", "TERM"])
def test_plain_env_names(name: str) -> None:
    assert not is_secret_env_name(name)


# ----------------------------------------------------------------- rules skipped on text they cannot match
#
# ``redact`` runs its costly rules only on text holding what a match needs ("://", a key word
# in any case). The oracle is the rules applied one after the other on every text, as before
# (``bench.redact_cpu.every_rule``, which the benchmark times against ``redact``).


_FRAGMENTS = [
    # key words in any case, and non-ASCII letters that case-fold onto them
    "token",
    "TOKEN",
    "ToKeN",
    "to\u212aen",
    "api_key",
    "API-KEY",
    "apikey",
    "ApiKey",
    "secret",
    "\u017fecret",
    "passwd",
    "PassWord",
    "credential",
    "auth",
    "AUTH",
    "author",
    "bearer",
    "Bearer",
    "BASIC",
    "basic",
    "ba\u017fic",
    # separators, quotes, values
    "=",
    ": ",
    " = ",
    "\t:\t",
    '"',
    "'",
    "value123",
    "hunter2-value",
    "x" * 20,
    ",",
    ";",
    "&",
    "|",
    # shapes the pattern rules know
    "https://",
    "ftp://",
    "bob:",
    "pw@",
    "@example.com/",
    "sk-proj-abcdefghijklmnopqrstuvwx",
    "ghp_" + "a" * 24,
    "hf_" + "b" * 22,
    "AKIAABCDEFGHIJKLMNOP",
    "eyJabcdefghijk.abcdefghijk.abcdefghijk",
    "Authorization: ",
    # ordinary text, unicode, the marker itself
    "ls -la /workspace",
    "total 12\n",
    "-rw-r--r-- 1 root root 4096 data.csv\n",
    " ",
    "\n",
    "é",
    "«",
    "»",
    "日本",
    "\u0130",
    "\u0131",
    REDACTED,
    "MY_SECRET_NAME",
    "DB_PASSWORD",
    "_TOKEN",
]


def test_redact_equals_every_rule_applied_on_random_text() -> None:
    rng = random.Random(16)
    R.register_secret("zq-known-secret-9")  # a known secret too: its marker makes the text non-ASCII
    fragments = [*_FRAGMENTS, "zq-known-secret-9"]
    for case in range(4_000):
        text = "".join(rng.choice(fragments) for _ in range(rng.randint(1, 14)))
        assert redact(text) == every_rule(text), (case, text)
        head = safe_head(text, 40)
        assert head == truncate(every_rule(text[: 40 + 512]), 40), (case, text)


def test_costly_rules_are_not_run_on_text_that_cannot_match(monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[str] = []

    class Counted:
        def __init__(self, name: str, rule: re.Pattern[str]) -> None:
            self.name, self.rule = name, rule

        def sub(self, *args: object) -> str:
            runs.append(self.name)
            return self.rule.sub(*args)  # type: ignore[arg-type]

    for name in ("_URL_CRED_RE", "_BEARER_RE", "_ASSIGN_RE"):
        monkeypatch.setattr(R, name, Counted(name, getattr(R, name)))
    output = "total 12\n-rw-r--r-- 1 root root 4096 Nov 27 06:00 data.csv\n" * 8
    assert redact(output) == output
    assert runs == []  # was every rule on every text: ~0.3 µs a character for the name rule alone
    assert REDACTED in redact("export OPENAI_API_KEY=abcdefgh123")
    assert "_ASSIGN_RE" in runs
