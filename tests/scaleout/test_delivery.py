"""Delivery to the trainer: once, or recorded as not delivered / unknown — never twice, never
silently lost. A fault proxy sits between the host and a real run-api; the oracle is the
trainer's own received groups (hashed) against the host's groups.jsonl and spool.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from hermes_console.runtime import trainer as trainer_mod
from hermes_console_dev.fake_trainer import TrainerRun, run_trainer
from tests.scaleout.fault_proxy import FaultProxy
from tests.scaleout.scaleout_helpers import RunAPI, identity_holds, link_env_config, spec_for

pytestmark = pytest.mark.timeout(240)


def _hash(group: dict[str, Any]) -> str:
    return hashlib.sha1(json.dumps(group["tokens"]).encode()).hexdigest()


def _jsonl_hashes(path: Path) -> list[str]:
    return [_hash(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


class _Trainer:
    """The stand-in trainer in a thread (it talks to run-api directly, not through the proxy)."""

    def __init__(self, url: str, steps: int, deadline_s: float = 120.0) -> None:
        self.result: TrainerRun = TrainerRun()
        self._thread = threading.Thread(target=self._run, args=(url, steps, deadline_s), daemon=True)
        self._thread.start()

    def _run(self, url: str, steps: int, deadline_s: float) -> None:
        self.result = asyncio.run(run_trainer(url, steps=steps, batch_size=8, deadline_s=deadline_s, reset=False))

    def join(self, timeout: float = 150.0) -> TrainerRun:
        self._thread.join(timeout)
        return self.result

    def received(self) -> list[str]:
        return [_hash(g) for batch in self.result.batches for g in batch]


@pytest.fixture
def proxy(run_api):
    fp = FaultProxy(run_api.url).start()
    try:
        yield fp
    finally:
        fp.stop()


def _serve(tmp_path, sims, live, api_url: str, *flags: str, steps: int = 3, max_in_flight: int = 3):
    sim = sims(latency_ms=40.0)
    p = live(
        spec_for(
            tmp_path,
            "--openai.base_url",
            f"{sim.base_url}/v1",
            "--env.rollout_server_url",
            api_url,
            "--env.total_steps",
            str(steps),
            *flags,
            mode="serve",
            max_in_flight=max_in_flight,
        )
    )
    p.until(lambda s: s.trainer is not None and s.trainer.state == "waiting", 60, "waiting for the trainer")
    return p


def test_an_ambiguous_reply_is_never_re_posted(tmp_path, sims, live, run_api, proxy):
    """run-api stored the group but the client saw a 504: recorded as unknown, not posted again."""
    proxy.mode = "store_then_504"
    p = _serve(tmp_path, sims, live, proxy.url, steps=2)
    trainer = _Trainer(run_api.url, steps=2)
    p.until(lambda s: s.status in ("finished", "error"), 150, "serve run ends")
    got = trainer.join()
    received = trainer.received()
    assert len(received) == len(set(received)), "the trainer received a group twice"
    unknown = [e for e in p.of("item_failed") if e.error_kind == "send_unknown"]
    assert proxy.last_upstream[0] == 200, proxy.last_upstream  # run-api did store what it was given
    assert unknown and proxy.posts_forwarded == len(unknown) == proxy.posts_answered_504  # one post per group
    assert all("delivery unknown" in e.error and "504" in e.error for e in unknown)
    spooled = [json.loads(line) for line in (tmp_path / "run" / "unsent.jsonl").read_text().splitlines()]
    assert sorted(r["group_id"] for r in spooled) == sorted(e.group_id for e in unknown)
    assert {r["outcome"] for r in spooled} == {"unknown"}
    jsonl = set(_jsonl_hashes(tmp_path / "run" / "groups.jsonl"))
    assert set(received) <= jsonl and {_hash(r["group"]) for r in spooled} <= jsonl
    assert p.state.trainer.send_unknown == len(unknown) and identity_holds(p)
    assert len(got.batches) == 2


def test_an_outage_pauses_intake_and_holds_groups_until_the_api_is_back(tmp_path, sims, live, run_api, proxy):
    p = _serve(tmp_path, sims, live, proxy.url, steps=4, max_in_flight=4)
    trainer = _Trainer(run_api.url, steps=4)
    p.until(lambda s: s.trainer.groups_sent >= 1 and s.accounting.in_flight >= 1, 90, "sending, more in flight")
    proxy.down()
    p.until(lambda s: s.trainer.state == "unreachable", 30, "the host sees the outage")
    received_at_outage = p.state.accounting.received
    p.sleep(3.0)  # groups in flight finish and try to send meanwhile
    assert p.state.accounting.received == received_at_outage  # no new work while the API is away
    assert "intake paused" in p.state.trainer.detail
    proxy.up()
    p.until(lambda s: s.status in ("finished", "error"), 150, "serve run ends")
    trainer.join()
    received = trainer.received()
    assert len(received) == len(set(received))  # never stored twice
    # A post the outage cut mid-request is "delivery unknown" (run-api may have stored it): not re-posted, kept in
    # unsent.jsonl. That is the only way a group may miss the trainer; nothing is lost (seen under two CPU hogs).
    send_failed = [e for e in p.of("item_failed") if e.error_kind.startswith("send")]
    assert all(e.error_kind == "send_unknown" for e in send_failed), send_failed
    unsent = tmp_path / "run" / "unsent.jsonl"
    spooled = [json.loads(line) for line in unsent.read_text().splitlines()] if unsent.exists() else []
    assert sorted(x["group_id"] for x in spooled) == sorted(e.group_id for e in send_failed)
    assert all(x["outcome"] == "unknown" for x in spooled)
    kept = _jsonl_hashes(tmp_path / "run" / "groups.jsonl")
    assert set(received) <= set(kept)
    assert set(kept) <= set(received) | {_hash(x["group"]) for x in spooled}  # delivered, or on disk
    assert p.state.status == "finished" and identity_holds(p)
    # every completed group went through exactly one successful post (a cut one may or may not have been forwarded)
    assert p.state.accounting.completed <= proxy.posts_forwarded <= p.state.accounting.completed + len(send_failed)


def test_an_api_that_rejects_every_group_stops_the_run_instead_of_burning_rollouts(
    tmp_path, sims, live, run_api, proxy
):
    proxy.mode = "reject_400"
    p = _serve(tmp_path, sims, live, proxy.url, steps=20, max_in_flight=2)
    _Trainer(run_api.url, steps=1, deadline_s=20)  # registers, so the host starts working
    p.until(lambda s: s.status == "error", 120, "run stops with an error")
    assert "rejected 3 groups in a row" in p.state.status_detail and "HTTP 400" in p.state.status_detail
    failed = [e for e in p.of("item_failed") if e.error_kind == "send"]
    assert 3 <= len(failed) <= 3 + 2  # the limit, plus what was already in flight
    assert p.state.accounting.received <= len(failed) + 2 and identity_holds(p)
    spooled = (tmp_path / "run" / "unsent.jsonl").read_text().splitlines()
    assert len(spooled) == len(failed) and all(json.loads(x)["outcome"] == "rejected" for x in spooled)


def test_a_restarted_run_api_is_registered_with_again(tmp_path, sims, live, run_api, proxy, monkeypatch):
    monkeypatch.setattr(trainer_mod, "REGISTER_RETRY_S", 0.3)
    p = _serve(tmp_path, sims, live, proxy.url, steps=50, max_in_flight=2)
    first = _Trainer(run_api.url, steps=1, deadline_s=30)
    p.until(lambda s: s.trainer.groups_sent >= 1, 90, "first run-api receives groups")
    first.join()
    old_env_id = p.host.env.env_id
    fresh = RunAPI(tmp_path).start()  # "the same run-api, restarted": same address, empty state
    try:
        proxy.retarget(fresh.url)
        second = _Trainer(fresh.url, steps=2, deadline_s=90)
        p.until(
            lambda s: s.trainer.reregistrations >= 1 and s.trainer.state in ("running", "backpressure"),
            90,
            "registered with the restarted run-api",
        )
        got = second.join()
        p.pump()
        # the fresh run-api's trainer is fed by this host (else: what the host was doing)
        assert len(got.batches) == 2, (
            f"trainer={p.state.trainer}; status={p.state.status} {p.state.status_detail!r}; "
            f"accounting={p.state.accounting}; proxy forwarded={proxy.posts_forwarded} last={proxy.last_upstream}"
        )
        new_env_id = p.host.env.env_id
        assert {g["env_id"] for b in got.batches for g in b} == {new_env_id}
        received = [_hash(g) for b in got.batches for g in b]
        assert len(received) == len(set(received))
        assert old_env_id is not None and new_env_id is not None
    finally:
        fresh.stop()


class _SlowAPI:
    """A trainer client whose answers the test releases one by one: a post connected before an
    outage can answer after the host has marked the outage (what FaultProxy.down() allows)."""

    def __init__(self) -> None:
        self.down = False
        self.post_connected = asyncio.Event()
        self.release_post = asyncio.Event()

    async def send(self, scored: Any) -> None:
        self.post_connected.set()
        await self.release_post.wait()  # connected before the outage; answers whenever released

    async def status_env(self, env_id: int) -> Any:
        from hermes_console.runtime.trainer_api import NOT_SENT, EnvStatus, TrainerAPIError

        if self.down:
            raise TrainerAPIError("connection refused", retryable=True, outcome=NOT_SENT)
        return EnvStatus(queue_size=0, current_step=0)

    async def status(self) -> Any:
        from hermes_console.runtime.trainer_api import GlobalStatus

        return GlobalStatus()

    async def close(self) -> None:
        pass


async def test_an_answer_to_a_request_sent_before_the_outage_does_not_reopen_intake(tmp_path, monkeypatch):
    """Only a request begun after the outage was seen proves the API is back. A post that was
    connected before it and answers later says nothing about now (the intermittent 6-vs-5 seen
    in the outage test above: intake reopened until the next failing poll)."""
    from types import SimpleNamespace

    from hermes_console.runtime.intake import IntakeGate

    monkeypatch.setattr(trainer_mod, "REGISTER_RETRY_S", 0.05)
    cfg = link_env_config(group_size=2, total_steps=100)
    env = SimpleNamespace(config=cfg, env_id=0, server=SimpleNamespace(update_weight=_noop_weight))
    link = trainer_mod.TrainerLink(env, IntakeGate(lambda: 0, 4), tmp_path, poll_s=0.05)
    api = _SlowAPI()
    link.client = api  # type: ignore[assignment]
    link.registered = True
    poller = asyncio.create_task(link._poll_loop())
    try:
        await _until(lambda: link.admits(0))
        post = asyncio.create_task(link.send({"tokens": [[1]], "group_id": "g"}))
        await asyncio.wait_for(api.post_connected.wait(), 5)
        api.down = True
        await _until(lambda: link._state == "unreachable")
        api.release_post.set()  # the old post answers: delivered, but the API is still away
        await asyncio.wait_for(post, 5)
        assert link.c.groups_sent == 1
        await asyncio.sleep(0.01)
        assert not link.admits(0) and link._state == "unreachable", link._detail
        api.down = False  # a poll begun after the outage answers: now intake reopens
        await _until(lambda: link.admits(0))
        assert link._state == "running"
    finally:
        poller.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await poller


async def _noop_weight(weight: float) -> None:
    pass


async def _until(cond: Any, timeout_s: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not cond():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)
