"""Redaction: every credential shape we know is masked, and cost stays linear."""

from __future__ import annotations

import time

import pytest

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
