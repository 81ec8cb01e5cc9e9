"""Every atroposlib 0.4.0 trap we work around, in one place.

atroposlib is archived upstream, so nothing below will be fixed there. Each
trap is listed with its fix; each fix has a test in
``tests/environments/test_atropos_compat.py``.

1. Single server config ignores ``base_url``. ``ServerManager`` given one
   ``APIServerConfig`` (not a list) or a ``ServerBaseline`` fans out to
   ``localhost:9004..9007`` and silently drops ``base_url``.
   Fix: :func:`fix_server_configs` always returns a list, converting (with a
   warning) and keeping ``base_url`` (a bare ``ServerBaseline`` points at
   :data:`DEFAULT_BASE_URL`, the embedded simulator).
2. Empty ``api_key``. openai>=1 refuses ``AsyncClient(api_key="")``.
   Fix: an empty key becomes ``"x"``.
3. Endless health pinger. ``health_check=True`` (the default) starts a task
   that chats ``"hi"`` every second forever and blocks every call with no
   timeout after one failed ping. Fix: our defaults use ``health_check=False``
   and :func:`cancel_health_checks` cancels any ``check_task`` at shutdown.
4. Huge timeouts, nested retries. Retries are nested 3x3 (tenacity outside
   and inside, plus openai's own 2), so a hung server costs ~27 x ``timeout``
   and the default timeout is 1200 s. Fix: :data:`DEFAULT_TIMEOUT_S` (30 s)
   in our defaults; a user-set timeout is kept.
5. Hub access. ``BaseEnv.__init__`` and the vLLM/SGLang servers call
   ``AutoTokenizer.from_pretrained`` on Hub names (48 s of retries offline).
   Fix: configs default ``tokenizer_name`` to our local tokenizer, servers
   with ``tokenizer_name="none"`` get the env's tokenizer, and
   :func:`apply_offline_defaults` sets ``HF_HUB_OFFLINE=1`` etc.
6. wandb. ``process``/``evaluate`` force ``use_wandb=True`` and crash without
   a key. Fix: :func:`apply_offline_defaults` sets ``WANDB_MODE=offline``
   unless the user chose a mode (or asked for online).
7. Noise. Loggers ``atroposlib.*`` are hard-set to DEBUG and propagate into
   whatever handler the host has; every group warns "Trainer requested to
   ignore max length" while ``max_token_len == -1``.
   Fix: :func:`tame_atroposlib_logging` (level WARNING, propagate off, one
   stderr handler) and :func:`sensible_max_token_len` for ``env.max_token_len``.
8. transformers 5 ``apply_chat_template`` returns a ``BatchEncoding`` and
   ``tokenize_for_trainer`` silently produces garbage. We pin <5 and never use
   ``tokenize_for_trainer``: :func:`tokenize_conversation` goes through
   :func:`environments.tokenizer.chat_token_ids` (correct on 4 and 5).

Nothing here runs at import time: callers apply what they need.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import sys
import warnings
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

# atroposlib is imported inside the functions: apply_offline_defaults() must be
# callable before transformers / huggingface_hub are imported (they read the
# offline flags at import time).
if TYPE_CHECKING:
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig, ServerBaseline

logger = logging.getLogger(__name__)

#: The embedded simulator's default OpenAI base URL.
DEFAULT_BASE_URL = "http://127.0.0.1:9001/v1"
DEFAULT_MODEL_NAME = "hermes-sim"
#: Short per-request timeout. atroposlib retries 3x3 around it (trap 4).
DEFAULT_TIMEOUT_S = 30
#: atroposlib's own default; seeing it means the user never chose one.
_ATROPOS_DEFAULT_TIMEOUT_S = 1200
_PLACEHOLDER_API_KEY = "x"
_SERVER_TYPES = ("openai", "trl", "sglang", "vllm")

ServerConfigs = Union["ServerBaseline", "APIServerConfig", Sequence[Any], None]


# --------------------------------------------------------------------------- server configs


def default_server_configs(
    base_url: str = DEFAULT_BASE_URL,
    model_name: str = DEFAULT_MODEL_NAME,
    server_type: str = "openai",
    tokenizer_name: Optional[str] = None,
    timeout: int = DEFAULT_TIMEOUT_S,
) -> List["APIServerConfig"]:
    """One in-process-friendly server config, as a list (trap 1).

    ``tokenizer_name`` matters for ``vllm``/``sglang`` servers, which load a
    tokenizer at construction; ``None`` means our local tokenizer.
    """
    if server_type not in _SERVER_TYPES:
        raise ValueError(f"server_type {server_type!r} is not supported; expected one of {list(_SERVER_TYPES)}")
    if not base_url:
        raise ValueError("base_url must be a non-empty URL such as 'http://127.0.0.1:9001/v1'")
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig

    if tokenizer_name is None:
        from environments.tokenizer import local_tokenizer_path

        tokenizer_name = local_tokenizer_path()
    return [
        APIServerConfig(
            base_url=base_url,
            model_name=model_name,
            api_key=_PLACEHOLDER_API_KEY,
            server_type=server_type,
            tokenizer_name=tokenizer_name,
            health_check=False,
            timeout=timeout,
        )
    ]


def server_configs_for(
    base_url: str = DEFAULT_BASE_URL,
    model_name: str = DEFAULT_MODEL_NAME,
    server_type: str = "openai",
    tokenizer_name: Optional[str] = None,
) -> List["APIServerConfig"]:
    """Alias of :func:`default_server_configs` (name used in docs/contracts.md)."""
    return default_server_configs(base_url, model_name, server_type, tokenizer_name)


def _fix_one(cfg: Any, index: int, tokenizer_name: Optional[str]) -> "APIServerConfig":
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig, ServerBaseline

    if isinstance(cfg, dict):
        cfg = APIServerConfig(**cfg)
    if not isinstance(cfg, ServerBaseline):
        raise TypeError(
            f"server_configs[{index}] is a {type(cfg).__name__}; expected an APIServerConfig "
            "(atroposlib.envs.server_handling.server_baseline) or a dict of its fields"
        )
    if not isinstance(cfg, APIServerConfig):
        # A bare ServerBaseline has no URL at all; atroposlib would invent localhost:9004..9007.
        warnings.warn(
            f"server_configs[{index}] is a ServerBaseline, which atroposlib turns into "
            f"localhost:9004..9007; using one APIServerConfig at {DEFAULT_BASE_URL} instead",
            UserWarning,
            stacklevel=3,
        )
        cfg = APIServerConfig(**cfg.model_dump(), base_url=DEFAULT_BASE_URL)
    updates: Dict[str, Any] = {}
    if not cfg.api_key:
        updates["api_key"] = _PLACEHOLDER_API_KEY
    if not cfg.base_url:
        raise ValueError(
            f"server_configs[{index}].base_url is empty; expected the server URL, e.g. {DEFAULT_BASE_URL!r}"
        )
    if cfg.server_type not in _SERVER_TYPES:
        raise ValueError(
            f"server_configs[{index}].server_type is {cfg.server_type!r}; expected one of {list(_SERVER_TYPES)}"
        )
    if cfg.server_type != "openai" and cfg.tokenizer_name in ("", "none") and tokenizer_name:
        # vLLM/SGLang servers would otherwise load model_name from the Hub (trap 5).
        updates["tokenizer_name"] = tokenizer_name
    if cfg.timeout == _ATROPOS_DEFAULT_TIMEOUT_S:
        updates["timeout"] = DEFAULT_TIMEOUT_S
    return cfg.model_copy(update=updates) if updates else cfg


def fix_server_configs(configs: ServerConfigs, tokenizer_name: Optional[str] = None) -> List["APIServerConfig"]:
    """Return a list of usable ``APIServerConfig`` (traps 1, 2, 4, 5).

    A single config (or ``ServerBaseline``) is wrapped in a list with a
    warning; base_url is kept. Health checks are left as configured (the
    user may want them against a remote server); our defaults turn them off.
    """
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig, ServerBaseline

    if configs is None:
        warnings.warn(
            f"no server configs given; using the embedded simulator at {DEFAULT_BASE_URL}",
            UserWarning,
            stacklevel=2,
        )
        return default_server_configs(tokenizer_name=tokenizer_name)
    if isinstance(configs, (ServerBaseline, dict)):
        if isinstance(configs, APIServerConfig) or isinstance(configs, dict):
            warnings.warn(
                "server_configs should be a list; a single APIServerConfig makes atroposlib ignore its "
                "base_url, so it was wrapped in a list",
                UserWarning,
                stacklevel=2,
            )
        configs = [configs]
    if isinstance(configs, (str, bytes)) or not isinstance(configs, Iterable):
        raise TypeError(f"server_configs is a {type(configs).__name__}; expected a list of APIServerConfig")
    fixed = [_fix_one(cfg, i, tokenizer_name) for i, cfg in enumerate(configs)]
    if not fixed:
        raise ValueError("server_configs is empty; expected at least one APIServerConfig")
    return fixed


async def cancel_health_checks(server_manager: Any) -> int:
    """Cancel every server's health-check task (trap 3); returns how many were running."""
    tasks = []
    for server in getattr(server_manager, "servers", []) or []:
        task = getattr(server, "check_task", None)
        if task is not None and not task.done():
            task.cancel()
            tasks.append(task)
        if task is not None:
            server.check_task = None
    for task in tasks:
        try:
            await task
        except (asyncio.CancelledError, Exception):  # noqa: BLE001 - it is being torn down
            pass
    return len(tasks)


