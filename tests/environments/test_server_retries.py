"""atroposlib's chat-completion retries without tenacity (environments/server_retries.py).

The oracle is atroposlib 0.4.0's own ``APIServer.chat_completion`` (tenacity-decorated), run on
the same kind of server with the same script of failures and the same random seed: both must
make the same attempts, wait the same, keep the same statistics and raise the same errors.
"""

from __future__ import annotations

import asyncio
import gc
import random
from typing import Any

import pytest
import tenacity
from atroposlib.envs.server_handling.server_baseline import APIServer, APIServerConfig

from environments import server_retries
from environments.lean_chat import LeanOpenAIServer


class Boom(RuntimeError):
    pass


def _server(outcomes: list[Any]) -> LeanOpenAIServer:
    """A server whose request attempts follow ``outcomes`` (an exception to raise, else a reply)."""
    config = APIServerConfig(base_url="http://127.0.0.1:9/v1", api_key="x", model_name="m", health_check=False)
    server = LeanOpenAIServer(config)
    server.seen = []  # type: ignore[attr-defined]

    async def attempt(**kwargs: Any) -> Any:
        server.seen.append(kwargs)  # type: ignore[attr-defined]
        outcome = outcomes.pop(0) if outcomes else "reply"
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    server._chat_completion_wrapper = attempt  # type: ignore[method-assign]
    return server


async def _run(call: Any, server: Any, monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> dict[str, Any]:
    """One call with waits recorded instead of slept and a fixed random seed."""
    waits: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(seconds: float, *a: Any, **kw: Any) -> Any:
        waits.append(seconds)
        return await real_sleep(0)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    random.seed(1234)
    try:
        outcome: Any = await call(server, **kwargs)
    except BaseException as exc:  # noqa: BLE001 - compared below
        outcome = exc
    finally:
        monkeypatch.setattr(asyncio, "sleep", real_sleep)
    return {
        "outcome": outcome,
        "next_random": random.random(),  # the stream is left where atroposlib leaves it
        "waits": waits,
        "requests": [dict(k) for k in server.seen],
        "timings": len(server.request_timings),
        "attempts": list(server.attempts_list),
        "eval_timings": len(server.eval_request_timings),
        "eval_attempts": list(server.eval_attempts_list),
    }


async def _ours(server: Any, **kwargs: Any) -> Any:
    return await server.chat_completion(**kwargs)


async def _atroposlib(server: Any, **kwargs: Any) -> Any:
    return await APIServer.chat_completion(server, **kwargs)


def _chain(exc: BaseException) -> list[str]:
    """The error's shape: RetryError -> its last attempt's error -> ... as type names."""
    shape = []
    while exc is not None:
        shape.append(type(exc).__name__)
        if isinstance(exc, tenacity.RetryError):
            assert exc.__cause__ is exc.last_attempt.exception()
            exc = exc.last_attempt.exception()
        else:
            break
    return shape


SCRIPTS = {
    "first try": [],
    "two failures": [Boom("a"), Boom("b")],
    "three failures": [Boom("a"), Boom("b"), Boom("c")],
    "five failures": [Boom(str(i)) for i in range(5)],
    "always": [Boom(str(i)) for i in range(9)],
}


@pytest.mark.parametrize("split", ["train", "eval"])
@pytest.mark.parametrize("script", list(SCRIPTS))
async def test_the_same_attempts_waits_statistics_and_errors_as_atroposlib(script, split, monkeypatch):
    kwargs = {"messages": [{"role": "user", "content": "hi"}], "n": 1, "split": split}
    ours = await _run(_ours, _server(list(SCRIPTS[script])), monkeypatch, **kwargs)
    theirs = await _run(_atroposlib, _server(list(SCRIPTS[script])), monkeypatch, **kwargs)
    assert ours["requests"] == theirs["requests"] and ours["requests"]
    assert all(r["model"] == "m" and "split" not in r for r in ours["requests"])
    assert ours["waits"] == theirs["waits"] and ours["next_random"] == theirs["next_random"]
    for key in ("timings", "attempts", "eval_timings", "eval_attempts"):
        assert ours[key] == theirs[key], key
    if isinstance(theirs["outcome"], BaseException):
        assert _chain(ours["outcome"]) == _chain(theirs["outcome"]) == ["RetryError", "RetryError", "Boom"]
        assert str(ours["outcome"].last_attempt.exception().last_attempt.exception()) == "8"
        assert len(ours["requests"]) == 9
    else:
        assert ours["outcome"] == theirs["outcome"] == "reply"


async def test_a_cancellation_is_never_retried(monkeypatch):
    for call in (_ours, _atroposlib):
        server = _server([asyncio.CancelledError()])
        result = await _run(call, server, monkeypatch, messages=[{"role": "user", "content": "hi"}])
        assert isinstance(result["outcome"], asyncio.CancelledError)
        assert len(result["requests"]) == 1 and result["waits"] == []


def test_the_waits_are_tenacitys():
    """The waits after attempts 1 and 2 are drawn like tenacity's wait_random_exponential(1, max=10)."""
    strategy = tenacity.wait_random_exponential(multiplier=1, max=10)
    for attempt in range(1, 8):
        state = tenacity.RetryCallState(None, None, (), {})
        state.attempt_number = attempt
        random.seed(attempt)
        theirs = strategy(state)
        random.seed(attempt)
        assert server_retries.wait_after(attempt) == theirs


async def test_calls_leave_no_reference_cycles_for_the_collector(monkeypatch):
    """tenacity's retriers are reference cycles (~15 objects a layer, two layers a call) that only
    a full collection frees; the plain loops leave nothing behind."""

    async def garbage_after(call: Any, calls: int) -> int:
        server = _server([])
        gc.collect()
        gc.disable()
        try:
            for _ in range(calls):
                assert await call(server, messages=[{"role": "user", "content": "hi"}]) == "reply"
            return gc.collect()
        finally:
            gc.enable()

    assert await garbage_after(_atroposlib, 20) >= 20 * 10  # the cycles this replaces
    assert await garbage_after(_ours, 20) == 0
