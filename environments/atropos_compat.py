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
   :func:`environments.tokenizer.chat_token_ids` (correct on 4 and 5) and
   masks like ``tokenize_for_trainer(train_on_all_assistant_turns=True)``:
   every assistant turn trained, nothing else (tests/data/test_phase1_masks.py).

Nothing here runs at import time: callers apply what they need.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import re
import sys
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Union

from environments.data_health import trained_runs
from environments.piece_tokens import RenderingTokens, encode_rendering

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
    tokenizer_name: str | None = None,
    timeout: int = DEFAULT_TIMEOUT_S,
) -> list[APIServerConfig]:
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
    tokenizer_name: str | None = None,
) -> list[APIServerConfig]:
    """Alias of :func:`default_server_configs` (name used in docs/contracts.md)."""
    return default_server_configs(base_url, model_name, server_type, tokenizer_name)


def _fix_one(cfg: Any, index: int, tokenizer_name: str | None) -> APIServerConfig:
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
    updates: dict[str, Any] = {}
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


def fix_server_configs(configs: ServerConfigs, tokenizer_name: str | None = None) -> list[APIServerConfig]:
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


def apply_offline_defaults(environ: dict[str, str] | None = None) -> dict[str, str]:
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
    if ours and stream is not None and isinstance(ours[0], logging.StreamHandler):
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
) -> tuple[str, str] | None:
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


def _first_bad_score(scores: Any) -> Any | None:
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


#: Roles whose turns the model generated (atroposlib's UNMASKED_ROLES).
TRAINED_ROLES = ("assistant", "agent")


@dataclass
class ConversationTokens:
    """One conversation rendered for the trainer.

    ``spans`` are the ``[start, end)`` token ranges trained on, one per trained
    assistant turn (``span_messages`` holds each one's message index).
    ``drift`` counts assistant turns whose rendering alone was not a prefix of
    the whole conversation's rendering (a template that re-renders history):
    those turns are trained only as far as the two renderings agree.
    """

    tokens: list[int]
    masks: list[int]
    spans: list[tuple[int, int]] = field(default_factory=list)
    span_messages: list[int] = field(default_factory=list)
    drift: int = 0


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def render_conversation(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    prompt_messages: int = 0,
) -> ConversationTokens:
    """Tokens of the whole conversation, every assistant turn trained (trap 8).

    Same result as atroposlib's ``tokenize_for_trainer(train_on_all_assistant_turns=True)``
    (with ``tools`` passed to the template): for each assistant message ``i`` the
    trained span runs from the end of ``render(messages[:i], add_generation_prompt)``
    (the role header is the template's, not the model's) to the end of
    ``render(messages[:i+1])`` (content, tool calls, reasoning as rendered and the
    end-of-turn token). Everything else (system, user, tool, headers) is -100.
    Assistant messages before ``prompt_messages`` are prompt (e.g. few-shot).
    Unlike the upstream function it never writes tokens it did not render at that
    position: where a template re-renders history differently it trains only the
    agreeing prefix of that turn and counts it in ``drift``.
    """
    from environments.tokenizer import chat_token_ids

    fast = _TextBoundaries.build(tokenizer, messages, tools)
    tokens = fast.tokens if fast is not None else chat_token_ids(tokenizer, messages, tools=tools)
    masks = [-100] * len(tokens)
    out = ConversationTokens(tokens=tokens, masks=masks)
    for i, message in enumerate(messages):
        if i < prompt_messages or message.get("role") not in TRAINED_ROLES:
            continue
        span = fast.span(i) if fast is not None else None
        if span is None:
            span = _turn_span_by_tokens(tokenizer, messages, tools, tokens, i, out)
        start, end = span
        if end > start:
            masks[start:end] = tokens[start:end]
            out.spans.append((start, end))
            out.span_messages.append(i)
    return out


def _turn_span_by_tokens(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    tokens: list[int],
    i: int,
    out: ConversationTokens,
) -> tuple[int, int]:
    """The upstream way: tokenize the conversation up to turn ``i`` twice (exact, O(n) per turn)."""
    from environments.tokenizer import chat_token_ids

    before = chat_token_ids(tokenizer, messages[:i], tools=tools, add_generation_prompt=True) if i else []
    through = chat_token_ids(tokenizer, messages[: i + 1], tools=tools)
    start, end = len(before), len(through)
    agreed = _common_prefix(through, tokens)
    if _common_prefix(before, through) < start or agreed < end:
        out.drift += 1
        logger.warning(
            "chat template renders assistant turn %d differently inside the whole conversation; "
            "training only the %d tokens where both renderings agree",
            i,
            max(0, agreed - start),
        )
        end = min(end, agreed)
    return start, end


