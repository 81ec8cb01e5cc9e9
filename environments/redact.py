"""Secret redaction and truncation for anything we log, record or display.

Tool arguments and tool output regularly carry credentials (an agent runs
``export OPENAI_API_KEY=...`` or cats a ``.env``). Everything that leaves a
rollout towards a log line, an event or a screen goes through ``redact``.
"""

from __future__ import annotations

import base64
import os
import re
import threading
from collections.abc import Iterable
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

# NAME=value / NAME: value / "name": "value" where NAME smells like a secret (it holds one of
# SECRET_WORDS). Repeats are bounded: unbounded ones backtrack quadratically on long unbroken runs.
SECRET_WORDS = r"api[_\-]?key|apikey|secret|token|passwd|password|credential|auth"
_SECRET_NAME = rf"[A-Za-z0-9_\-]{{0,64}}(?:{SECRET_WORDS})[A-Za-z0-9_\-]{{0,64}}"
_ASSIGN_RE = re.compile(
    rf"""(?P<name>["']?\b{_SECRET_NAME}["']?)(?P<sep>\s*[:=]\s*)(?P<quote>["']?)(?P<value>[^\s"',;&|]+)""",
    re.IGNORECASE,
)
_BEARER_RE = re.compile(r"(?P<kw>\b(?:Bearer|Basic|token)\s+)(?P<value>[A-Za-z0-9._~+/=\-]{12,})", re.IGNORECASE)
_URL_CRED_RE = re.compile(
    r"(?P<scheme>\b[a-z][a-z0-9+.\-]{0,30}://)(?P<user>[^:/@\s]{1,256}):(?P<pw>[^@/\s]{1,256})@", re.IGNORECASE
)


def _redact_assignment(m: re.Match[str]) -> str:
    if m["value"].startswith(REDACTED) or m["value"].lower() in ("bearer", "basic", "token"):
        return m.group(0)  # already handled by the bearer rule
    return f"{m['name']}{m['sep']}{m['quote']}{REDACTED}"


# What a match of each costly rule must contain: text without it is not searched at all
# (the name rule tries every position with 64-character look-aheads: ~0.3 µs a character,
# and every tool result and turn head goes through here on the env's loop). Each word list
# is the rule's own literals (SECRET_WORDS spelled out); the fallback regex applies them with
# the rule's flags, so non-ASCII text that case-folds onto them (the Kelvin sign for k, ſ for
# s) is still seen.
_ASSIGN_WORDS = ("api_key", "api-key", "apikey", "secret", "token", "passwd", "password", "credential", "auth")
_ASSIGN_WORDS_RE = re.compile(SECRET_WORDS, re.IGNORECASE)
_BEARER_WORDS = ("bearer", "basic", "token")
_BEARER_WORDS_RE = re.compile(r"bearer|basic|token", re.IGNORECASE)


def _may_contain(text: str, words: tuple[str, ...], fallback: re.Pattern[str]) -> bool:
    """True unless ``text`` surely holds none of ``words`` in any case."""
    if text.isascii():  # ASCII text matches an ASCII pattern case-insensitively iff its lower case does
        lowered = text.lower()
        return any(word in lowered for word in words)
    return fallback.search(text) is not None


def redact(text: str) -> str:
    """Replace anything that looks like a credential with a marker, and every known
    secret (see ``known_secrets``) in plain or base64 form."""
    if not text:
        return text
    text = redact_known(text)
    if "://" in text:
        text = _URL_CRED_RE.sub(lambda m: f"{m['scheme']}{m['user']}:{REDACTED}@", text)
    if _may_contain(text, _BEARER_WORDS, _BEARER_WORDS_RE):
        text = _BEARER_RE.sub(lambda m: f"{m['kw']}{REDACTED}", text)
    if ("=" in text or ":" in text) and _may_contain(text, _ASSIGN_WORDS, _ASSIGN_WORDS_RE):
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


SECRET_ENV_RE = re.compile(
    r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASS\b|_PW\b|_PW_|PWD_|CRED|AUTH|COOKIE|SESSION|DSN|PRIVATE|SIGNATURE)",
    re.IGNORECASE,
)


