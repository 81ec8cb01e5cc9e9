"""Inference servers as the console sees them: build a ServerManager for a phase,
count what goes through each server, report it, and tear a manager down cleanly.

Counting wraps each server *instance's* request methods (instance attributes
shadow the class's), so atroposlib itself is never edited.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from environments import patches
from hermes_console.runtime.errors import ConfigError
from hermes_console.runtime.health import health_row, stop_probes

_WRAPPED = ("chat_completion", "completion", "tokens_and_logprobs_completion", "get_logprobs")
_MARK = "_hermes_counted"


@dataclass
class ServerCounters:
    requests: int = 0
    errors: int = 0
    in_flight: int = 0
    last_error: str | None = None
    latencies_ms: deque[float] = field(default_factory=lambda: deque(maxlen=256))
    # Failed HTTP attempts (5xx/429, timeouts, refused connections). The openai client and
    # atroposlib retry these silently, so without this count a flaky server looks healthy.
    transport_errors: int = 0
    last_transport_error: str | None = None


MAX_REPLY_BYTES_VAR = "HERMES_MAX_REPLY_BYTES"
DEFAULT_MAX_REPLY_BYTES = 4 * 1024 * 1024  # a chat reply of max_token_length tokens is far smaller
_COMPLETION_PATHS = ("/chat/completions", "/completions")


def max_reply_bytes() -> int:
    """The reply size cap (bytes, after decompression); ``HERMES_MAX_REPLY_BYTES`` overrides it."""
    raw = os.environ.get(MAX_REPLY_BYTES_VAR, "").strip()
    try:
        return int(raw) if raw else DEFAULT_MAX_REPLY_BYTES
    except ValueError:
        raise ConfigError(f"{MAX_REPLY_BYTES_VAR}={raw!r}: expected a whole number of bytes") from None


class BadReply(Exception):
    """A 200 reply that is no usable completion (not JSON, no choices, too big)."""


class _CountingTransport:
    """Wraps the openai client's httpx transport: counts every failed attempt, retried or not,
    and holds each completion request to a total time (not only inter-byte, as httpx does)
    and a reply size. A 200 reply that is not a usable completion is handed to the client as
    an HTTP 502 carrying the cause: a server error, retried and counted, never a silent
    reward-0 rollout, and not a connection failure (the server does answer)."""

    def __init__(
        self, inner: Any, counters: ServerCounters, total_timeout_s: float | None = None, max_bytes: int | None = None
    ) -> None:
        self._inner = inner
        self._counters = counters
        self._total_s = total_timeout_s if total_timeout_s and total_timeout_s > 0 else None
        self._max_bytes = max_bytes if max_bytes is not None else max_reply_bytes()

    async def handle_async_request(self, request: Any) -> Any:
        httpx = _httpx_of(request)
        path = request.url.path
        checked = request.method == "POST" and path.endswith(_COMPLETION_PATHS)
        try:
            async with asyncio.timeout(self._total_s if checked else None):
                response = await self._inner.handle_async_request(request)
                if checked and response.status_code == 200:
                    response = await self._whole_reply(request, response)
        except asyncio.CancelledError:
            raise
        except TimeoutError:
            what = f"no complete reply within {self._total_s:g}s (total per-request timeout)"
            self._note(f"ReadTimeout: {what} ({path})")
            raise httpx.ReadTimeout(what, request=request) from None
        except BadReply as exc:
            self._note(f"malformed reply (HTTP 200) from {path}: {exc}")
            # x-should-retry: atroposlib's own retries (9 attempts) already cover it; the openai
            # client retrying each of them too would mean 27 attempts per call.
            return httpx.Response(
                502,
                json={"error": {"message": f"malformed reply (HTTP 200): {exc}", "type": "hermes_bad_reply"}},
                headers={"x-should-retry": "false"},
                request=request,
            )
        except Exception as exc:
            self._note(f"{type(exc).__name__}: {str(exc)[:120] or 'no detail'} ({path})")
            raise
        if response.status_code >= 500 or response.status_code == 429:
            self._note(f"HTTP {response.status_code} from {path}")
        return response

    async def _whole_reply(self, request: Any, response: Any) -> Any:
        """Read the body (bounded), check it is a completion, hand back a read response."""
        httpx = _httpx_of(request)
        if "text/event-stream" in response.headers.get("content-type", ""):
            return response  # streamed replies are parsed by the client as they come
        raw = bytearray()
        try:
            async for chunk in response.stream:
                raw += chunk
                if len(raw) > self._max_bytes:
                    raise BadReply(
                        f"reply larger than {self._max_bytes} bytes (the reply size cap, {MAX_REPLY_BYTES_VAR})"
                    )
        finally:
            await response.aclose()
        whole = httpx.Response(
            200, headers=response.headers, content=bytes(raw), request=request, extensions=response.extensions
        )
        if len(whole.content) > self._max_bytes:  # compressed small, large once decoded
            raise BadReply(f"reply larger than {self._max_bytes} bytes once decompressed")
        _check_completion(whole.content, request)
        return whole

    def _note(self, what: str) -> None:
        self._counters.transport_errors += 1
        self._counters.last_transport_error = what

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _httpx_of(request: Any) -> Any:
    """The httpx module the client uses (openai may ship its own copy under another name)."""
    return importlib.import_module(type(request).__module__.split(".")[0])


def _check_completion(body: bytes, request: Any) -> None:
    """Raise BadReply unless ``body`` is a completion object with choices (within max_tokens)."""
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise BadReply(f"body is not JSON ({exc}; starts {bytes(body[:60])!r})") from None
    if not isinstance(data, dict):
        raise BadReply(f"body is a JSON {type(data).__name__}; expected a completion object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise BadReply(f"no choices in the reply (keys: {sorted(data)[:8]})")
    usage = data.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    try:
        asked = json.loads(request.content or b"{}").get("max_tokens")
    except (ValueError, AttributeError):
        asked = None
    got = usage.get("completion_tokens")
    n = len(choices)
    if isinstance(asked, int) and isinstance(got, int) and got > asked * n:
        raise BadReply(f"{got} completion tokens for max_tokens={asked} (x{n} choices)")


def _wrap_transport(server: Any, counters: ServerCounters) -> None:
    timeout = getattr(getattr(server, "config", None), "timeout", None)

    def wrap(transport: Any) -> Any:
        if isinstance(transport, _CountingTransport):
            return transport
        return _CountingTransport(transport, counters, total_timeout_s=float(timeout or 0) or None)

    patches.replace_client_transport(server, wrap)


def _hook_lean_attempts(server: Any, counters: ServerCounters) -> None:
    """The lean chat path (``environments.lean_chat``) bypasses the transport: count its failed
    attempts and hold it to the same reply size cap."""

    def note(what: str) -> None:
        counters.transport_errors += 1
        counters.last_transport_error = what

    patches.set_attempt_hooks(server, note, max_reply_bytes())


def describe_failure(exc: BaseException) -> str:
    """The cause of a failed server call: tenacity's ``RetryError[<Future ...>]`` and openai's
    "Connection error." are unwrapped to the last attempt's real error."""
    seen = 0
    while seen < 16:
        seen += 1
        last = getattr(exc, "last_attempt", None)  # tenacity.RetryError
        if last is not None and hasattr(last, "exception"):
            try:
                inner = last.exception()
            except BaseException:  # noqa: BLE001 - a cancelled attempt
                inner = None
            if inner is not None:
                exc = inner
                continue
        cause = exc.__cause__
        if cause is not None and type(exc).__name__ in ("APIConnectionError", "APITimeoutError"):
            exc = cause
            continue
        break
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


