"""HermesAgentLoop: the multi-turn tool-calling loop one rollout runs.

Seed contract (names, fields, defaults, ordering) is kept exactly; it is pinned by
``tests/compat/test_public_surface.py``. Our changes, none of which an
env author can observe as a break:

* the text fallback uses the configured ``tool_call_parser`` (not only hermes);
* a non-dict JSON argument payload is rejected like bad JSON (upstream crashed
  in dispatch), and ``ToolError.arguments`` is redacted and works for any type;
* every result carrying ``"error"`` counts as a ToolError, timeouts (exit 124)
  included (upstream only counted ``exit_code < 0``);
* an API error is kept on ``AgentResult.error`` so the console can show it;
* Turn*/ToolCall* events for the console (no cost with no observer).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from environments import events
from environments.redact import safe_head
from environments.tools import handle_function_call  # tests patch this name
from environments.tools.budget import DEFAULT_BUDGET, BudgetConfig, enforce_turn_budget, maybe_persist_tool_result
from environments.tools.todo import TodoStore, todo_tool

logger = logging.getLogger(__name__)

# Process-global pool for tool calls. Sized for many concurrent rollouts:
# too small and tools queue behind each other for minutes.
_tool_executor: ThreadPoolExecutor = ThreadPoolExecutor(max_workers=128, thread_name_prefix="hermes-tool")

# What a rollout's tool calls wait for before the first one runs: the env's sandbox setup,
# started alongside the first model call (``HermesAgentEnvConfig.overlap_setup``). Its
# failure is the rollout's failure, raised where the first tool call would have run.
tools_ready: ContextVar[Awaitable[Any] | None] = ContextVar("hermes_tools_ready", default=None)
_pool_lock = threading.Lock()

_ARGS_LIMIT = 200
_HEAD_LIMIT = 200
_RESULT_TEXT_LIMIT = 4_000  # what the transcript can expand to (the full record is in the jsonl)
_SLOW_TOOL_S = 30.0
_USER_TASK_LIMIT = 500
_LOOP_ONLY_UNAVAILABLE = ("memory", "session_search")

# Text markers that mean "the model tried to call a tool" per parser family;
# parsers without a fixed marker (bare JSON) are always tried.
_PARSER_MARKERS: dict[str, tuple[str, ...]] = {
    "hermes": ("<tool_call>",),
    "qwen": ("<tool_call>",),
    "glm45": ("<tool_call>",),
    "glm47": ("<tool_call>",),
    "qwen3_coder": ("<tool_call>", "<function="),
    "longcat": ("<longcat_tool_call>",),
    "mistral": ("[TOOL_CALLS]",),
    "deepseek_v3": ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>"),
    "deepseek_v3_1": ("<｜tool▁call▁begin｜>",),
    "deepseek_v31": ("<｜tool▁call▁begin｜>",),
    "kimi_k2": ("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>", "<|tool_call_begin|>"),
}


def resize_tool_pool(max_workers: int) -> None:
    """Swap in a tool pool of ``max_workers`` threads; the old one finishes its work."""
    global _tool_executor
    if not isinstance(max_workers, int) or max_workers < 1:
        raise ValueError(f"tool pool size must be a positive integer, got {max_workers!r}")
    with _pool_lock:
        old = _tool_executor
        _tool_executor = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="hermes-tool")
    old.shutdown(wait=False)


def shutdown_tool_pool(wait: bool = True) -> None:
    """Stop the tool threads at the end of a run (queued calls are cancelled).

    A fresh pool of the same size takes over; it starts no thread until used,
    so a stopped host leaves nothing running while later runs still work."""
    global _tool_executor
    with _pool_lock:
        old = _tool_executor
        _tool_executor = ThreadPoolExecutor(max_workers=old._max_workers, thread_name_prefix="hermes-tool")
    old.shutdown(wait=wait, cancel_futures=True)


def tool_pool_queue_depth() -> int:
    """Work items waiting for a tool thread (for slow-tool warnings and the console)."""
    queue = getattr(_tool_executor, "_work_queue", None)
    return queue.qsize() if queue is not None else 0


@dataclass
class ToolError:
    turn: int  # 1-based
    tool_name: str
    arguments: str  # raw args, redacted, truncated to 200 chars
    error: str
    tool_result: str  # what the model was sent


@dataclass
class AgentResult:
    messages: list[dict[str, Any]]
    managed_state: dict[str, Any] | None = None
    turns_used: int = 0
    finished_naturally: bool = False
    reasoning_per_turn: list[str | None] = field(default_factory=list)
    tool_errors: list[ToolError] = field(default_factory=list)
    # Ours (extra, defaulted): why the loop stopped early (API error / empty reply).
    error: str | None = None


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _extract_reasoning_from_message(msg: Any) -> str | None:
    """Provider reasoning: reasoning_content, then reasoning, then reasoning_details[i].text."""
    for name in ("reasoning_content", "reasoning"):
        value = _get(msg, name)
        if value and isinstance(value, str):
            return value
    details = _get(msg, "reasoning_details")
    if details:
        for detail in details:
            text = _get(detail, "text")
            if text and isinstance(text, str):
                return text
    return None


def _args_text(arguments: Any) -> str:
    """Arguments for a ToolError: redacted, at most 200 chars, whatever the type."""
    return safe_head(arguments, _ARGS_LIMIT)


def _new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:8]}"


def _normalise_tool_call(call: Any) -> dict[str, Any]:
    """Object (OpenAI), nested dict or flat ``{name, arguments}`` -> OpenAI dict."""
    if isinstance(call, dict):
        fn = call.get("function")
        if isinstance(fn, dict):
            name, arguments = fn.get("name"), fn.get("arguments")
        else:
            name, arguments = call.get("name"), call.get("arguments")
        call_id = call.get("id") or _new_call_id()
    else:
        fn = getattr(call, "function", None)
        name = getattr(fn, "name", None) if fn is not None else getattr(call, "name", None)
        arguments = getattr(fn, "arguments", None) if fn is not None else getattr(call, "arguments", None)
        call_id = getattr(call, "id", None) or _new_call_id()
    if arguments is None:
        arguments = "{}"
    elif not isinstance(arguments, str):
        # Some translators hand back parsed dicts; the wire format is a JSON string.
        try:
            arguments = json.dumps(arguments, ensure_ascii=False)
        except (TypeError, ValueError):
            arguments = str(arguments)
    return {"id": str(call_id), "type": "function", "function": {"name": str(name or ""), "arguments": arguments}}


def _result_error(result: str) -> tuple[str | None, int | None]:
    """(error, exit_code) from a tool's JSON result; (None, code) when it succeeded."""
    try:
        data = json.loads(result)
    except (TypeError, ValueError):
        return None, None
    if not isinstance(data, dict):
        return None, None
    exit_code = data.get("exit_code")
    exit_code = exit_code if isinstance(exit_code, int) and not isinstance(exit_code, bool) else None
    error = data.get("error")
    if error:
        return str(error), exit_code
    return None, exit_code


