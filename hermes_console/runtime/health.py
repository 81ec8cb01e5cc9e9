"""Server health for several inference servers: mark a dead one down, route around it,
bring it back when it answers again.

atroposlib's own health check (``health_check=True``) pings every server with a chat
completion every second forever, and once a ping fails every call on that server
blocks in ``while not server_healthy: sleep(1)`` with no timeout (trap 6), so our
configs turn it off. Instead:

* each *attempt* (the ``_*_wrapper`` methods inside atroposlib's retries) is watched;
  after ``DOWN_AFTER`` consecutive connection failures the server is marked
  ``server_healthy = False``. ServerManager then routes new calls to the healthy
  server with the most free slots (it skips unhealthy ones);
* calls already waiting on that server (in a retry, or blocked on ``server_healthy``)
  are cancelled and re-issued on a healthy sibling, so a rollout does not stall;
* a probe (GET ``/health`` or ``/v1/models``, any answer below 500) runs once a second
  while a server is down and marks it healthy again.

Only connection failures and timeouts count: a server that answers, even with errors,
is reachable, and its errors are the reliability counters' business.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from environments import events, patches
from hermes_console.runtime import events as rev

DOWN_AFTER = 3
PROBE_INTERVAL_S = 1.0
PROBE_TIMEOUT_S = 2.0
_ATTEMPTS = (
    "_chat_completion_wrapper",
    "_completion_wrapper",
    "_tokens_and_logprobs_completion_wrapper",
    "_get_logprobs_wrapper",
)
_PUBLIC = ("chat_completion", "completion", "tokens_and_logprobs_completion", "get_logprobs")
_MARK = "_hermes_health"


@dataclass
class Health:
    index: int
    url: str
    consecutive_failures: int = 0
    connection_failures: int = 0
    rerouted: int = 0
    down_since: float | None = None  # wall time, for the console
    last_failure: str | None = None
    down: asyncio.Event = field(default_factory=asyncio.Event)
    probe: asyncio.Task[None] | None = None


def is_connection_failure(exc: BaseException) -> bool:
    """Refused/reset connections and timeouts, from openai (httpx) or aiohttp."""
    try:
        import openai

        if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
            return True
    except ImportError:  # pragma: no cover - openai is a dependency of atroposlib
        pass
    try:
        import aiohttp

        if isinstance(exc, (aiohttp.ClientConnectionError, aiohttp.ServerTimeoutError)):
            return True
    except ImportError:  # pragma: no cover
        pass
    try:
        import httpx

        if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout, httpx.ReadTimeout, httpx.RemoteProtocolError)):
            return True
    except ImportError:  # pragma: no cover
        pass
    return isinstance(exc, (ConnectionError, asyncio.TimeoutError, TimeoutError))


def _probe_url(server: Any) -> str:
    cfg = getattr(server, "config", None)
    base = (getattr(cfg, "base_url", "") or "").rstrip("/")
    if base.endswith("/v1"):
        return base + "/models" if getattr(cfg, "server_type", "openai") == "openai" else base[:-3] + "/health"
    return base + "/health"


def _pick_healthy(manager: Any, exclude: Any) -> Any | None:
    """The healthy sibling with the most free train slots (ServerManager's rule)."""
    best, best_free = None, -1
    for server in getattr(manager, "servers", []) or []:
        if server is exclude or not getattr(server, "server_healthy", True):
            continue
        sem = getattr(server, "sem", None)
        free = getattr(sem, "_value", 0)
        if free > best_free:
            best, best_free = server, free
    return best


def _watch_attempt(server: Any, name: str, health: Health) -> Callable[..., Any]:
    original = getattr(server, name)

    async def attempt(*args: Any, **kwargs: Any) -> Any:
        try:
            result = await original(*args, **kwargs)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if is_connection_failure(exc):
                health.connection_failures += 1
                health.consecutive_failures += 1
                health.last_failure = f"{type(exc).__name__}: {str(exc)[:160]}"
                if health.consecutive_failures >= DOWN_AFTER and server.server_healthy:
                    mark_down(server, health)
            raise
        health.consecutive_failures = 0
        return result

    return attempt


def _failover(manager: Any, server: Any, name: str, health: Health) -> Callable[..., Any]:
    original = getattr(server, name)

    async def call(*args: Any, **kwargs: Any) -> Any:
        if not server.server_healthy:
            alt = _pick_healthy(manager, server)
            if alt is not None:  # every server was down when ServerManager picked: it fell back to us
                health.rerouted += 1
                return await getattr(alt, name)(*args, **kwargs)
        work = asyncio.ensure_future(original(*args, **kwargs))
        went_down = asyncio.ensure_future(health.down.wait())
        try:
            await asyncio.wait({work, went_down}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            work.cancel()
            raise
        finally:
            went_down.cancel()
        if work.done():
            return work.result()
        alt = _pick_healthy(manager, server)
        if alt is None:
            return await work  # nowhere better to go: wait for the probe to revive this one
        work.cancel()
        with contextlib.suppress(BaseException):
            await work
        health.rerouted += 1
        return await getattr(alt, name)(*args, **kwargs)

    return call


def attach(manager: Any) -> None:
    """Watch every server of ``manager`` (idempotent). Wrap *after* other instrumentation
    so the failover wrapper is outermost and a re-issued call is counted on its new server."""
    for index, server in enumerate(getattr(manager, "servers", []) or []):
        if getattr(server, _MARK, None) is not None or not hasattr(server, "server_healthy"):
            continue
        health = Health(index=index, url=getattr(getattr(server, "config", None), "base_url", "") or "")
        for name in _ATTEMPTS:
            if hasattr(server, name):
                patches.replace_server_method(server, name, _watch_attempt(server, name, health))
        if len(manager.servers) > 1:  # one server: nothing to fail over to
            for name in _PUBLIC:
                if hasattr(server, name):
                    patches.replace_server_method(server, name, _failover(manager, server, name, health))
        patches.tag_server(server, _MARK, health)


def mark_down(server: Any, health: Health) -> None:
    patches.set_server_healthy(server, False)
    health.down_since = time.time()
    health.down.set()
    events.emit(
        rev.LogRecord(
            level="WARNING",
            logger="servers",
            message=f"server {health.index} ({health.url}) marked unhealthy after "
            f"{health.consecutive_failures} connection failures: {health.last_failure}; "
            "routing around it",
        )
    )
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    if health.probe is None or health.probe.done():
        health.probe = loop.create_task(_probe(server, health), name=f"hermes-health-probe-{health.index}")


def mark_up(server: Any, health: Health) -> None:
    patches.set_server_healthy(server, True)
    health.consecutive_failures = 0
    health.down_since = None
    health.down = asyncio.Event()  # callers waiting on the old event keep their state
    events.emit(
        rev.LogRecord(
            level="INFO",
            logger="servers",
            message=f"server {health.index} ({health.url}) answers again; back in rotation",
        )
    )


async def _probe(server: Any, health: Health) -> None:
    import aiohttp

    url = _probe_url(server)
    timeout = aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while not server.server_healthy:
            await asyncio.sleep(PROBE_INTERVAL_S)
            try:
                async with session.get(url) as resp:
                    await resp.read()
                    if resp.status < 500:
                        mark_up(server, health)
                        return
            except (TimeoutError, aiohttp.ClientError, OSError):
                continue


def health_row(server: Any) -> dict[str, Any]:
    """Extra ServerStats fields for one server."""
    health: Health | None = getattr(server, _MARK, None)
    if health is None:
        return {}
    return {
        "consecutive_failures": health.consecutive_failures,
        "connection_failures": health.connection_failures,
        "rerouted": health.rerouted,
        "down_since": health.down_since,
        "last_connection_failure": health.last_failure,
    }


async def stop_probes(manager: Any) -> None:
    tasks: list[asyncio.Task[None]] = []
    for server in getattr(manager, "servers", []) or []:
        health: Health | None = getattr(server, _MARK, None)
        if health is not None and health.probe is not None and not health.probe.done():
            health.probe.cancel()
            tasks.append(health.probe)
    for task in tasks:
        with contextlib.suppress(BaseException):
            await task