# --------------------------------------------------------------------------- process environment


def apply_offline_defaults(environ: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """Set offline-safe env vars unless the user chose otherwise (traps 5, 6, 7).

    Returns what was set. ``WANDB_MODE`` is left alone when already set;
    ``HERMES_WANDB_ONLINE=1`` asks for online wandb explicitly.
    """
    env = os.environ if environ is None else environ
    wanted = {
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TRANSFORMERS_VERBOSITY": "error",
        "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",  # "None of PyTorch... found" at import
        "TOKENIZERS_PARALLELISM": "false",
    }
    if env.get("HERMES_WANDB_ONLINE", "").lower() not in ("1", "true", "yes"):
        wanted["WANDB_MODE"] = "offline"
    applied = {}
    for key, value in wanted.items():
        if key not in env:
            env[key] = value
            applied[key] = value
    return applied


_TAMED_MARK = "_hermes_tamed"


def tame_atroposlib_logging(level: int = logging.WARNING, stream: Any = None) -> logging.Logger:
    """Stop atroposlib's DEBUG loggers from flooding the host (trap 7).

    The ``atroposlib`` logger gets ``level``, ``propagate=False`` and a single
    handler on ``stream`` (stderr); child loggers that hard-set DEBUG are
    reset so they inherit. Idempotent.
    """
    root = logging.getLogger("atroposlib")
    root.setLevel(level)
    root.propagate = False
    ours = [h for h in root.handlers if getattr(h, _TAMED_MARK, False)]
    if ours and stream is not None:
        ours[0].setStream(stream)  # an explicit stream wins (e.g. the console's log pane)
    if not ours:
        handler = logging.StreamHandler(stream or sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        setattr(handler, _TAMED_MARK, True)
        root.addHandler(handler)
    for name, candidate in list(logging.Logger.manager.loggerDict.items()):
        if name.startswith("atroposlib.") and isinstance(candidate, logging.Logger):
            candidate.setLevel(logging.NOTSET)
    # ManagedServer warns "vLLM is not installed" for every server object; our
    # agent loop parses tool-call text itself, so once per process is plenty.
    warnings.filterwarnings("once", message="vLLM is not installed", category=UserWarning)
    return root


def drop_reason(
    group: Any, config: Any, max_token_len: int = -1, abort_on_any_max_length_exceeded: bool = True
) -> Optional[Tuple[str, str]]:
    """Why ``BaseEnv.handle_send_to_api`` would silently skip ``group`` (same checks,
    same order), as ``(code, detail)``; None when it would be kept. atroposlib only
    logs these, so the console calls this to account for every dropped item."""
    if group is None:
        return "empty_group", "collect_trajectories returned no group"
    if not isinstance(group, dict) or None in group:
        return "invalid_group", f"expected a ScoredDataGroup dict, got {type(group).__name__}"
    expected = (group.get("group_overrides") or {}).get("group_size", config.group_size)
    got = len(group.get("tokens") or [])
    if got != expected:
        return "wrong_group_size", f"{got} rollouts, expected {expected}"
    scores = group.get("scores") or []
    bad = _first_bad_score(scores)
    if bad is not None:  # ours, not atroposlib's: a trainer cannot use it (and NaN is not JSON)
        return "non_finite_score", f"score {bad!r}; expected finite numbers"
    if getattr(config, "ensure_scores_are_not_same", False) and len(set(scores)) == 1:
        return "identical_scores", f"all {len(scores)} scores are {scores[0]} (ensure_scores_are_not_same)"
    if max_token_len > 0 and abort_on_any_max_length_exceeded:
        longest = max((len(t) for t in group.get("tokens") or []), default=0)
        if longest >= max_token_len:
            return "too_long", f"{longest} tokens >= max_token_len {max_token_len}"
    return None


def _first_bad_score(scores: Any) -> Optional[Any]:
    """The first score that is not a finite real number (None when all are)."""
    for score in scores:
        try:
            value = float(score)
        except (TypeError, ValueError):
            return score
        if not math.isfinite(value):
            return score
    return None


def sensible_max_token_len(max_token_length: int, max_agent_turns: int = 1) -> int:
    """A trainer-like ``env.max_token_len`` for runs without a trainer (trap 7).

    ``max_token_length`` is the per-turn generation cap; a multi-turn rollout
    holds up to ``max_agent_turns`` of those plus prompts and tool output,
    so the sequence cap is the per-turn cap times the turns (at least 1x).
    A trainer in serve mode overrides this with its own value.
    """
    if max_token_length <= 0:
        raise ValueError(f"max_token_length must be positive, got {max_token_length}")
    return max_token_length * max(1, int(max_agent_turns))


# --------------------------------------------------------------------------- tokenization


def tokenize_conversation(
    tokenizer: Any,
    messages: List[Dict[str, Any]],
    tools: Optional[List[Dict[str, Any]]] = None,
    prompt_messages: Optional[int] = None,
) -> Tuple[List[int], List[int]]:
    """Tokens and masks for a finished conversation (trap 8).

    The first ``prompt_messages`` messages (default: everything before the
    first assistant message) are the prompt and masked with -100; the rest
    is trained on. Correct on transformers 4 and 5.
    """
    from environments.tokenizer import chat_token_ids

    if prompt_messages is None:
        prompt_messages = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), len(messages))
    tokens = chat_token_ids(tokenizer, messages, tools=tools)
    prompt_ids = chat_token_ids(tokenizer, messages[:prompt_messages], tools=tools, add_generation_prompt=True)
    # The rendered prompt is a prefix of the full render with our template; if a
    # template re-renders history differently, mask the common prefix only.
    n_prompt = 0
    for a, b in zip(prompt_ids, tokens):
        if a != b:
            break
        n_prompt += 1
    masks = [-100] * n_prompt + tokens[n_prompt:]
    return tokens, masks
