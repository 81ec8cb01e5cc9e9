"""A lean Phase 1 chat path: ``LeanOpenAIServer``, an atroposlib ``OpenAIServer`` whose chat
attempts skip the openai client (BENCHMARKS.md, P2: the openai+httpx request path is the largest
CPU cost of a rollout's LLM call).

Per attempt it does what the openai client does for a plain-JSON chat request, cheaply:

* one pooled ``aiohttp`` session per server (keep-alive; no per-request pool scan);
* the body serialised once with ``json.dumps`` (no TypedDict transform walk); the tool schemas,
  the same object on every turn of an env, are serialised once and spliced in;
* the reply parsed with ``json.loads`` and the ``ChatCompletion`` built with pydantic's
  a construct that skips the validation walk (and openai's per-field ``construct_type`` walk when
  every value is already built), including native ``tool_calls`` and provider extras
  (``reasoning_content``, ...), which stay readable as attributes.

Same request fields as the openai client (``extra_body`` merged into the body, NOT_GIVEN values
dropped), same errors: HTTP errors raise the openai ``APIStatusError`` subclass for the status,
connection failures ``APIConnectionError`` and timeouts ``APITimeoutError``; retried like the
client (``max_retries`` 2, backoff, ``x-should-retry`` honoured). A 200 reply that is no usable
completion (not JSON, no choices, a choice without a message, over ``max_reply_bytes``) raises
:class:`MalformedReply` (an HTTP 502 ``InternalServerError``) naming what was wrong. Anything
unusual (non-JSON values, ``stream``, ``extra_headers``, ...) takes the openai client's path.

Bare atroposlib envs opt in with ``server_cls = LeanOpenAIServer`` (Phase 1 / ``openai`` servers
only: ServerManager uses a concrete ``server_cls`` for every config). ``HERMES_OPENAI_CLIENT=1``
sends every call through the openai client instead.
"""

from __future__ import annotations

import asyncio
import datetime
import inspect
import json
import os
import random
import warnings
from collections.abc import AsyncIterator, Callable
from typing import Any, get_args

import aiohttp
import openai
import openai._base_client as _openai_base
from atroposlib.envs.server_handling.openai_server import OpenAIServer
from openai._models import _get_extra_fields_type, field_get_default
from openai._utils import is_given
from openai.types.chat import ChatCompletion, ChatCompletionMessage
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_message_function_tool_call import (
    ChatCompletionMessageFunctionToolCall,
    Function,
)
from openai.types.completion_usage import CompletionUsage
from pydantic import BaseModel

from environments import server_retries
from environments.patches import plain_json

OPT_OUT_VAR = "HERMES_OPENAI_CLIENT"
DEFAULT_MAX_REPLY_BYTES = 4 * 1024 * 1024
# kwargs the openai client treats as request options, not body fields: the client handles them.
_CLIENT_OPTIONS = frozenset({"extra_headers", "extra_query", "timeout", "stream", "stream_options"})
# The httpx the openai client is built on (this openai ships its own copy, ``httpx2``): its
# errors carry that module's Request/Response objects.
httpx: Any = getattr(_openai_base, "httpx2", None) or _openai_base.httpx


def lean_chat_enabled() -> bool:
    return os.environ.get(OPT_OUT_VAR, "").strip() in ("", "0")


class MalformedReply(openai.InternalServerError):
    """A 200 reply that is no usable chat completion; carries the cause (as an HTTP 502)."""

    def __init__(self, cause: str, request: Any) -> None:
        message = f"malformed reply (HTTP 200): {cause}"
        body = {"error": {"message": message, "type": "hermes_bad_reply"}}
        response = httpx.Response(502, json=body, request=request, headers={"x-should-retry": "false"})
        super().__init__(f"Error code: 502 - {body}", response=response, body=body["error"])
        self.cause = cause


# ---------------------------------------------------------------------------- the request body


# schema ids -> (the schemas, their JSON)
ToolsCache = dict[tuple[int, ...], tuple[tuple[Any, ...], str]]