class ServerCallError(Exception):
    """A server call failed after its retries; the message names the server and the cause."""


def _counted(server: Any, name: str, counters: ServerCounters) -> Callable[..., Any]:
    original = getattr(server, name)
    url = getattr(getattr(server, "config", None), "base_url", None) or "server"

    async def call(*args: Any, **kwargs: Any) -> Any:
        counters.requests += 1
        counters.in_flight += 1
        t0 = time.perf_counter()
        try:
            result = await original(*args, **kwargs)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            counters.errors += 1
            cause = describe_failure(exc)
            counters.last_error = cause
            if getattr(exc, "last_attempt", None) is not None:  # tenacity's RetryError says nothing
                raise ServerCallError(f"{url}: {cause}") from exc
            raise
        except BaseException as exc:
            counters.errors += 1
            counters.last_error = f"{type(exc).__name__}: {str(exc)[:200]}"
            raise
        finally:
            counters.in_flight -= 1
        counters.latencies_ms.append((time.perf_counter() - t0) * 1000.0)
        return result

    return call


def instrument(manager: Any) -> list[ServerCounters]:
    """Attach counters to every server of ``manager`` (idempotent)."""
    out = []
    for server in getattr(manager, "servers", []) or []:
        counters = getattr(server, _MARK, None)
        if counters is None:
            counters = ServerCounters()
            for name in _WRAPPED:
                if hasattr(server, name):
                    patches.replace_server_method(server, name, _counted(server, name, counters))
            _wrap_transport(server, counters)
            _hook_lean_attempts(server, counters)
            patches.tag_server(server, _MARK, counters)
        out.append(counters)
    return out