class _TextBoundaries:
    """Fast path for :func:`render_conversation`: render the prefixes as text (cheap) and map
    their lengths to token positions of the one full tokenization. Used for a turn only
    when both prefixes are text prefixes of the whole rendering and each ends exactly on a
    token boundary there (then tokenizing the prefix alone gives those same tokens);
    otherwise the turn takes the exact per-turn tokenization."""

    def __init__(
        self,
        tokenizer: Any,
        messages: list[dict[str, Any]],
        tools: Any,
        text: str,
        encoding: RenderingTokens,
    ) -> None:
        self.tokenizer, self.messages, self.tools = tokenizer, messages, tools
        self.text, self.encoding = text, encoding
        self.tokens: list[int] = encoding.ids

    @classmethod
    def build(cls, tokenizer: Any, messages: list[dict[str, Any]], tools: Any) -> _TextBoundaries | None:
        """The whole rendering, tokenized once with offsets. Its ids are the conversation's
        tokens: ``apply_chat_template(tokenize=True)`` is this rendering through the same
        backend without special tokens (tokenizing costs ~2 ms per 5 KB, rendering 0.1 ms)."""
        backend = getattr(tokenizer, "backend_tokenizer", None)
        # A slow tokenizer has no offsets; a backend set to truncate or pad would not give
        # what the tokenizer's own call (which turns both off) gives: the exact path, then.
        if backend is None or getattr(backend, "truncation", None) or getattr(backend, "padding", None):
            return None
        try:
            text = tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=False)
            enc = encode_rendering(tokenizer, text)
        except Exception:  # noqa: BLE001 - anything odd: the exact path decides
            return None
        return cls(tokenizer, messages, tools, text, enc)

    def _end_of(self, prefix: str) -> int | None:
        """The index of the first token that starts at ``len(prefix)`` (the number of tokens
        before it), when ``prefix`` is a text prefix of the rendering; else None."""
        if not self.text.startswith(prefix):
            return None
        return self.encoding.first_token_at(len(prefix))

    def span(self, i: int) -> tuple[int, int] | None:
        try:
            before = (
                self.tokenizer.apply_chat_template(
                    self.messages[:i], tools=self.tools or None, tokenize=False, add_generation_prompt=True
                )
                if i
                else ""
            )
            through = (
                self.text  # the last turn ends the conversation: that rendering is the one we have
                if i + 1 == len(self.messages)
                else self.tokenizer.apply_chat_template(
                    self.messages[: i + 1], tools=self.tools or None, tokenize=False
                )
            )
        except Exception:  # noqa: BLE001
            return None
        start = self._end_of(before) if before else 0
        end = self._end_of(through)
        if start is None or end is None or end < start:
            return None
        return start, end


def tokenize_conversation(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    prompt_messages: int | None = None,
) -> tuple[list[int], list[int]]:
    """Tokens and masks for a finished conversation (trap 8); see :func:`render_conversation`.

    Every assistant turn at index >= ``prompt_messages`` (default 0: all of them)
    is trained; everything the model did not generate is -100. Correct on
    transformers 4 and 5.
    """
    rendered = render_conversation(tokenizer, messages, tools=tools, prompt_messages=prompt_messages or 0)
    return rendered.tokens, rendered.masks


# --------------------------------------------------------------------------- Phase 2 trajectories (trap 9)
#
# 9. ManagedServer extends a sequence node only when the new prompt's text starts
#    with the node's text. The agent loop re-sends earlier replies as structured
#    ``tool_calls``, which the template re-renders differently from what was
#    sampled (``<tool_call>\n{json}\n</tool_call>`` vs ``<tool_call>{json}</tool_call>``),
#    so every turn opened a new node and only the last turn was trained.
#    Fix: the Phase 2 adapter (``hermes_base_env._StripSpecialTokens``) re-sends
#    each earlier reply as its exact sampled text (:func:`with_sampled_text`), so
#    one node grows over the whole rollout; where a server or template still breaks
#    the prefix, :func:`merge_nodes` keeps every turn it can find and counts the rest.

_THINK_SPLIT = re.compile(r"^<think>(.*?)</think>\n", re.DOTALL)


def strip_end_of_turn(text: str, end_tokens: Sequence[str]) -> str:
    """Drop one trailing end-of-turn token (``<|im_end|>``): the template writes it back."""
    for token in end_tokens:
        if token and text.endswith(token):
            return text[: -len(token)]
    return text


def with_sampled_text(messages: list[dict[str, Any]], sampled: dict[int, str]) -> list[dict[str, Any]]:
    """``messages`` with each assistant reply at a known index replaced by its exact sampled text."""
    out = list(messages)
    for index, text in sampled.items():
        if index < len(out) and out[index].get("role") == "assistant":
            out[index] = {"role": "assistant", "content": text}
    return out


def _renders_same(tokenizer: Any, a: dict[str, Any], b: dict[str, Any], tools: list[dict[str, Any]] | None) -> bool:
    probe = [{"role": "user", "content": "x"}]
    try:
        ra = tokenizer.apply_chat_template(probe + [a], tools=tools or None, tokenize=False)
        rb = tokenizer.apply_chat_template(probe + [b], tools=tools or None, tokenize=False)
    except Exception:  # noqa: BLE001 - a template that cannot render it does not render it the same
        return False
    return bool(ra == rb)


