"""atroposlib's chat-completion retries as plain loops (used by ``LeanOpenAIServer``).

atroposlib 0.4.0 wraps ``APIServer.chat_completion`` and the ``_chat_comp`` / ``_chat_eval``
it calls in tenacity's ``@retry(stop=stop_after_attempt(3), wait=wait_random_exponential(
multiplier=1, max=10))``. Every call copies two ``AsyncRetrying`` objects whose state refers
back to them (the retrier -> its thread-local -> its iteration state -> a bound method of the
retrier): ~150 objects a rollout that only the cyclic garbage collector can free. A batch of
256 rollouts left ~60,000 of them, freed in one 200-250 ms collection that holds the GIL over
every rollout (BENCHMARKS.md, P2); and the layers cost ~55 us a call.

Here are the same layers, no cycle: the same attempts (three of ``chat_completion``'s body,
each trying the request up to three times), the same waits (``uniform(0, min(2 ** (n - 1),
10))`` seconds after failed attempt ``n``), the same bookkeeping (the health check started on
first use, the model name, ``split``, reasoning kwargs, ``request_timings`` / ``attempts_list``
and their eval twins, the semaphores) and on exhaustion the same ``tenacity.RetryError``
(its ``last_attempt`` holding the last exception, raised ``from`` it), with the same draws from
``random``. Only ``Exception``s are retried: a cancellation goes straight through. ``tests/environments/test_server_retries.py``
runs both against the same failing servers and compares.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import tenacity

T = TypeVar("T")

ATTEMPTS = 3  # stop_after_attempt(3)
MAX_WAIT_S = 10.0  # wait_random_exponential(multiplier=1, max=10)


def wait_after(attempt: int) -> float:
    """Seconds to wait after failed attempt ``attempt`` (1-based), as tenacity draws them."""
    return random.uniform(0.0, min(2.0 ** (attempt - 1), MAX_WAIT_S))


async def retried(attempt: Callable[[], Awaitable[T]]) -> T:
    """``attempt()`` up to :data:`ATTEMPTS` times; then ``tenacity.RetryError`` from the last error."""
    number = 1
    while True:
        try:
            return await attempt()
        except Exception as exc:
            # tenacity draws the wait before it checks the stop, the last attempt's too: the
            # same draws keep a seeded ``random`` stream where atroposlib leaves it
            delay = wait_after(number)
            if number >= ATTEMPTS:
                last = tenacity.Future(number)
                last.set_exception(exc)
                raise tenacity.RetryError(last) from exc
        await asyncio.sleep(delay)
        number += 1


async def chat_completion(server: Any, kwargs: dict[str, Any]) -> Any:
    """``APIServer.chat_completion(**kwargs)`` of atroposlib 0.4.0, without tenacity."""
    return await retried(lambda: _chat_completion_body(server, dict(kwargs)))


async def _chat_completion_body(server: Any, kwargs: dict[str, Any]) -> Any:
    if not server.initialized:
        if server.config.health_check:
            if server.config.base_url is not None:
                server.check_task = asyncio.create_task(server.check_server_status_task())
            else:
                server.server_healthy = True
        else:
            server.server_healthy = True
        server.initialized = True
    kwargs["model"] = server.config.model_name
    split = kwargs.pop("split", "train")
    kwargs = server._inject_reasoning_kwargs(kwargs)
    stats: dict[str, Any] = {"attempts": 0}
    if split == "train":
        reply = await retried(lambda: _chat_attempt(server, server.sem, stats, kwargs))
        server.request_timings.append(stats["end"] - stats["start"])
        server.attempts_list.append(stats["attempts"])
    else:  # separate eval workers, as atroposlib has them
        reply = await retried(lambda: _chat_attempt(server, server.eval_sem, stats, kwargs))
        server.eval_request_timings.append(stats["end"] - stats["start"])
        server.eval_attempts_list.append(stats["attempts"])
    return reply


async def _chat_attempt(server: Any, sem: Any, stats: dict[str, Any], kwargs: dict[str, Any]) -> Any:
    while not server.server_healthy:
        await asyncio.sleep(1)
    async with sem:
        if stats.get("start") is None:
            stats["start"] = time.time()
        stats["attempts"] += 1
        reply = await server._chat_completion_wrapper(**kwargs)
        stats["end"] = time.time()
        return reply