def request_body(kwargs: dict[str, Any], tools_cache: ToolsCache) -> bytes | None:
    """The JSON body the openai client would send for ``kwargs``; None when the client must handle
    them (request options or values that are not plain JSON)."""
    if not _CLIENT_OPTIONS.isdisjoint(kwargs):
        return None
    body: dict[str, Any] = {}
    for key, value in kwargs.items():
        if key == "extra_body" or not is_given(value):
            continue
        body[key] = value
    extra = kwargs.get("extra_body")
    if extra is not None:
        if type(extra) is not dict:
            return None
        body.update(extra)  # the client merges extra_body over the fields, the same way
    tools = body.pop("tools", None)
    try:
        # One pass: json refuses what is not JSON (an object goes through the openai client, which
        # knows how to transform it); a walk to check first cost as much as the dump, every turn,
        # over a conversation that only grows.
        text = json.dumps(body, ensure_ascii=False, separators=(",", ":"), default=_not_json)
    except (TypeError, ValueError, RecursionError):
        return None
    if tools is not None:
        tools_text = _tools_json(tools, tools_cache)
        if tools_text is None:
            return None
        text = f'{text[:-1]}{"," if body else ""}"tools":{tools_text}}}'
    return text.encode()


def _not_json(value: Any) -> Any:
    raise TypeError(f"not JSON: {type(value).__name__}")


def _tools_json(tools: Any, cache: ToolsCache) -> str | None:
    """Tool schemas serialised once per set of schemas. Each rollout's loop holds its own list
    of the group's schema dicts, so the key is the schemas themselves (by identity), not the
    list: keyed by list, 256 rollouts missed on every first turn and thrashed the cache."""
    if type(tools) is not list:
        return None if not plain_json(tools) else json.dumps(tools, ensure_ascii=False, separators=(",", ":"))
    key = tuple(map(id, tools))
    hit = cache.get(key)
    if hit is not None and len(hit[0]) == len(tools) and all(a is b for a, b in zip(hit[0], tools)):
        return hit[1]
    if not plain_json(tools):
        return None
    text = json.dumps(tools, ensure_ascii=False, separators=(",", ":"))
    if len(cache) >= 64:
        cache.clear()
    cache[key] = (tuple(tools), text)  # holding the schemas keeps their ids from being reused
    return text


# ---------------------------------------------------------------------------- the reply

_INERT = (str, int, float, bool, type(None))
_CALL = object()  # a default that must be made afresh (a factory, or a mutable value pydantic copies)
# (field name, key in the values, field info, its default or _CALL)
_Field = tuple[str, str, Any, Any]
# class -> its fields | None when openai's construct must do it
_PLANS: dict[type, tuple[_Field, ...] | None] = {}


def _converts(annotation: Any) -> bool:
    """openai's ``construct_type`` changes values of these types (an int to a float, a string to
    a date), wherever they appear in a field's type."""
    return annotation in (float, datetime.datetime, datetime.date) or any(map(_converts, get_args(annotation)))


def _fixed_default(info: Any) -> Any:
    if info.default_factory is None and type(info.default) in _INERT:
        return info.default
    return None if info.is_required() else _CALL  # openai's construct leaves a required field None


def _plan(cls: type[BaseModel]) -> tuple[_Field, ...] | None:
    if cls not in _PLANS:
        fields = cls.model_fields
        own_way = (
            _get_extra_fields_type(cls) is not None
            or cls.model_config.get("populate_by_name")
            or any(_converts(f.annotation) for f in fields.values())
        )
        _PLANS[cls] = None if own_way else tuple((n, f.alias or n, f, _fixed_default(f)) for n, f in fields.items())
    return _PLANS[cls]


def _built(value: Any) -> bool:
    """Nothing left for openai's ``construct_type`` to convert: a scalar, a built model, or a
    list of those (a dict, or a list of dicts, is still raw JSON)."""
    if type(value) in _INERT or isinstance(value, BaseModel):
        return True
    return type(value) is list and all(type(v) in _INERT or isinstance(v, BaseModel) for v in value)


def _construct(cls: Any, **values: Any) -> Any:
    """``cls.model_construct(**values)`` as openai's models do it, without its per-field type walk
    when every value is already built (157 -> 34 us per reply; BENCHMARKS.md, session 12). Raw JSON
    values (a ``logprobs`` object, ``annotations``, usage details) and models with fields openai's
    construct converts (floats, dates) take openai's own construct."""
    fields = _plan(cls)
    if fields is None or not all(_built(v) for v in values.values()):
        return cls.model_construct(**values)
    data: dict[str, Any] = {}
    fields_set: set[str] = set()
    for name, key, info, default in fields:
        if key in values:
            data[name] = values.pop(key)
            fields_set.add(name)
        else:
            data[name] = field_get_default(info) if default is _CALL else default
    model = cls.__new__(cls)
    object.__setattr__(model, "__dict__", data)
    object.__setattr__(model, "__pydantic_private__", None)
    object.__setattr__(model, "__pydantic_extra__", values)  # what no field took: provider extras
    object.__setattr__(model, "__pydantic_fields_set__", fields_set)
    return model