def is_secret_env_name(name: str) -> bool:
    """True for environment variable names that look like they hold a credential.
    (Sandboxes do not rely on this: they get an allow-listed environment.)"""
    return bool(SECRET_ENV_RE.search(name)) and name not in ("PWD", "OLDPWD")


# ----------------------------------------------------------------- known secrets
#
# Pattern rules miss a credential with no recognisable shape, and any encoded form. A
# secret we *know* (a secret-named variable in the console's environment, or one an
# env registers) is matched literally, and in base64 at each of the three alignments
# it can have inside a longer base64 stream (e.g. `base64 /proc/$PPID/environ`).

MIN_KNOWN_SECRET = 8  # shorter values would redact ordinary words
_registered: set[str] = set()
_known_lock = threading.Lock()
_known_cache: tuple[frozenset[str], re.Pattern[str] | None] = (frozenset(), None)


def register_secret(value: str) -> None:
    """Redact ``value`` (and its base64 forms) everywhere from now on."""
    if isinstance(value, str) and len(value) >= MIN_KNOWN_SECRET:
        with _known_lock:
            _registered.add(value)


_env_cache: tuple[tuple[object, ...] | None, frozenset[str]] = (None, frozenset())


def _environ_secrets() -> frozenset[str]:
    """Secret-named values of os.environ, recomputed only when the environment changed
    (redact runs on every event: decoding and matching every name each time is costly)."""
    global _env_cache
    data = getattr(os.environ, "_data", None)
    snapshot = tuple(data.items()) if isinstance(data, dict) else None
    cached_for, secrets = _env_cache
    if snapshot is not None and snapshot == cached_for:
        return secrets
    secrets = frozenset(v for k, v in list(os.environ.items()) if len(v) >= MIN_KNOWN_SECRET and is_secret_env_name(k))
    _env_cache = (snapshot, secrets)
    return secrets


def known_secrets(environ: Any | None = None) -> frozenset[str]:
    if environ is None:
        found = set(_environ_secrets())
    else:
        found = {v for k, v in list(environ.items()) if len(v) >= MIN_KNOWN_SECRET and is_secret_env_name(k)}
    with _known_lock:
        found |= _registered
    return frozenset(found)


def _b64_cores(secret: bytes) -> Iterable[str]:
    """The base64 text that encodes ``secret`` whatever bytes precede or follow it."""
    for pad in range(3):
        enc = base64.b64encode(b"\0" * pad + secret).decode("ascii")
        start = (0, 2, 3)[pad]  # leading chars mixing in the unknown preceding bytes
        end = ((pad + len(secret)) // 3) * 4  # only complete groups: the rest mixes in what follows
        core = enc[start:end]
        if len(core) >= 8:
            yield core
            yield core.replace("+", "-").replace("/", "_")  # urlsafe alphabet


def _known_pattern(secrets: frozenset[str]) -> re.Pattern[str] | None:
    global _known_cache
    cached_for, pattern = _known_cache
    if cached_for == secrets:
        return pattern
    forms: list[str] = []
    for secret in secrets:
        forms.append(secret)
        forms.extend(_b64_cores(secret.encode("utf-8", errors="surrogateescape")))
    forms = sorted(set(forms), key=len, reverse=True)  # longest first: no partial leftovers
    pattern = re.compile("|".join(map(re.escape, forms))) if forms else None
    _known_cache = (secrets, pattern)
    return pattern


def redact_known(text: str) -> str:
    """Replace every known secret, plain or base64-encoded, with the marker (linear time)."""
    if not text:
        return text
    pattern = _known_pattern(known_secrets())
    return pattern.sub(REDACTED, text) if pattern is not None else text


def local_backend_warning(backend: str, environ: Any | None = None) -> str | None:
    """The start-up warning for the local backend when the console's environment holds
    secrets: local commands can read them from /proc/<console pid>/environ."""
    if backend != "local":
        return None
    env = os.environ if environ is None else environ
    names = sorted(k for k, v in env.items() if v and is_secret_env_name(k))
    if not names:
        return None
    shown = ", ".join(names[:6]) + (" ..." if len(names) > 6 else "")
    return (
        f"terminal backend 'local' has NO isolation: sandbox commands run on this host as this user and can read "
        f"this console's environment ({shown}) from /proc. Use TERMINAL_ENV=bwrap (or docker) for untrusted models."
    )
