"""HermesAgentBaseEnv: an Atropos BaseEnv whose rollouts are agent-loop conversations.

Seed contract (pinned by ``tests/compat/test_public_surface.py``): the config
fields, the constructor and every method name an env author uses are kept.
Fixed without changing that contract:

* per-group tools travel to the group's rollouts in a ContextVar (upstream kept
  them on ``self``, so concurrent groups could see each other's tools);
* every rollout gets its own sandbox (fresh task_id) and its cleanup runs in
  ``finally`` -- also when the rollout is cancelled or the loop raises;
* a rollout that raises becomes a scored item with reward 0.0 instead of
  failing the whole group;
* Phase 1 tokens are the real chat-template tokens with the prompt masked
  (upstream used unusable placeholders), Phase 2 logprobs are forwarded;
* atroposlib traps are fixed in one place (``environments.atropos_compat``);
* groups atroposlib drops silently emit ``ItemDropped``;
* each rollout's failure reaches the runner that accounts for its group directly
  (``environments.verdicts``), not through the event bus.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import json
import logging
import os
import threading
import time
import uuid
from abc import abstractmethod
from collections.abc import Callable
from typing import Any

from environments.atropos_compat import apply_offline_defaults

apply_offline_defaults()  # before atroposlib pulls in transformers / huggingface_hub

from atroposlib.envs.base import (  # noqa: E402
    BaseEnv,
    BaseEnvConfig,
    ScoredDataGroup,
    ScoredDataItem,
)
from atroposlib.envs.server_handling.openai_server import OpenAIServer  # noqa: E402
from atroposlib.envs.server_handling.server_baseline import APIServerConfig as APIServerConfig  # noqa: E402 (re-exported)
from atroposlib.envs.server_handling.server_baseline import ServerBaseline  # noqa: E402
from atroposlib.envs.server_handling.server_manager import ServerManager  # noqa: E402,F401
from atroposlib.type_definitions import Item  # noqa: E402
from pydantic import Field, field_validator  # noqa: E402

from environments import events, verdicts  # noqa: E402
from environments.agent_loop import AgentResult, HermesAgentLoop, resize_tool_pool, tools_ready  # noqa: E402
from environments.atropos_compat import (  # noqa: E402
    complete_to_rendering,
    drop_reason,
    fix_server_configs,
    merge_nodes,
    render_conversation,
    sampled_messages,
    sensible_max_token_len,
    strip_end_of_turn,
    tame_atroposlib_logging,
    with_sampled_text,
)
from environments.data_health import EXTRA_KINDS, read_masks  # noqa: E402
from environments.lean_chat import server_class_for  # noqa: E402
from environments.patches import apply_patches  # noqa: E402
from environments.redact import safe_head  # noqa: E402
from environments.tokenizer import local_tokenizer_path  # noqa: E402
from environments.tokenizer_copies import TokenizerCopies  # noqa: E402
from environments.tool_context import ToolContext  # noqa: E402
from environments.tools import get_tool_definitions  # noqa: E402
from environments.tools.budget import BudgetConfig  # noqa: E402
from environments.toolset_distributions import sample_toolsets_from_distribution  # noqa: E402

apply_patches()

logger = logging.getLogger(__name__)

ToolSpec = tuple[list[dict[str, Any]], set[str]]

# The tools of the group a rollout belongs to. asyncio tasks copy the context
# when created, so each group's rollouts see their own group's value.
_group_tools: contextvars.ContextVar[ToolSpec | None] = contextvars.ContextVar("hermes_group_tools", default=None)
_group_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("hermes_group_id", default=None)

_TOOL_ERROR_BUFFER_MAX = 500
_PLACEHOLDER_MAX_TOKENS = 128


class HermesAgentEnvConfig(BaseEnvConfig):
    """BaseEnvConfig plus the Hermes agent settings (seed field names and defaults)."""

    tokenizer_name: str = Field(
        default_factory=local_tokenizer_path,
        description="Tokenizer directory or Hub name; defaults to the local tiny tokenizer (no Hub access).",
    )
    enabled_toolsets: list[str] | None = Field(default=None, description="Toolsets to enable; None means all.")
    disabled_toolsets: list[str] | None = Field(default=None, description="Toolsets removed last.")
    distribution: str | None = Field(
        default=None, description="Toolset distribution sampled once per group; wins over enabled_toolsets."
    )
    max_agent_turns: int = Field(default=30, ge=1, description="Maximum LLM calls per rollout.")
    system_prompt: str | None = Field(default=None, description="Optional system message.")
    agent_temperature: float = Field(default=1.0, ge=0.0, description="Sampling temperature of the agent.")
    terminal_backend: str = Field(default="local", description="Sandbox backend (local, bwrap, docker, ...).")
    terminal_timeout: int = Field(default=120, ge=1, description="Per-command timeout (TERMINAL_TIMEOUT).")
    terminal_lifetime: int = Field(
        default=3600, ge=1, description="Idle seconds before a sandbox is reaped (TERMINAL_LIFETIME_SECONDS)."
    )
    dataset_name: str | None = Field(default=None, description="Dataset name or path.")
    dataset_split: str = Field(default="train", description="Dataset split.")
    prompt_field: str = Field(default="prompt", description="Field holding the prompt.")
    tool_pool_size: int = Field(default=128, ge=1, description="Threads in the tool pool.")
    overlap_setup: bool = Field(
        default=True,
        description="Run prepare_rollout (sandbox start, setup commands) while the first model call is in flight; "
        "tool calls and the reward wait for it, and its failure fails the rollout as before. False: setup first.",
    )
    tool_call_parser: str = Field(default="hermes", description="Parser for tool calls in raw text (Phase 2).")
    default_result_size_chars: int = Field(default=100_000, ge=1, description="Tool-result persistence threshold.")
    turn_budget_chars: int = Field(default=200_000, ge=1, description="Per-turn aggregate tool-result budget.")
    preview_size_chars: int = Field(default=1_500, ge=0, description="Preview size of persisted results.")
    tool_result_overrides: dict[str, int] | None = Field(default=None, description="Per-tool thresholds.")
    extra_body: dict[str, Any] | None = Field(default=None, description="Passed through to chat_completion.")
    allow_placeholder_tokens: bool = Field(
        default=False,
        description="Allow a tokenizer without a chat template (placeholder tokens, untrainable: SFT/messages only). "
        "Every such rollout is flagged placeholder_tokens.",
    )

    def build_budget_config(self) -> BudgetConfig:
        """The tool-result budget these fields describe."""
        kwargs = dict(
            default_result_size=self.default_result_size_chars,
            turn_budget=self.turn_budget_chars,
            preview_size=self.preview_size_chars,
            tool_overrides=dict(self.tool_result_overrides or {}),
        )
        return BudgetConfig(**kwargs)

    @field_validator("terminal_backend")
    @classmethod
    def _supported_backend(cls, value: str) -> str:
        """modal/ssh/... are refused when the config is read, naming the supported backends."""
        from environments.sandboxes.settings import UNAVAILABLE_BACKENDS

        if isinstance(value, str) and value.strip().lower() in UNAVAILABLE_BACKENDS:
            from environments.sandboxes.unavailable import unavailable_backend

            raise ValueError(str(unavailable_backend(value.strip().lower())))
        return value


_SANDBOX_UNAVAILABLE = "SandboxUnavailable"  # environments.sandboxes.records.SandboxUnavailable, as tools report it


def _rollout_failure(rollout_error: str | None, result: AgentResult | None) -> str | None:
    """Why a rollout gave no usable data: it raised or its loop stopped on an error, or the sandbox
    backend itself failed under one of its tool calls (not the model's command)."""
    if rollout_error:
        return safe_head(rollout_error, 500)
    for err in result.tool_errors if result is not None else []:
        if _SANDBOX_UNAVAILABLE in err.error:
            return safe_head(err.error, 500)
    return None


def _item_summary(item: Any) -> str:
    if isinstance(item, dict):
        for key in ("task_id", "id", "prompt", "question"):
            if key in item:
                return safe_head(item[key], 120)
    return safe_head(item, 120)


_PROMPT_LIMIT = 4_000


def _prompt_fields(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The system and first user message of a rollout, for the console's transcript."""
    out = {"system_prompt": "", "prompt": ""}
    for msg in messages:
        key = {"system": "system_prompt", "user": "prompt"}.get(str(msg.get("role")))
        if key and not out[key]:
            content = msg.get("content")
            out[key] = safe_head(content if isinstance(content, str) else repr(content), _PROMPT_LIMIT)
    return out


def _reward_details(details: Any) -> dict[str, Any]:
    """ctx.reward_details as small plain data (numbers stay numbers, anything else is text)."""
    if not isinstance(details, dict):
        return {}
    out: dict[str, Any] = {}
    for key, value in list(details.items())[:20]:
        ok = isinstance(value, (int, float, bool)) or value is None
        out[safe_head(str(key), 80)] = value if ok else safe_head(value, 300)
    return out


def _placeholder_tokens(tokenizer: Any, messages: list[dict[str, Any]]) -> tuple[list[int], list[int]]:
    """Upstream's untrainable stand-in tokens: mask only the first position."""
    text = "\n".join(str(m.get("content")) for m in messages if m.get("content"))
    tokens: list[int] = []
    if tokenizer is not None:
        try:
            tokens = list(tokenizer.encode(text, add_special_tokens=True))
        except Exception:  # noqa: BLE001 - fall through to the length-based stand-in
            tokens = []
    if not tokens:
        tokens = list(range(max(1, min(len(text) // 4, _PLACEHOLDER_MAX_TOKENS))))
    return tokens, [-100] + tokens[1:]


class _EarlyTokens:
    """A rollout's tokenisation started before its reward, with what it tokenised."""

    def __init__(self, work: Any, messages: list[dict[str, Any]]) -> None:
        self.messages = messages
        self.seen = _fingerprint(messages)
        self.task = asyncio.ensure_future(work)
        self.task.add_done_callback(_quiet)  # a cancelled rollout never asks for it

    async def result(self, messages: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The tokens, when ``messages`` are still what was tokenised; else None (do it again)."""
        if messages is self.messages and _fingerprint(messages) == self.seen:
            return await self.task
        self.task.cancel()  # a queued tokenisation is dropped; a running one ends and frees its copy
        return None


def _fingerprint(messages: list[dict[str, Any]]) -> str:
    return json.dumps(messages, default=repr, ensure_ascii=False)


def _quiet(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: no "never retrieved" warning for a result nobody wanted


# Sandbox teardown (kill, reap, remove dirs) waits more than it computes: a pool of its own,
# bounded (256 cleanups polling /proc and cgroupfs at once cost more CPU than they save), and
# not the loop's small default executor, where they queued behind each other for seconds.
_CLEANUP_WORKERS = 16


def _new_cleanup_pool() -> concurrent.futures.ThreadPoolExecutor:
    return concurrent.futures.ThreadPoolExecutor(max_workers=_CLEANUP_WORKERS, thread_name_prefix="hermes-cleanup")


_cleanup_pool = _new_cleanup_pool()
_cleanups: set[concurrent.futures.Future[None]] = set()
_cleanups_lock = threading.Lock()


def _start_cleanup(ctx: Any) -> concurrent.futures.Future[None]:
    """Clean a rollout's sandbox in the cleanup pool: a cancellation never blocks on the
    teardown, and a finished rollout tokenizes meanwhile. Our own ToolContext stops the
    sandbox's processes here first (no waiting), so the wait for a pool thread, long when
    hundreds of rollouts end together, is not also a wait for the processes to die. A
    subclass that overrides ``cleanup`` gets its own ``cleanup`` called in the pool, as
    before. ``wait_for_cleanups`` waits for every one not yet done."""
    task_id = getattr(ctx, "task_id", "?")
    if type(ctx).cleanup is ToolContext.cleanup:
        done = _cleanup_pool.submit(_cleanup_context, task_id, ctx.begin_cleanup())
    else:
        done = _cleanup_pool.submit(_cleanup_context, task_id, ctx.cleanup)
    with _cleanups_lock:
        _cleanups.add(done)
    done.add_done_callback(_forget_cleanup)
    return done


def shutdown_cleanup_pool(wait: bool = True) -> None:
    """Stop the cleanup threads at the end of a run; a fresh pool (no thread until used) takes
    over, so a stopped runtime leaves nothing running while later runs still work."""
    global _cleanup_pool
    old = _cleanup_pool
    _cleanup_pool = _new_cleanup_pool()
    old.shutdown(wait=wait)


def _forget_cleanup(done: concurrent.futures.Future[None]) -> None:
    with _cleanups_lock:
        _cleanups.discard(done)


def _abandon(setup: asyncio.Future[None] | None) -> None:
    """Cancel a rollout's setup still running (its rollout ended first); its outcome is read so
    asyncio never reports it as lost."""
    if setup is None:
        return
    if not setup.done():
        setup.cancel()
    setup.add_done_callback(lambda done: done.cancelled() or done.exception())


def wait_for_cleanups(timeout_s: float) -> int:
    """Wait for sandbox cleanups still running or queued; returns how many are left."""
    with _cleanups_lock:
        pending = list(_cleanups)
    concurrent.futures.wait(pending, timeout=max(0.0, timeout_s))
    with _cleanups_lock:
        return sum(1 for f in _cleanups if not f.done())


def _cleanup_context(task_id: str, cleanup: Callable[[], None]) -> None:
    try:
        cleanup()
    except Exception as exc:  # noqa: BLE001 - cleanup is best effort; the reaper is the backstop
        logger.warning("sandbox cleanup for %s failed: %s", task_id, exc)


def _make_tool_context(task_id: str) -> ToolContext:
    return ToolContext(task_id)


class _StripSpecialTokens:
    """Our Phase 2 adapter around ManagedServer (trap 9 in ``atropos_compat``).

    * ManagedServer decodes completions with ``skip_special_tokens=False`` when
      tools are on, so ``<|im_end|>`` ends up in message content: strip trailing
      special tokens from the replies the agent loop sees.
    * Keep each reply's exact sampled text and re-send it in place of the
      structured assistant message on later turns, so the next prompt starts with
      the node's text and ManagedServer extends one node over the whole rollout.
    """

    def __init__(self, managed: Any, tokenizer: Any) -> None:
        self._managed = managed
        specials = getattr(tokenizer, "all_special_tokens", None) or []
        self._specials = tuple(t for t in specials if t)
        # message index the reply was appended at -> exact sampled text (no end-of-turn token)
        self.sampled: dict[int, str] = {}

    def get_state(self) -> Any:
        state = self._managed.get_state()
        if isinstance(state, dict):
            state = dict(state, sampled_turns=dict(self.sampled))
        return state

    def __getattr__(self, name: str) -> Any:
        return getattr(self._managed, name)

    def _clean(self, text: str) -> str:
        changed = True
        while changed and text:
            changed = False
            stripped = text.rstrip()
            for token in self._specials:
                if stripped.endswith(token):
                    text, changed = stripped[: -len(token)], True
        return text

    async def chat_completion(self, **kwargs: Any) -> Any:
        messages = kwargs.get("messages")
        index = len(messages) if isinstance(messages, list) else None
        if isinstance(messages, list) and self.sampled:
            kwargs["messages"] = with_sampled_text(messages, self.sampled)
        response = await self._managed.chat_completion(**kwargs)
        for n, choice in enumerate(getattr(response, "choices", None) or []):
            message = getattr(choice, "message", None)
            content = getattr(message, "content", None)
            if isinstance(content, str):
                if n == 0 and index is not None:
                    self.sampled[index] = strip_end_of_turn(content, self._specials)
                if self._specials and message is not None:
                    message.content = self._clean(content)
        return response


class HermesAgentBaseEnv(BaseEnv):
    """Base class for agentic Atropos envs. Implement setup, get_next_item,
    format_prompt, compute_reward and evaluate."""

    name: str | None = "hermes-agent"
    env_config_cls = HermesAgentEnvConfig
    max_token_len: int  # set by BaseEnv.__init__ (the trainer's limit, or -1 without one)
    server_cls: Any  # atroposlib's (APIServer: chosen by server_type); __init__ may pick the lean chat server

    def __init__(
        self,
        config: HermesAgentEnvConfig,
        server_configs: ServerBaseline | list[APIServerConfig],
        slurm: bool = False,
        testing: bool = False,
    ) -> None:
        tame_atroposlib_logging()
        server_configs = fix_server_configs(server_configs, tokenizer_name=getattr(config, "tokenizer_name", None))
        self.server_cls = server_class_for(server_configs, self.server_cls)  # Phase 1: the lean chat path
        super().__init__(config, server_configs, slurm=slurm, testing=testing)
        self._require_chat_template(config)

        # Seed behaviour: the terminal tool reads these process-global vars.
        if config.terminal_backend:
            os.environ["TERMINAL_ENV"] = str(config.terminal_backend)
        os.environ["TERMINAL_TIMEOUT"] = str(config.terminal_timeout)
        os.environ["TERMINAL_LIFETIME_SECONDS"] = str(config.terminal_lifetime)
        self._configure_sandboxes(config)
        logger.info(
            "terminal: backend=%s timeout=%ss lifetime=%ss",
            config.terminal_backend,
            config.terminal_timeout,
            config.terminal_lifetime,
        )

        resize_tool_pool(config.tool_pool_size)
        if hasattr(self.server, "tool_parser"):
            self.server.tool_parser = config.tool_call_parser

        self._current_group_tools: ToolSpec | None = None
        self._tool_error_buffer: list[dict[str, Any]] = []
        self.reward_errors = 0
        self.rollout_errors = 0
        self._group_ids: dict[int, str] = {}
        if self.max_token_len <= 0:
            # Without a trainer atroposlib warns on every group (trap 7).
            self.max_token_len = sensible_max_token_len(config.max_token_length, config.max_agent_turns)

    def _require_chat_template(self, config: HermesAgentEnvConfig) -> None:
        """Without a chat template no rollout can become real training data: refuse at start."""
        if self.tokenizer is None or getattr(self.tokenizer, "chat_template", None):
            return
        name = getattr(config, "tokenizer_name", None) or getattr(self.tokenizer, "name_or_path", "?")
        if getattr(config, "allow_placeholder_tokens", False):
            logger.warning(
                "tokenizer %s has no chat template: rollouts get placeholder tokens (not trainable); "
                "allowed by allow_placeholder_tokens",
                name,
            )
            return
        raise ValueError(
            f"tokenizer {name!r} has no chat_template, so conversations cannot be turned into training tokens; "
            "expected a tokenizer whose tokenizer_config.json sets chat_template (or set "
            "allow_placeholder_tokens=True to keep placeholder tokens for SFT-only use)"
        )

    @staticmethod
    def _configure_sandboxes(config: HermesAgentEnvConfig) -> None:
        try:
            from environments import sandboxes
        except ImportError:
            return
        configure = getattr(sandboxes, "configure", None)
        if configure is not None:
            configure(
                backend=config.terminal_backend, timeout=config.terminal_timeout, lifetime=config.terminal_lifetime
            )

    # ------------------------------------------------------------------ tools

    def _resolve_group_toolsets(self) -> list[str] | None:
        """The toolsets for one group: a distribution sample, else enabled_toolsets."""
        if self.config.distribution:
            return list(sample_toolsets_from_distribution(self.config.distribution))
        if self.config.enabled_toolsets is None:
            logger.warning("enabled_toolsets is None: every toolset is enabled")
            return None
        return list(self.config.enabled_toolsets)

    def _tools_for_toolsets(self, toolsets: list[str] | None) -> ToolSpec:
        schemas = get_tool_definitions(
            enabled_toolsets=toolsets, disabled_toolsets=self.config.disabled_toolsets, quiet_mode=True
        )
        names = {s["function"]["name"] for s in schemas if isinstance(s, dict) and "function" in s}
        return list(schemas), names

    def _resolve_tools_for_group(self) -> ToolSpec:
        """(tool_schemas, valid_names) for one group."""
        return self._tools_for_toolsets(self._resolve_group_toolsets())

    def _use_managed_server(self) -> bool:
        servers = getattr(self.server, "servers", None) or []
        if not servers:
            return False
        return not isinstance(servers[0], OpenAIServer)

    # ------------------------------------------------------------------ groups

    async def collect_trajectories(self, item: Item) -> tuple[ScoredDataGroup | None, list[Item]]:
        group_id = events.current_group_id.get() or str(uuid.uuid4())
        phase = 2 if self._use_managed_server() else 1
        toolsets: list[str] = []
        if type(self)._resolve_tools_for_group is HermesAgentBaseEnv._resolve_tools_for_group:
            resolved = self._resolve_group_toolsets()
            toolsets = list(resolved) if resolved else ["all"]
            tools = self._tools_for_toolsets(resolved)
        else:  # a subclass resolves its own way
            tools = self._resolve_tools_for_group()
        self._current_group_tools = tools  # backward compatibility only; rollouts read the ContextVar
        tools_token = _group_tools.set(tools)
        gid_token = _group_id.set(group_id)
        started = time.monotonic()
        if events.active:
            events.emit(
                events.GroupStarted(
                    group_id=group_id,
                    item_summary=_item_summary(item),
                    group_size=self.config.group_size,
                    phase=phase,
                    toolsets=toolsets,
                )
            )
        group: ScoredDataGroup | None = None
        error: str | None = None
        extras: dict[int, list[float]] = {}
        extras_token = _rollout_extras.set(extras)
        try:
            group, backlog = await super().collect_trajectories(item)
            if group:
                self._attach_inference_logprobs(group, extras)
                self._remember_group_id(group, group_id)
            return group, backlog
        except BaseException as exc:
            error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            _rollout_extras.reset(extras_token)
            _group_tools.reset(tools_token)
            _group_id.reset(gid_token)
            if events.active:
                scores = list(group.get("scores") or []) if group else []
                events.emit(
                    events.GroupFinished(
                        group_id=group_id,
                        scores=scores,
                        duration_s=time.monotonic() - started,
                        error=safe_head(error, 500) if error else None,
                    )
                )

    @staticmethod
    def _attach_inference_logprobs(group: ScoredDataGroup, extras: dict[int, list[float]]) -> None:
        # BaseEnv.collect_trajectories drops per-item keys it does not know; the
        # token lists are the same objects, so they map items back.
        tokens = group.get("tokens") or []
        logprobs = [extras.get(id(t)) for t in tokens]
        if tokens and all(lp is not None for lp in logprobs):
            group["inference_logprobs"] = logprobs

    def _remember_group_id(self, group: Any, group_id: str) -> None:
        self._group_ids[id(group)] = group_id
        while len(self._group_ids) > 256:
            self._group_ids.pop(next(iter(self._group_ids)))

    # ------------------------------------------------------------------ one rollout

    async def prepare_rollout(self, item: Item, ctx: Any) -> None:
        """Hook (ours, optional): runs in the rollout's sandbox before the agent starts."""

    def _build_messages(self, item: Item) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        if self.config.system_prompt:
            messages.append({"role": "system", "content": self.config.system_prompt})
        messages.append({"role": "user", "content": self.format_prompt(item)})
        return messages

    def _make_loop(self, server: Any, tools: ToolSpec, task_id: str) -> HermesAgentLoop:
        return HermesAgentLoop(
            server,
            tools[0],
            tools[1],
            max_turns=self.config.max_agent_turns,
            task_id=task_id,
            temperature=self.config.agent_temperature,
            max_tokens=self.config.max_token_length,
            extra_body=self.config.extra_body,
            budget_config=self.config.build_budget_config(),
            tool_call_parser=self.config.tool_call_parser,
        )

    async def _run_agent(
        self, messages: list[dict[str, Any]], tools: ToolSpec, task_id: str
    ) -> tuple[AgentResult, int]:
        """Run the loop; returns (result, phase actually used)."""
        if self._use_managed_server():
            async with contextlib.AsyncExitStack() as stack:
                try:
                    managed = await stack.enter_async_context(
                        self.server.managed_server(
                            tokenizer=self.tokenizer, preserve_think_blocks=bool(self.config.thinking_mode)
                        )
                    )
                except NotImplementedError as exc:
                    logger.warning("managed_server unavailable (%s); falling back to direct chat (Phase 1)", exc)
                else:
                    server = _StripSpecialTokens(managed, self.tokenizer)
                    return await self._make_loop(server, tools, task_id).run(messages), 2
        return await self._make_loop(self.server, tools, task_id).run(messages), 1

    def _tokens_for(
        self, result: AgentResult | None, messages: list[dict[str, Any]], tools: ToolSpec, tokenizer: Any = None
    ) -> dict[str, Any]:
        """tokens/masks (+ logprobs) for the scored item, how they were made, and data health.

        Phase 2 also returns ``messages`` rewritten so they render to the sampled text.
        ``tokenizer`` defaults to the env's (the off-loop worker passes its own copy)."""
        tokenizer = self.tokenizer if tokenizer is None else tokenizer
        state = result.managed_state if result is not None else None
        nodes = (state.get("nodes") or []) if isinstance(state, dict) else []
        assistant_turns = sum(1 for m in messages if m.get("role") == "assistant")
        if (
            nodes
            and isinstance(state, dict)
            and not any((getattr(n, "metadata", None) or {}).get("dummy_tokens") for n in nodes)
        ):
            return self._phase2_tokens(nodes, state, messages, tools, assistant_turns, tokenizer)
        if nodes:  # DummyManagedServer: placeholder ids, never real data
            last = nodes[-1]
            return self._health(
                {
                    "tokens": list(last.tokens),
                    "masks": list(last.masked_tokens),
                    "node_count": len(nodes),
                    "placeholder": True,
                },
                assistant_turns,
            )
        if tokenizer is not None and getattr(tokenizer, "chat_template", None):
            try:
                rendered = render_conversation(tokenizer, messages, tools=tools[0] or None)
                if rendered.tokens:
                    return self._health(
                        {
                            "tokens": rendered.tokens,
                            "masks": rendered.masks,
                            "node_count": 0,
                            "placeholder": False,
                            "drift": rendered.drift,
                        },
                        assistant_turns,
                    )
            except Exception as exc:  # noqa: BLE001 - odd templates fall back to placeholders, flagged
                logger.warning("chat-template tokenization failed (%s); using placeholder tokens", exc)
        tokens, masks = _placeholder_tokens(tokenizer, messages)
        return self._health({"tokens": tokens, "masks": masks, "node_count": 0, "placeholder": True}, assistant_turns)

    def _phase2_tokens(
        self,
        nodes: list[Any],
        state: dict[str, Any],
        messages: list[dict[str, Any]],
        tools: ToolSpec,
        assistant_turns: int,
        tokenizer: Any = None,
    ) -> dict[str, Any]:
        tokenizer = self.tokenizer if tokenizer is None else tokenizer
        traj = merge_nodes(nodes)
        sampled = state.get("sampled_turns") or {}
        out_messages = messages
        if sampled and tokenizer is not None and getattr(tokenizer, "chat_template", None):
            out_messages = sampled_messages(tokenizer, messages, sampled, tools[0] or None)
            try:
                rendered = tokenizer.apply_chat_template(out_messages, tools=tools[0] or None, tokenize=False)
                if not complete_to_rendering(tokenizer, traj, rendered):
                    traj.drift += 1
                    logger.warning("Phase 2 tokens do not decode to the template rendering of the messages")
            except Exception as exc:  # noqa: BLE001 - the data is still the sampled tokens
                logger.warning("could not render Phase 2 messages with the chat template: %s", exc)
        out: dict[str, Any] = {
            "tokens": traj.tokens,
            "masks": traj.masks,
            "node_count": traj.node_count,
            "placeholder": False,
            "drift": traj.drift + traj.lost_turns,
            "messages": out_messages,
        }
        if len(traj.logprobs) == len(traj.tokens):
            out["logprobs"] = traj.logprobs
        return self._health(out, assistant_turns, phase2=True)

    async def _tokens_off_loop(
        self, result: AgentResult | None, messages: list[dict[str, Any]], tools: ToolSpec
    ) -> dict[str, Any]:
        """``_tokens_for`` in a worker thread: a long rollout's tokenisation (seconds for a
        multi-megabyte conversation) must not stall every other rollout on the loop. Each
        call uses a tokenizer copy of its own (a fast tokenizer must not be used from two
        threads at once: ManagedServer tokenizes on the loop meanwhile); a few workers, so
        rollouts that end together do not queue behind one (``tokenizer_copies``)."""
        return await self._tokenizer_copies().run(self._tokens_for, result, messages, tools)

    def _tokenizer_copies(self) -> TokenizerCopies:
        cached = self.__dict__.get("_tokenizer_copies_pool")
        if cached is None or cached.source is not self.tokenizer:
            if cached is not None:
                cached.close()  # copies of a tokenizer the env no longer uses
            cached = self.__dict__["_tokenizer_copies_pool"] = TokenizerCopies(self.tokenizer)
        return cached

    @staticmethod
    def _health(out: dict[str, Any], assistant_turns: int, phase2: bool = False) -> dict[str, Any]:
        """Data-health figures of one rollout (trained tokens and turns, drift) and its problems."""
        masks = out["masks"]
        problems, all_runs = read_masks(out["tokens"], masks, out.get("logprobs"), expect_logprobs=phase2)
        if out["placeholder"]:
            problems.append(("placeholder", EXTRA_KINDS["placeholder"]))
        runs = [] if out["placeholder"] else all_runs
        out["trainable_tokens"] = sum(b - a for a, b in all_runs)
        out["trainable_turns"] = len(runs)
        out["run_tokens"] = [b - a for a, b in runs]
        logprobs = out.get("logprobs")
        out["run_logprob"] = (
            [round(sum(logprobs[a:b]) / (b - a), 4) for a, b in runs]
            if logprobs is not None and len(logprobs) == len(masks)
            else []
        )
        out["assistant_turns"] = assistant_turns
        out.setdefault("drift", 0)
        if len(runs) < assistant_turns and not out["placeholder"]:
            problems.append(("turn_not_trained", f"{assistant_turns - len(runs)} of {assistant_turns} train nothing"))
        out["problems"] = [f"{kind}: {detail}" for kind, detail in problems]
        out["prompt_tokens"] = all_runs[0][0] if all_runs else len(masks)  # data_health.prompt_tokens
        return out

    def _buffer_tool_errors(self, result: AgentResult) -> None:
        for err in result.tool_errors:
            self._tool_error_buffer.append(
                {
                    "turn": err.turn,
                    "tool": err.tool_name,
                    "args": safe_head(err.arguments, 150),
                    "error": safe_head(err.error, 300),
                    "result": safe_head(err.tool_result, 300),
                }
            )
        overflow = len(self._tool_error_buffer) - _TOOL_ERROR_BUFFER_MAX
        if overflow > 0:
            del self._tool_error_buffer[:overflow]

    async def collect_trajectory(self, item: Item) -> tuple[ScoredDataItem | Any | None, list[Item]]:
        task_id = str(uuid.uuid4())  # one sandbox per rollout
        group_id = _group_id.get() or events.current_group_id.get() or str(uuid.uuid4())
        tools = _group_tools.get()
        if tools is None:
            tools = self._current_group_tools or self._resolve_tools_for_group()
        phase = 2 if self._use_managed_server() else 1
        started = time.monotonic()
        prompt_messages: list[dict[str, Any]] = []
        build_error: Exception | None = None
        try:
            prompt_messages = self._build_messages(item)
        except Exception as exc:  # noqa: BLE001 - raised inside the rollout's try below, handled there
            build_error = exc
        if events.active:
            events.emit(
                events.RolloutStarted(
                    rollout_id=task_id,
                    group_id=group_id,
                    item_summary=_item_summary(item),
                    phase=phase,
                    **_prompt_fields(prompt_messages),
                )
            )

        messages: list[dict[str, Any]] = []
        result: AgentResult | None = None
        reward = 0.0
        reward_s = 0.0
        reward_error: str | None = None
        rollout_error: str | None = None
        ctx: ToolContext = _make_tool_context(task_id)
        setup: asyncio.Future[None] | None = None
        early: _EarlyTokens | None = None
        reward_details: dict[str, Any] = {}
        try:
            if build_error is not None:
                raise build_error
            messages = prompt_messages
            if getattr(self.config, "overlap_setup", False):
                # The prompt is built; the first model call does not need the sandbox, only the
                # tool calls and the reward do: start both, so a sandbox start and the setup
                # commands cost the rollout no wall time while the model thinks.
                setup = asyncio.ensure_future(self.prepare_rollout(item, ctx))
                waiting = tools_ready.set(setup)
                try:
                    result, phase = await self._run_agent(messages, tools, task_id)
                finally:
                    tools_ready.reset(waiting)
            else:
                await self.prepare_rollout(item, ctx)
                result, phase = await self._run_agent(messages, tools, task_id)
            messages = result.messages
            produced = result.turns_used > 0 and any(m.get("role") == "assistant" for m in messages)
            if produced:
                if setup is not None:
                    await setup  # the reward reads the sandbox; a failed setup fails the rollout here
                # The reward mostly waits on its sandbox: tokenise meanwhile (again afterwards,
                # should the reward edit the messages, so the tokens are always of what is sent).
                early = _EarlyTokens(self._tokens_off_loop(result, messages, tools), messages)
                reward_started = time.monotonic()
                try:
                    reward = float(await self.compute_reward(item, result, ctx))
                except Exception as exc:  # noqa: BLE001 - a broken reward scores 0, never kills the group
                    self.reward_errors += 1
                    reward = 0.0
                    reward_error = f"{type(exc).__name__}: {exc}"
                    logger.error("[%s] compute_reward failed: %s", task_id[:8], safe_head(reward_error, 500))
                reward_s = time.monotonic() - reward_started
                reward_details = _reward_details(getattr(ctx, "reward_details", None))
            rollout_error = result.error
        except Exception as exc:  # noqa: BLE001 - one failing rollout never takes down the group
            self.rollout_errors += 1
            reward = 0.0
            rollout_error = f"{type(exc).__name__}: {exc}"
            logger.error("[%s] rollout failed: %s", task_id[:8], safe_head(rollout_error, 500))
        finally:
            # Also on cancellation: the cleanup runs in its pool and never blocks the cancel.
            _abandon(setup)  # the rollout ended while setup still ran: the sandbox goes anyway
            cleanup = _start_cleanup(ctx)

        if result is not None:
            self._buffer_tool_errors(result)
        tok = await early.result(messages) if early is not None else None
        if tok is None:
            tok = await self._tokens_off_loop(result, messages, tools)
        await asyncio.shield(asyncio.wrap_future(cleanup))  # done while tokenizing, usually
        messages = tok.get("messages", messages)
        scored: dict[str, Any] = {
            "tokens": tok["tokens"],
            "masks": tok["masks"],
            "scores": reward,
            "messages": messages,
        }
        if "logprobs" in tok:
            scored["advantages"] = None
            scored["ref_logprobs"] = None
            extras = _rollout_extras.get()
            if extras is not None:
                extras[id(scored["tokens"])] = tok["logprobs"]
        verdicts.report_rollout(task_id, _rollout_failure(rollout_error, result))
        if events.active:
            events.emit(
                events.RolloutFinished(
                    rollout_id=task_id,
                    group_id=group_id,
                    reward=reward,
                    turns_used=result.turns_used if result else 0,
                    finished_naturally=result.finished_naturally if result else False,
                    tool_error_count=len(result.tool_errors) if result else 0,
                    duration_s=time.monotonic() - started,
                    token_count=len(tok["tokens"]),
                    phase=phase,
                    node_count=tok["node_count"],
                    placeholder_tokens=tok["placeholder"],
                    trainable_tokens=tok["trainable_tokens"],
                    trainable_turns=tok["trainable_turns"],
                    assistant_turns=tok["assistant_turns"],
                    drift_count=tok["drift"],
                    trained_run_tokens=tok["run_tokens"],
                    trained_run_logprob=tok["run_logprob"],
                    prompt_tokens=tok["prompt_tokens"],
                    data_problems=tok["problems"],
                    reward_error=safe_head(reward_error, 500) if reward_error else None,
                    error=safe_head(rollout_error, 500) if rollout_error else None,
                    reward_s=reward_s,
                    reward_details=reward_details,
                )
            )
        return scored, []

    # ------------------------------------------------------------------ sending / logging

    async def handle_send_to_api(
        self,
        scored_data: Any,
        item: Item = None,
        do_send_to_api: bool = True,
        abort_on_any_max_length_exceeded: bool = True,
    ) -> None:
        groups = scored_data if isinstance(scored_data, list) else [scored_data]
        # A runner that accounts for the group (the console's driver) judged it with the same rule
        # before handing it here; on our own, atroposlib drops it silently, so say so.
        judged = verdicts.runner_judges()
        for group in groups:
            group_id = self._group_ids.pop(id(group), None) if group is not None else None
            if judged or not events.active:
                continue
            dropped = drop_reason(group, self.config, self.max_token_len, abort_on_any_max_length_exceeded)
            if dropped is not None:
                events.emit(
                    events.ItemDropped(
                        group_id=group_id or events.current_group_id.get() or "unknown",
                        reason=dropped[0],
                        detail=dropped[1],
                    )
                )
        return await super().handle_send_to_api(
            scored_data,
            item,
            do_send_to_api=do_send_to_api,
            abort_on_any_max_length_exceeded=abort_on_any_max_length_exceeded,
        )

    @staticmethod
    def _format_trajectory_for_display(messages: list[dict[str, Any]]) -> str:
        """Readable text of a conversation for logs and wandb (not raw token decode)."""
        blocks: list[str] = []
        for msg in messages:
            role = msg.get("role")
            content = msg.get("content") or ""
            if not isinstance(content, str):
                content = str(content)
            if role == "system":
                blocks.append(f"[SYSTEM]\n{content}")
            elif role == "user":
                blocks.append(f"[USER]\n{content}")
            elif role == "assistant":
                reasoning = msg.get("reasoning_content")
                if reasoning:
                    blocks.append(f"[ASSISTANT thinking]\n{str(reasoning)[:300]}")
                if content:
                    blocks.append(f"[ASSISTANT]\n{content}")
                for call in msg.get("tool_calls") or []:
                    fn = call.get("function", {}) if isinstance(call, dict) else {}
                    args = fn.get("arguments", "")
                    args = args if isinstance(args, str) else str(args)
                    blocks.append(f"[TOOL CALL] {fn.get('name', '?')}({args[:200]})")
            elif role == "tool":
                blocks.append(f"[TOOL RESULT]\n{content[:500]}")
            else:
                blocks.append(f"[{str(role).upper()}]\n{content}")
        return "\n\n".join(blocks)

    async def add_rollouts_for_wandb(self, scored_data: Any, item: Item = None) -> None:
        num_keep = self.config.num_rollouts_per_group_for_logging
        if num_keep == -1:
            num_keep = self.config.group_size
        tokens = scored_data.get("tokens") or []
        scores = scored_data.get("scores") or []
        all_messages = scored_data.get("messages") or []
        rows = []
        for i in range(min(num_keep, len(scores))):
            if i < len(all_messages) and all_messages[i]:
                text = self._format_trajectory_for_display(all_messages[i])
            elif i < len(tokens) and tokens[i] and self.tokenizer is not None:
                text = self.tokenizer.decode(tokens[i])
            else:
                text = "(no data)"
            rows.append((text, scores[i]))
        self.rollouts_for_wandb.append(rows)
        while len(self.rollouts_for_wandb) > self.config.num_rollouts_to_keep:
            self.rollouts_for_wandb.pop(0)

    async def wandb_log(self, wandb_metrics: dict[str, Any] | None = None) -> None:
        if wandb_metrics is None:
            wandb_metrics = {}
        errors = self._tool_error_buffer
        wandb_metrics["train/tool_errors_count"] = len(errors)
        if errors:
            # A summary string, not a wandb table: tables crash wandb on tmp cleanup.
            lines = [
                f"[turn {e['turn']}] {e['tool']}({str(e['args'])[:80]}) -> {str(e['error'])[:150]}" for e in errors
            ]
            wandb_metrics["train/tool_error_details"] = "\n".join(lines)
            for line in lines:
                logger.info("tool error: %s", line)
        else:
            wandb_metrics["train/tool_error_details"] = ""
        self._tool_error_buffer = []
        await super().wandb_log(wandb_metrics)

    # ------------------------------------------------------------------ for subclasses

    @abstractmethod
    async def setup(self) -> None:
        """Load data, build state."""

    @abstractmethod
    async def get_next_item(self) -> Item:
        """The next training item."""

    @abstractmethod
    def format_prompt(self, item: Item) -> str:
        """The user message for ``item``."""

    @abstractmethod
    async def compute_reward(self, item: Item, result: AgentResult, ctx: Any) -> float:
        """Score a finished rollout; ``ctx`` reaches the rollout's sandbox."""

    @abstractmethod
    async def evaluate(self, *args: Any, **kwargs: Any) -> Any:
        """Run the eval split through the agent loop."""


# Per-group map from a scored item's token list to its Phase 2 logprobs.
_rollout_extras: contextvars.ContextVar[dict[int, list[float]] | None] = contextvars.ContextVar(
    "hermes_rollout_extras", default=None
)

__all__ = ["HermesAgentBaseEnv", "HermesAgentEnvConfig"]