def build_completion(raw: bytes, asked_max_tokens: Any, request: Any) -> ChatCompletion:
    """A ``ChatCompletion`` from a reply body, without validation walks; MalformedReply if unusable."""
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise MalformedReply(f"body is not JSON ({exc}; starts {bytes(raw[:60])!r})", request) from None
    if not isinstance(data, dict):
        raise MalformedReply(f"body is a JSON {type(data).__name__}; expected a completion object", request)
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise MalformedReply(f"no choices in the reply (keys: {sorted(data)[:8]})", request)
    usage = data.get("usage")
    got = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if isinstance(asked_max_tokens, int) and isinstance(got, int) and got > asked_max_tokens * len(choices):
        raise MalformedReply(
            f"{got} completion tokens for max_tokens={asked_max_tokens} (x{len(choices)} choices)", request
        )
    built = [_choice(i, c, request) for i, c in enumerate(choices)]
    fields = {k: v for k, v in data.items() if k not in ("choices", "usage")}
    fields.setdefault("object", "chat.completion")
    return _construct(
        ChatCompletion,
        choices=built,
        usage=_construct(CompletionUsage, **usage) if isinstance(usage, dict) else None,
        **fields,
    )


def _choice(index: int, choice: Any, request: Any) -> Choice:
    if not isinstance(choice, dict):
        raise MalformedReply(f"choice {index} is a JSON {type(choice).__name__}; expected an object", request)
    message = choice.get("message")
    if not isinstance(message, dict):
        raise MalformedReply(f"choice {index} has no message object (keys: {sorted(choice)[:8]})", request)
    raw_calls = message.get("tool_calls")
    fields = {k: v for k, v in message.items() if k != "tool_calls"}
    fields.setdefault("role", "assistant")
    fields.setdefault("content", None)
    if isinstance(raw_calls, list):
        fields["tool_calls"] = [_tool_call(index, j, c, request) for j, c in enumerate(raw_calls)]
    elif "tool_calls" in message:  # an explicit null is kept as sent
        if raw_calls is not None:
            raise MalformedReply(
                f"choice {index}: tool_calls is a JSON {type(raw_calls).__name__}; expected a list", request
            )
        fields["tool_calls"] = None
    rest = {k: v for k, v in choice.items() if k != "message"}
    rest.setdefault("index", index)
    rest.setdefault("finish_reason", None)
    rest.setdefault("logprobs", None)
    return _construct(Choice, message=_construct(ChatCompletionMessage, **fields), **rest)


def _tool_call(index: int, j: int, call: Any, request: Any) -> ChatCompletionMessageFunctionToolCall:
    if not isinstance(call, dict):
        raise MalformedReply(
            f"choice {index}: tool call {j} is a JSON {type(call).__name__}; expected an object", request
        )
    fn = call.get("function")
    fields = {k: v for k, v in call.items() if k != "function"}
    fields.setdefault("type", "function")
    function = _construct(Function, **fn) if isinstance(fn, dict) else fn
    return _construct(ChatCompletionMessageFunctionToolCall, function=function, **fields)


# ---------------------------------------------------------------------------- the server