def sampled_messages(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    sampled: dict[int, str],
    tools: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Phase 2 ``messages`` whose template rendering is what was sampled.

    Reasoning goes to ``reasoning_content`` (as in Phase 1). An assistant message
    keeps its structured ``tool_calls`` when the template renders them exactly as
    the model wrote them; otherwise ``content`` carries the sampled text (tool-call
    markup included) and the parsed calls move to ``parsed_tool_calls``, so that
    ``tokens`` still decode to the rendering of ``messages``.
    """
    out = list(messages)
    for index, text in sorted(sampled.items()):
        if index >= len(out) or out[index].get("role") != "assistant":
            continue
        original = out[index]
        raw = {"role": "assistant", "content": text}
        reasoning, rest = None, text
        match = _THINK_SPLIT.match(text)
        if match:
            reasoning, rest = match.group(1), text[match.end() :]
        candidates = []
        if original.get("tool_calls"):
            structured = {k: v for k, v in original.items() if k not in ("content", "reasoning_content")}
            structured["content"] = original.get("content") or ""
            if reasoning is not None:
                structured["content"] = _THINK_SPLIT.sub("", structured["content"], count=1)
                structured["reasoning_content"] = reasoning
            candidates.append(structured)
        plain = {"role": "assistant", "content": rest}
        if reasoning is not None:
            plain["reasoning_content"] = reasoning
        if original.get("tool_calls"):
            plain["parsed_tool_calls"] = original["tool_calls"]
        candidates.append(plain)
        chosen = next((c for c in candidates if _renders_same(tokenizer, c, raw, tools)), None)
        if chosen is None:
            chosen = dict(raw, **({"parsed_tool_calls": original["tool_calls"]} if original.get("tool_calls") else {}))
        out[index] = chosen
    return out


@dataclass
class Trajectory:
    """One Phase 2 rollout as a trainer sees it."""

    tokens: list[int]
    masks: list[int]
    logprobs: list[float]
    node_count: int
    drift: int = 0  # times the prefix broke (extra nodes)
    lost_turns: int = 0  # sampled turns that could not be placed in the final sequence


def _find(haystack: list[int], needle: list[int], start: int) -> int:
    n = len(needle)
    for j in range(start, len(haystack) - n + 1):
        if haystack[j : j + n] == needle:
            return j
    return -1


def merge_nodes(nodes: Sequence[Any]) -> Trajectory:
    """One trajectory from ManagedServer's nodes (``tokens``, ``masked_tokens``, ``logprobs``).

    With one node (the normal case) that node is the trajectory. With more, the
    prefix broke: the last node holds the whole conversation, but earlier turns
    in it are re-tokenized prompt. Each earlier node's sampled runs are looked up
    in order in the last node and trained there with their logprobs; runs that
    are not found (re-rendered differently) are counted in ``lost_turns``.
    """
    if not nodes:
        raise ValueError("no ManagedServer nodes: the rollout made no Phase 2 call")
    last = nodes[-1]
    tokens = list(last.tokens)
    masks = list(last.masked_tokens)
    logprobs = list(last.logprobs) if last.logprobs is not None else [1.0] * len(tokens)
    traj = Trajectory(tokens, masks, logprobs, node_count=len(nodes), drift=len(nodes) - 1)
    if len(nodes) == 1:
        return traj
    logger.warning(
        "Phase 2 prefix broke %d time(s) in one rollout (ManagedServer made %d nodes); merging them",
        len(nodes) - 1,
        len(nodes),
    )
    own = trained_runs(masks)
    limit = own[0][0] if own else len(tokens)  # earlier turns sit before the last node's own completions
    pos = 0
    for node in nodes[:-1]:
        for a, b in trained_runs(node.masked_tokens):
            segment = list(node.tokens[a:b])
            j = _find(tokens[:limit], segment, pos)
            if j < 0:
                traj.lost_turns += 1
                continue
            masks[j : j + len(segment)] = segment
            logprobs[j : j + len(segment)] = list(node.logprobs[a:b])
            pos = j + len(segment)
    if traj.lost_turns:
        logger.warning(
            "Phase 2: %d sampled turn(s) could not be placed in the final sequence and are not trained", traj.lost_turns
        )
    return traj


def complete_to_rendering(tokenizer: Any, traj: Trajectory, rendered: str) -> bool:
    """Append the template's closing text (e.g. the ``\\n`` after the last ``<|im_end|>``) masked,
    so ``tokens`` decode to ``rendered``. False when the tokens are not a prefix of it."""
    text = tokenizer.decode(traj.tokens, skip_special_tokens=False)
    if not rendered.startswith(text):
        return False
    tail = rendered[len(text) :]
    if tail:
        extra = list(tokenizer.encode(tail, add_special_tokens=False))
        traj.tokens.extend(extra)
        traj.masks.extend([-100] * len(extra))
        traj.logprobs.extend([1.0] * len(extra))
    return True