def _p50(values: deque[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[len(ordered) // 2], 1)


def server_stats(manager: Any) -> list[dict[str, Any]]:
    """One plain dict per server (what ServerStats carries)."""
    rows = []
    for server in getattr(manager, "servers", []) or []:
        counters: ServerCounters | None = getattr(server, _MARK, None)
        cfg = getattr(server, "config", None)
        sem = getattr(server, "sem", None)
        sem_in_use = None
        if sem is not None and hasattr(sem, "max_val"):
            sem_in_use = int(sem.max_val - sem._value)  # atroposlib's semaphore exposes no getter
        rows.append(
            {
                "url": getattr(cfg, "base_url", "") or "",
                "server_type": getattr(cfg, "server_type", "?"),
                "model": getattr(cfg, "model_name", ""),
                "healthy": bool(getattr(server, "server_healthy", True)),
                "in_flight": counters.in_flight if counters else (sem_in_use or 0),
                "sem_in_use": sem_in_use,
                "requests": counters.requests if counters else 0,
                "errors": counters.errors if counters else 0,
                "last_error": counters.last_error if counters else None,
                "transport_errors": counters.transport_errors if counters else 0,
                "last_transport_error": counters.last_transport_error if counters else None,
                "latency_ms_p50": _p50(counters.latencies_ms) if counters else None,
            }
        )
        rows[-1].update(health_row(server))
    return rows


def build_server_manager(env: Any, configs: list[Any], phase: int) -> Any:
    """A fresh ServerManager for ``configs``, wired the way BaseEnv would plus what it forgets."""
    from atroposlib.envs.server_handling.server_baseline import ReasoningConfig
    from atroposlib.envs.server_handling.server_manager import ServerManager

    cfg = env.config
    reasoning = ReasoningConfig(
        enabled=getattr(cfg, "thinking_mode", False),
        effort=getattr(cfg, "reasoning_effort", None),
        max_tokens=getattr(cfg, "max_reasoning_tokens", None),
    )
    # BaseEnv never passes tool_parser; phase 2 needs it for client-side tool parsing.
    tool_parser = getattr(cfg, "tool_call_parser", None) if phase == 2 else None
    from environments.lean_chat import server_class_for

    manager = ServerManager(
        configs,
        server_class=server_class_for(configs, type(env).server_cls),
        reasoning_config=reasoning,
        tool_parser=tool_parser,
    )
    if tool_parser is None and hasattr(manager, "tool_parser") and getattr(cfg, "tool_call_parser", None):
        patches.set_manager_tool_parser(manager, cfg.tool_call_parser)
    instrument(manager)
    from hermes_console.runtime.health import attach

    attach(manager)  # after instrument(): its failover wrapper must be outermost
    return manager


async def close_server_manager(manager: Any) -> None:
    """Cancel health pingers and close HTTP clients; never raises."""
    from environments.atropos_compat import cancel_health_checks

    try:
        await cancel_health_checks(manager)
        await stop_probes(manager)
    except Exception:  # noqa: BLE001 - teardown is best effort
        pass
    for server in getattr(manager, "servers", []) or []:
        lean_close = getattr(server, "aclose", None)  # the lean chat path's pooled session
        if lean_close is not None:
            try:
                await lean_close()
            except Exception:  # noqa: BLE001
                pass
        client = getattr(server, "openai", None)
        close = getattr(client, "close", None)
        if close is not None:
            try:
                await close()
            except Exception:  # noqa: BLE001
                pass


def _health_url(config: Any) -> str:
    base = (getattr(config, "base_url", "") or "").rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


async def probe_servers(configs: list[Any], timeout_s: float = 3.0, wait_s: float = 0.0) -> None:
    """Quick reachability check before the run starts (loopback only).

    Any HTTP answer counts as reachable (a 404 still proves a server listens);
    a refused/timed-out connection is a :class:`ConfigError` naming the URL.
    Non-loopback servers are not contacted: the console never talks to the network.
    ``wait_s`` keeps retrying that long first (a server starting beside us, e.g. the
    demo's simulator, which starts after the UI so the first frame is immediate).
    """
    deadline = asyncio.get_running_loop().time() + wait_s
    while True:
        try:
            return await _probe_once(configs, timeout_s)
        except ConfigError:
            if asyncio.get_running_loop().time() >= deadline:
                raise
            await asyncio.sleep(0.1)


async def _probe_once(configs: list[Any], timeout_s: float) -> None:
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for i, cfg in enumerate(configs):
            url = _health_url(cfg)
            host = urlsplit(url).hostname or ""
            if host not in ("127.0.0.1", "localhost", "::1"):
                continue
            target = url + "/v1/models" if (cfg.base_url or "").rstrip("/").endswith("/v1") else url
            try:
                async with session.get(target) as resp:
                    await resp.read()
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                raise ConfigError(
                    f"server {i} at {cfg.base_url!r} is not reachable ({type(exc).__name__}: {exc}); "
                    "expected an OpenAI-compatible server listening there (start one, or run `hermes-console demo` "
                    "which starts the embedded simulator)"
                ) from None