class LeanOpenAIServer(OpenAIServer):
    """``OpenAIServer`` with the lean chat attempt (see the module docstring)."""

    max_reply_bytes = DEFAULT_MAX_REPLY_BYTES
    # Told about every failed attempt, retried or not (the console counts them per server).
    on_attempt_error: Callable[[str], None] | None = None

    def __init__(self, config: Any, reasoning_config: Any = None) -> None:
        super().__init__(config, reasoning_config=reasoning_config)
        base = str(config.base_url or "").rstrip("/")
        self._chat_url = f"{base}/chat/completions"
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if config.api_key:
            self._headers["Authorization"] = f"Bearer {config.api_key}"
        self._session: aiohttp.ClientSession | None = None
        self._closer: Any = None  # the async generator that closes the session when its loop ends
        self.max_retries: int = self.openai.max_retries  # the client's own retry budget
        self._tools_cache: ToolsCache = {}
        # The httpx request the openai errors carry: one per server (building one per attempt,
        # only for errors' sake, cost ~20 us of URL parsing each).
        self._stub = _request_stub(self._chat_url)

    async def chat_completion(self, **kwargs: Any) -> ChatCompletion:
        """atroposlib's ``chat_completion`` (health check, statistics, 3 x 3 attempts), written
        without tenacity, whose retriers are reference cycles only a full garbage collection
        frees (``environments.server_retries``)."""
        if not lean_chat_enabled():
            return await super().chat_completion(**kwargs)
        reply: ChatCompletion = await server_retries.chat_completion(self, kwargs)
        return reply

    async def _chat_completion_wrapper(self, **kwargs: Any) -> ChatCompletion:
        if not lean_chat_enabled():
            return await super()._chat_completion_wrapper(**kwargs)
        assert kwargs.get("model") is not None, "Model is required for chat completion!"
        assert kwargs.get("messages") is not None, "Messages are required for chat completion!"
        n = kwargs.get("n", 1) if isinstance(kwargs.get("n", 1), int) else 1
        if self.config.n_kwarg_is_ignored:
            kwargs = {k: v for k, v in kwargs.items() if k != "n"}
            replies = await asyncio.gather(*[self._create(kwargs) for _ in range(n)])
            return _joined(replies)
        first = await self._create(kwargs)
        got = len(first.choices)
        if got == n:
            return first
        if got != 1:
            raise ValueError(f"Expected 1 or {n} completions, got {got}!")
        warnings.warn("n kwarg is ignored by the API, setting to True", stacklevel=2)
        self.config.n_kwarg_is_ignored = True
        rest = await asyncio.gather(*[self._create(kwargs) for _ in range(1, n)])
        return _joined([first, *rest])

    async def _create(self, kwargs: dict[str, Any]) -> ChatCompletion:
        body = request_body(kwargs, self._tools_cache)
        if body is None:  # something only the openai client knows how to send
            return await self.openai.chat.completions.create(**kwargs)
        retries = 0
        while True:
            try:
                return await self._attempt(body, kwargs.get("max_tokens"))
            except MalformedReply:
                raise  # x-should-retry: false (atroposlib's own retries cover it)
            except openai.APIStatusError as exc:
                if not getattr(exc, "hermes_retry", False) or retries >= self.max_retries:
                    raise
                delay = self._retry_after(exc.response) or _backoff(retries)
            except openai.APIConnectionError:  # includes APITimeoutError
                if retries >= self.max_retries:
                    raise
                delay = _backoff(retries)
            await asyncio.sleep(delay)
            retries += 1

    def _retry_after(self, response: Any) -> float | None:
        """A server-directed delay the openai client would honour (up to its limit)."""
        try:
            value = self.openai._parse_retry_after_header(response.headers)
        except Exception:  # noqa: BLE001 - an unknown client layout: use the backoff
            return None
        limit = getattr(_openai_base, "MAX_RETRY_AFTER_DELAY", 60)
        return value if isinstance(value, (int, float)) and 0 < value <= limit else None

    async def _attempt(self, body: bytes, max_tokens: Any) -> ChatCompletion:
        request = self._stub
        try:
            session = await self._pool()
            async with session.post(self._chat_url, data=body, headers=self._headers) as resp:
                raw = await _read_capped(resp, self.max_reply_bytes, request)
                if resp.status != 200:
                    error, retry = _status_error(self.openai, resp, raw, request)
                    error.hermes_retry = retry
                    raise error
                return build_completion(raw, max_tokens, request)
        except asyncio.CancelledError:
            raise
        except MalformedReply as exc:
            self._note(f"malformed reply (HTTP 200) from /chat/completions: {exc.cause}")
            raise
        except openai.APIStatusError as exc:
            if exc.status_code >= 500 or exc.status_code == 429:
                self._note(f"HTTP {exc.status_code} from /chat/completions")
            raise
        except TimeoutError:
            what = f"no complete reply within {self.config.timeout:g}s (total per-request timeout)"
            self._note(f"ReadTimeout: {what} (/chat/completions)")
            raise openai.APITimeoutError(request=request) from httpx.ReadTimeout(what, request=request)
        except (aiohttp.ClientError, OSError) as exc:
            cause = _as_httpx_error(exc, request)  # the error the openai client would carry
            self._note(f"{type(cause).__name__}: {str(cause)[:120] or 'no detail'} (/chat/completions)")
            raise openai.APIConnectionError(request=request) from cause

    async def _pool(self) -> aiohttp.ClientSession:
        """The server's session, made on first use in the running loop (remade if that loop ended)."""
        session = self._session
        loop = asyncio.get_running_loop()
        if session is None or session.closed or session._loop is not loop:
            session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=float(self.config.timeout or 0) or None),
                connector=aiohttp.TCPConnector(limit=0),
            )
            self._session = session
            # Bare atroposlib envs never close their servers: an async generator started in this
            # loop is closed by the loop's shutdown_asyncgens() (asyncio.run does it), and closing
            # it closes the session, so no "Unclosed client session" at exit.
            closer = _close_at_loop_end(session)
            await closer.__anext__()
            self._closer = closer
        return session

    def _note(self, what: str) -> None:
        hook = self.on_attempt_error
        if hook is not None:
            hook(what)

    async def aclose(self) -> None:
        """Close the pooled session (the openai client is closed by whoever owns the manager)."""
        session, self._session = self._session, None
        closer, self._closer = self._closer, None
        if session is not None and not session.closed:
            await session.close()
        if closer is not None:
            await closer.aclose()