class HermesAgentLoop:
    """Runs one conversation: model turn, tool calls, repeat, until the model stops."""

    def __init__(
        self,
        server: Any,
        tool_schemas: list[dict[str, Any]],
        valid_tool_names: set[str],
        max_turns: int = 30,
        task_id: str | None = None,
        temperature: float = 1.0,
        max_tokens: int | None = None,
        extra_body: dict[str, Any] | None = None,
        budget_config: BudgetConfig | None = None,
        *,
        tool_call_parser: str = "hermes",
    ) -> None:
        if not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns must be a positive integer, got {max_turns!r}")
        self.server = server
        self.tool_schemas = list(tool_schemas or [])
        self.valid_tool_names = set(valid_tool_names or [])
        self.max_turns = max_turns
        self.task_id = task_id or str(uuid.uuid4())
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.extra_body = extra_body
        self.budget_config = budget_config if budget_config is not None else DEFAULT_BUDGET
        self.tool_call_parser = tool_call_parser

    # ------------------------------------------------------------------ helpers

    def _get_managed_state(self) -> dict[str, Any] | None:
        get_state = getattr(self.server, "get_state", None)
        if get_state is None:
            return None
        try:
            state = get_state()
            return state if isinstance(state, dict) else None
        except Exception as exc:  # noqa: BLE001 - state is diagnostic, never fatal
            logger.warning("[%s] get_state() failed: %s", self.task_id[:8], exc)
            return None

    def _result(
        self,
        messages: list[dict[str, Any]],
        turns: int,
        natural: bool,
        reasoning: list[str | None],
        tool_errors: list[ToolError],
        error: str | None = None,
    ) -> AgentResult:
        return AgentResult(
            messages=messages,
            managed_state=self._get_managed_state(),
            turns_used=turns,
            finished_naturally=natural,
            reasoning_per_turn=reasoning,
            tool_errors=tool_errors,
            error=error,
        )

    def _fallback_parse(self, content: str) -> tuple[str | None, list[Any] | None, list[str]]:
        """Client-side parse of tool calls left in the text (Phase 2 without vLLM)."""
        markers = _PARSER_MARKERS.get(self.tool_call_parser)
        if markers is not None and not any(m in content for m in markers):
            return content, None, []
        try:
            from environments.tool_call_parsers import get_parser

            parser = get_parser(self.tool_call_parser)
            parsed_content, calls = parser.parse(content)
            return parsed_content, calls, list(getattr(parser, "last_errors", []) or [])
        except Exception as exc:  # noqa: BLE001 - a parser bug must not end the rollout
            logger.warning("[%s] fallback parser %r failed: %s", self.task_id[:8], self.tool_call_parser, exc)
            return content, None, []

    def _persist(self, content: str, tool_name: str, call_id: str) -> str:
        if self.budget_config is None:
            return content
        try:
            return maybe_persist_tool_result(
                content=content,
                tool_name=tool_name,
                tool_use_id=call_id,
                task_id=self.task_id,
                config=self.budget_config,
            )
        except Exception as exc:  # noqa: BLE001 - persisting is an optimisation
            logger.warning("[%s] could not persist %s result: %s", self.task_id[:8], tool_name, exc)
            return content

    def _enforce_budget(self, tool_msgs: list[dict[str, Any]], tool_names: list[str]) -> None:
        if self.budget_config is None or not tool_msgs:
            return
        try:
            # The budget needs each result's tool name (read_file is never
            # persisted) but tool messages sent to the server carry none, so
            # it works on named copies and we take the contents back.
            named = [dict(msg, name=name) for msg, name in zip(tool_msgs, tool_names)]
            enforce_turn_budget(named, task_id=self.task_id, config=self.budget_config)
            for msg, shadow in zip(tool_msgs, named):
                msg["content"] = shadow["content"]
        except Exception as exc:  # noqa: BLE001
            logger.warning("[%s] turn budget enforcement failed: %s", self.task_id[:8], exc)

    async def _dispatch(self, name: str, args: dict[str, Any], user_task: str | None) -> str:
        loop = asyncio.get_running_loop()
        task_id = self.task_id
        # A thread gives sync backends that call asyncio.run a clean loop.
        return await loop.run_in_executor(
            _tool_executor, lambda: handle_function_call(name, args, task_id=task_id, user_task=user_task)
        )

    # ------------------------------------------------------------------ the loop

    async def run(self, messages: list[dict[str, Any]]) -> AgentResult:
        todo_store = TodoStore()  # lives as long as this run: todos never leak between loops
        user_task: str | None = None
        for m in messages:
            if m.get("role") == "user":
                content = m.get("content")
                if isinstance(content, str):
                    user_task = content.strip()[:_USER_TASK_LIMIT]
                break

        reasoning_per_turn: list[str | None] = []
        tool_errors: list[ToolError] = []
        rid = self.task_id

        for turn in range(self.max_turns):
            turn_no = turn + 1
            if events.active:
                events.emit(events.TurnStarted(rollout_id=rid, turn=turn_no))
            kwargs: dict[str, Any] = {"messages": messages, "n": 1, "temperature": self.temperature}
            if self.tool_schemas:
                kwargs["tools"] = self.tool_schemas
            if self.max_tokens is not None:
                kwargs["max_tokens"] = self.max_tokens
            if self.extra_body:
                kwargs["extra_body"] = self.extra_body

            started = time.monotonic()
            try:
                response = await self.server.chat_completion(**kwargs)
            except Exception as exc:  # noqa: BLE001 - CancelledError is not an Exception and propagates
                error = f"{type(exc).__name__}: {exc}"
                logger.error("[%s] chat_completion failed on turn %d: %s", rid[:8], turn_no, safe_head(error, 500))
                self._emit_turn(turn_no, started, error=error)
                return self._result(messages, turn_no, False, reasoning_per_turn, tool_errors, error=error)

            choices = _get(response, "choices") if response else None
            if not choices:
                error = "empty response from the server (no choices)"
                logger.error("[%s] %s on turn %d", rid[:8], error, turn_no)
                self._emit_turn(turn_no, started, error=error)
                return self._result(messages, turn_no, False, reasoning_per_turn, tool_errors, error=error)

            msg = _get(choices[0], "message")
            reasoning = _extract_reasoning_from_message(msg)
            reasoning_per_turn.append(reasoning)
            content = _get(msg, "content")
            raw_calls = _get(msg, "tool_calls")

            parsed_from_text = False
            if not raw_calls and self.tool_schemas and isinstance(content, str) and content:
                parsed_content, calls, parse_errors = self._fallback_parse(content)
                if calls:
                    raw_calls = calls
                    content = parsed_content or ""
                    parsed_from_text = True
                for problem in parse_errors:
                    # Malformed payloads are dropped by the parser; keep them visible.
                    tool_errors.append(
                        ToolError(
                            turn=turn_no,
                            tool_name="<unparsed>",
                            arguments="",
                            error=safe_head(problem, 300),
                            tool_result="",
                        )
                    )

            if raw_calls:
                tool_calls = [_normalise_tool_call(c) for c in raw_calls]
                assistant: dict[str, Any] = {"role": "assistant", "content": content or "", "tool_calls": tool_calls}
                if reasoning:
                    assistant["reasoning_content"] = reasoning
                messages.append(assistant)
                self._emit_turn(
                    turn_no,
                    started,
                    content=content,
                    reasoning=reasoning,
                    n_calls=len(tool_calls),
                    parsed_from_text=parsed_from_text,
                )

                ready = tools_ready.get()
                if ready is not None:
                    await asyncio.shield(ready)  # shielded: the env, not this loop, owns the setup
                tool_msgs: list[dict[str, Any]] = []
                for call in tool_calls:
                    result = await self._run_one_call(call, turn_no, todo_store, user_task, tool_errors)
                    tool_msg = {"role": "tool", "tool_call_id": call["id"], "content": result}
                    messages.append(tool_msg)
                    tool_msgs.append(tool_msg)
                self._enforce_budget(tool_msgs, [c["function"]["name"] for c in tool_calls])
                continue

            final: dict[str, Any] = {"role": "assistant", "content": content or ""}
            if reasoning:
                final["reasoning_content"] = reasoning
            messages.append(final)
            self._emit_turn(turn_no, started, content=content, reasoning=reasoning)
            return self._result(messages, turn_no, True, reasoning_per_turn, tool_errors)

        return self._result(messages, self.max_turns, False, reasoning_per_turn, tool_errors)

    async def _run_one_call(
        self, call: dict[str, Any], turn: int, todo_store: Any, user_task: str | None, tool_errors: list[ToolError]
    ) -> str:
        name = call["function"]["name"]
        raw_args = call["function"]["arguments"]
        call_id = call["id"]
        rid = self.task_id
        if events.active:
            events.emit(
                events.ToolCallStarted(
                    rollout_id=rid,
                    turn=turn,
                    call_id=call_id,
                    tool_name=name,
                    args_head=safe_head(raw_args, _HEAD_LIMIT),
                )
            )
        started = time.monotonic()
        error_kind: str | None = None
        error: str | None = None

        if name not in self.valid_tool_names:
            error = f"Unknown tool '{name}'. Available tools: {sorted(self.valid_tool_names)}"
            error_kind = "unknown_tool"
            result = json.dumps({"error": error})
        else:
            args: Any = None
            try:
                args = json.loads(raw_args) if raw_args.strip() else {}
            except (json.JSONDecodeError, TypeError, AttributeError) as exc:
                error = f"Invalid JSON in tool arguments: {exc}. Please retry with valid JSON."
                error_kind = "bad_json"
            if error is None and not isinstance(args, dict):
                error = (
                    f"Invalid JSON in tool arguments: expected a JSON object, got {type(args).__name__}. "
                    "Please retry with valid JSON."
                )
                error_kind = "bad_json"
            if error is not None:
                result = json.dumps({"error": error})
            elif name == "todo":
                result = self._todo(args, todo_store)
            elif name in _LOOP_ONLY_UNAVAILABLE:
                result = json.dumps({"error": f"{name} is not available in RL environments."})
            else:
                if name == "terminal" and logger.isEnabledFor(logging.INFO):
                    logger.info("[%s] $ %s", rid[:8], safe_head(args.get("command", ""), 80))
                try:
                    result = await self._dispatch(name, args, user_task)
                except Exception as exc:  # noqa: BLE001 - a tool crash is the model's problem, not the run's
                    error = f"Tool execution failed: {type(exc).__name__}: {exc}"
                    error_kind = "dispatch"
                    result = json.dumps({"error": error})
                if not isinstance(result, str):
                    result = json.dumps(result) if isinstance(result, (dict, list)) else str(result)
                elapsed = time.monotonic() - started
                if elapsed > _SLOW_TOOL_S:
                    logger.warning(
                        "[%s] tool %s took %.1fs (tool pool queue depth %d)",
                        rid[:8],
                        name,
                        elapsed,
                        tool_pool_queue_depth(),
                    )

        exit_code: int | None = None
        if error is None:
            # Post-check: any result with "error" is a failed call (timeouts, exit 124, included).
            error, exit_code = _result_error(result)
            if error is not None:
                error_kind = "timeout" if exit_code == 124 or "timed out" in error.lower() else "tool_error"
        if error is not None:
            tool_errors.append(
                ToolError(
                    turn=turn,
                    tool_name=name,
                    arguments=_args_text(raw_args),
                    error=safe_head(error, 1000),
                    tool_result=safe_head(result, 1000),
                )
            )

        result = self._persist(result, name, call_id)
        if events.active:
            events.emit(
                events.ToolCallFinished(
                    rollout_id=rid,
                    turn=turn,
                    call_id=call_id,
                    tool_name=name,
                    duration_s=time.monotonic() - started,
                    result_head=safe_head(result, _HEAD_LIMIT),
                    error=safe_head(error, _HEAD_LIMIT) if error else None,
                    error_kind=error_kind,
                    exit_code=exit_code,
                    result_text=safe_head(result, _RESULT_TEXT_LIMIT),
                )
            )
        return result

    @staticmethod
    def _todo(args: dict[str, Any], store: TodoStore) -> str:
        return todo_tool(todos=args.get("todos"), merge=bool(args.get("merge", False)), store=store)

    def _emit_turn(
        self,
        turn: int,
        started: float,
        *,
        content: Any = None,
        reasoning: str | None = None,
        n_calls: int = 0,
        parsed_from_text: bool = False,
        error: str | None = None,
    ) -> None:
        if not events.active:
            return
        if reasoning is None and isinstance(content, str):
            # Phase 2 replies keep their <think> block in the text (the conversation must
            # re-render byte-identically); for display, show it as reasoning.
            reasoning, content = _split_think(content)
        events.emit(
            events.TurnFinished(
                rollout_id=self.task_id,
                turn=turn,
                latency_s=time.monotonic() - started,
                content=safe_head(content or "", _HEAD_LIMIT),
                reasoning=safe_head(reasoning, _HEAD_LIMIT) if reasoning else None,
                tool_calls=n_calls,
                parsed_from_text=parsed_from_text,
                error=safe_head(error, 500) if error else None,
            )
        )


_THINK_RE = re.compile(r"^\s*<think>(.*?)</think>\s*", re.DOTALL)


def _split_think(content: str) -> tuple[str | None, str]:
    """``"<think>r</think> answer"`` -> ``("r", "answer")``; anything else unchanged."""
    match = _THINK_RE.match(content)
    if match is None:
        return None, content
    return (match.group(1).strip() or None), content[match.end() :]


__all__ = [
    "AgentResult",
    "HermesAgentLoop",
    "ToolError",
    "_extract_reasoning_from_message",
    "_tool_executor",
    "resize_tool_pool",
]
