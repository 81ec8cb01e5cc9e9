"""A serve host leaving run-api (``/disconnect-env``): retried within a bounded budget, and a
failure is never silent. Until run-api drops the env it keeps its share of the weight and every
other env trains with a smaller one, so an operator must be told."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from environments import events
from hermes_console.runtime import events as rev
from hermes_console.runtime import trainer as trainer_mod
from hermes_console.runtime.intake import IntakeGate
from hermes_console.runtime.trainer_api import TrainerAPIError
from tests.scaleout.scaleout_helpers import link_env_config


class _LeavingAPI:
    """A run-api stand-in for the way out: the first ``failures`` calls fail as ``how`` says."""

    base_url = "http://127.0.0.1:1"

    def __init__(self, failures: int, how: str) -> None:
        self.failures = failures
        self.how = how
        self.calls: list[int] = []

    async def disconnect_env(self, env_id: int) -> None:
        self.calls.append(env_id)
        if len(self.calls) > self.failures:
            return
        if self.how == "hang":
            await asyncio.sleep(3600)
        raise TrainerAPIError(
            f"POST {self.base_url}/disconnect-env: HTTP 503 busy",
            retryable=self.how == "503",
        )


def _link(tmp_path: Path, api: _LeavingAPI) -> trainer_mod.TrainerLink:
    env = SimpleNamespace(config=link_env_config(group_size=2, total_steps=10), env_id=3, server=None)
    link = trainer_mod.TrainerLink(env, IntakeGate(lambda: 0, 4), tmp_path)
    link.client = api  # type: ignore[assignment]
    link.registered = True
    return link


@pytest.fixture
def warnings_seen() -> Any:
    seen: list[rev.LogRecord] = []

    def observe(event: Any) -> None:
        if isinstance(event, rev.LogRecord) and event.level == "WARNING":
            seen.append(event)

    events.add_observer(observe)
    yield seen
    events.remove_observer(observe)


@pytest.fixture(autouse=True)
def _quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trainer_mod, "DISCONNECT_BUDGET_S", 0.6, raising=False)
    monkeypatch.setattr(trainer_mod, "DISCONNECT_RETRY_S", 0.02, raising=False)


async def test_a_busy_run_api_is_asked_again_until_it_answers(tmp_path: Path, warnings_seen: list) -> None:
    api = _LeavingAPI(failures=2, how="503")
    link = _link(tmp_path, api)
    await link._disconnect()
    assert api.calls == [3, 3, 3]
    assert not link.registered
    assert warnings_seen == []


@pytest.mark.parametrize("how", ["503", "hang", "400"])
async def test_a_leave_that_never_lands_is_reported_within_the_budget(
    tmp_path: Path, warnings_seen: list, how: str
) -> None:
    api = _LeavingAPI(failures=10**6, how=how)
    link = _link(tmp_path, api)
    t0 = time.monotonic()
    await asyncio.wait_for(link._disconnect(), 5)
    assert time.monotonic() - t0 < 2.0  # bounded: the host's exit is not held hostage
    assert link.registered  # run-api was not told
    [warning] = warnings_seen
    assert warning.logger == "trainer"
    assert "env 3" in warning.message and api.base_url in warning.message
    assert ("HTTP 503" in warning.message) == (how != "hang")
    if how == "503":
        assert len(api.calls) > 1  # retried while the budget lasted
    else:
        assert len(api.calls) == 1  # a hang spends the budget; a 4xx will not change on asking again


class _SlowLeaveAPI(_LeavingAPI):
    """Answers ``/disconnect-env`` after a while: long enough for a stop to land in the middle."""

    def __init__(self) -> None:
        super().__init__(failures=0, how="503")

    async def disconnect_env(self, env_id: int) -> None:
        await asyncio.sleep(0.2)
        await super().disconnect_env(env_id)

    async def close(self) -> None:
        pass


@pytest.mark.parametrize("ends", ["by itself", "polling"])
async def test_stop_lets_a_leave_in_progress_finish(
    tmp_path: Path, warnings_seen: list, monkeypatch: pytest.MonkeyPatch, ends: str
) -> None:
    """The driver stops the link once intake is over. A link that reached its target is already
    leaving then: cancelling it cut its /disconnect-env short, every serve run that finished."""
    api = _SlowLeaveAPI()
    link = _link(tmp_path, api)

    async def nothing() -> None:
        return None

    async def poll() -> None:
        if ends == "polling":
            await asyncio.sleep(3600)

    monkeypatch.setattr(link, "_register", nothing)
    monkeypatch.setattr(link, "_server_info", nothing)
    monkeypatch.setattr(link, "_poll_loop", poll)
    task = link.start()
    await asyncio.sleep(0.05)  # "by itself": inside its leave now; "polling": still polling
    await asyncio.wait_for(link.stop(), 5)
    assert task.done()
    assert api.calls == [3] and not link.registered  # run-api was told
    assert warnings_seen == []