def _as_httpx_error(exc: BaseException, request: Any) -> Exception:
    """aiohttp's transport error as the httpx one the openai client reports for the same
    failure (operators and the console's counters see the same names either way)."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        return httpx.ConnectError(str(exc.os_error or exc), request=request)
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return httpx.RemoteProtocolError("Server disconnected without sending a response.", request=request)
    if isinstance(exc, (aiohttp.ClientOSError, aiohttp.ClientPayloadError, ConnectionError)):
        return httpx.ReadError(str(exc) or type(exc).__name__, request=request)
    return httpx.TransportError(f"{type(exc).__name__}: {exc}", request=request)


async def _close_at_loop_end(session: aiohttp.ClientSession) -> AsyncIterator[None]:
    try:
        yield
    finally:
        if not session.closed:
            await session.close()


def _joined(replies: list[ChatCompletion]) -> ChatCompletion:
    first = replies[0]
    for other in replies[1:]:
        first.choices.extend(other.choices)
    return first


def _request_stub(url: str) -> Any:
    """The httpx request the openai errors carry (never sent: aiohttp does the sending)."""
    return httpx.Request("POST", url)


async def _read_capped(resp: aiohttp.ClientResponse, cap: int, request: Any) -> bytes:
    raw = bytearray()
    async for chunk in resp.content.iter_any():
        raw += chunk
        if len(raw) > cap and resp.status == 200:
            raise MalformedReply(f"reply larger than {cap} bytes (the reply size cap, HERMES_MAX_REPLY_BYTES)", request)
    return bytes(raw)


def _status_error(
    client: Any, resp: aiohttp.ClientResponse, raw: bytes, request: Any
) -> tuple[openai.APIStatusError, bool]:
    """The error the openai client raises for this reply, made by the client itself (same class,
    message and body), and whether the client would retry it."""
    response = httpx.Response(resp.status, headers=list(resp.headers.items()), content=raw, request=request)
    return client._make_status_error_from_response(response), client._should_retry(response)


def _backoff(retries: int) -> float:
    """The openai client's schedule: 0.5 s doubling up to 8 s, minus up to 25 % jitter."""
    return min(0.5 * 2.0**retries, 8.0) * (1 - 0.25 * random.random())


def server_class_for(configs: Any, default: Any) -> Any:
    """The server class a ServerManager should build for ``configs``: ``LeanOpenAIServer`` when
    ``default`` leaves the choice to atroposlib (abstract) and every config is an ``openai``
    server (Phase 1); ``default`` otherwise (ServerManager would use a concrete class for all)."""
    if not lean_chat_enabled() or not inspect.isabstract(default) or not isinstance(configs, list) or not configs:
        return default
    if all(getattr(c, "server_type", None) == "openai" for c in configs):
        return LeanOpenAIServer
    return default
