"""Secret redaction and truncation for anything we log, record or display.

Tool arguments and tool output regularly carry credentials (an agent runs
``export OPENAI_API_KEY=...`` or cats a ``.env``). Everything that leaves a
rollout towards a log line, an event or a screen goes through ``redact``.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "«redacted»"

# Values that look like credentials on their own.
_TOKEN_PATTERNS = [
    r"sk-(?:proj-|ant-)?[A-Za-z0-9_\-]{16,}",  # OpenAI / Anthropic style keys
    r"gh[pousr]_[A-Za-z0-9]{20,}",  # GitHub tokens
    r"github_pat_[A-Za-z0-9_]{20,}",
    r"hf_[A-Za-z0-9]{20,}",  # Hugging Face tokens
    r"xox[baprs]-[A-Za-z0-9\-]{10,}",  # Slack tokens
    r"AKIA[0-9A-Z]{16}",  # AWS access key ids
    r"AIza[0-9A-Za-z_\-]{30,}",  # Google API keys
    r"eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}",  # JWTs
]
_TOKEN_RE = re.compile("|".join(f"(?:{p})" for p in _TOKEN_PATTERNS))

# NAME=value / NAME: value / "name": "value" where NAME smells like a secret.
# Repeats are bounded: unbounded ones backtrack quadratically on long unbroken runs.
_SECRET_NAME = r"[A-Za-z0-9_\-]{0,64}(?:api[_\-]?key|apikey|secret|token|passwd|password|credential|auth)[A-Za-z0-9_\-]{0,64}"
_ASSIGN_RE = re.compile(
    rf"""(?P<name>["']?\b{_SECRET_NAME}["']?)(?P<sep>\s*[:=]\s*)(?P<quote>["']?)(?P<value>[^\s"',;&|]+)""",
    re.IGNORECASE,
)
_BEARER_RE = re.compile(r"(?P<kw>\b(?:Bearer|Basic|token)\s+)(?P<value>[A-Za-z0-9._~+/=\-]{12,})", re.IGNORECASE)
_URL_CRED_RE = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.\-]{0,30}://)(?P<user>[^:/@\s]{1,256}):(?P<pw>[^@/\s]{1,256})@", re.IGNORECASE)


def _redact_assignment(m: "re.Match[str]") -> str:
    if m["value"].startswith(REDACTED) or m["value"].lower() in ("bearer", "basic", "token"):
        return m.group(0)  # already handled by the bearer rule
    return f"{m['name']}{m['sep']}{m['quote']}{REDACTED}"


def redact(text: str) -> str:
    """Replace anything that looks like a credential with a marker."""
    if not text:
        return text
    text = _URL_CRED_RE.sub(lambda m: f"{m['scheme']}{m['user']}:{REDACTED}@", text)
    text = _BEARER_RE.sub(lambda m: f"{m['kw']}{REDACTED}", text)
    text = _ASSIGN_RE.sub(_redact_assignment, text)
    text = _TOKEN_RE.sub(REDACTED, text)
    return text


def truncate(text: str, limit: int, marker: str = "…") -> str:
    """Cut ``text`` to at most ``limit`` characters, marking the cut."""
    if limit <= 0:
        return ""
    if len(text) <= limit:
        return text
    return text[: max(0, limit - len(marker))] + marker


def safe_head(value: Any, limit: int = 200) -> str:
    """Redacted, truncated, single-string view of any value (args may be non-str)."""
    text = value if isinstance(value, str) else repr(value)
    # Cut first (with a margin so a secret straddling the limit is still seen
    # whole), then redact, then cut to size: redaction cost stays bounded.
    return truncate(redact(text[: limit + 512]), limit)


SECRET_ENV_RE = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION)", re.IGNORECASE)


def is_secret_env_name(name: str) -> bool:
    """True for environment variable names that must never reach a sandbox."""
    return bool(SECRET_ENV_RE.search(name))
