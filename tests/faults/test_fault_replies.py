"""Bad inference replies (issue 19, point 5): malformed 200 replies are counted server errors
with their cause (never ``RetryError[<Future ...>]``) and their rollouts are not kept; a server
that answers only garbage stops intake with a fatal error; a drip-feeding server is cut by the
total per-request timeout; an oversized reply is refused by the size cap."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import openai
import pytest

from hermes_console.runtime.servers import ServerCounters, _wrap_transport
from tests.faults.bad_server import BadServer
from tests.faults.cli_stop_helpers import whole_lines
from tests.faults.faults_helpers import fault_spec

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def bad(request: pytest.FixtureRequest) -> Iterator[BadServer]:
    server = BadServer(request.param).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("bad, cause", [("garbage", "body is not JSON"), ("nochoices", "no choices")], indirect=["bad"])
def test_malformed_200_replies_are_counted_with_the_cause_and_never_kept(bad, cause, tmp_path, run):
    r = run(fault_spec(bad, tmp_path, total_steps=1, group_size=1, max_turns=2))
    r.until_done_items(1, 60)
    r.assert_accounted()
    a = r.state.accounting
    assert a.completed == 0 and a.dropped.get("rollout_error") == 1, a
    [drop] = r.of("item_dropped")
    assert "malformed reply" in drop.detail and cause in drop.detail, drop.detail
    errors = [e.error for e in r.of("rollout_finished")]
    assert errors and all("malformed reply" in e and "RetryError[" not in e for e in errors), errors
    # Counted per server, with the cause.
    r.until(
        lambda s: s.servers and s.servers[0]["errors"] >= 1 and s.servers[0]["transport_errors"] >= 1,
        15,
        "server errors counted",
    )
    row = r.state.servers[0]
    assert cause in row["last_error"] and cause in row["last_transport_error"], row
    assert bad.requests >= 1
    assert whole_lines(Path(r.state.run.jsonl_path)) == []  # nothing kept
    r.stop_clean()


@pytest.mark.parametrize("bad", ["garbage"], indirect=True)
def test_a_server_answering_only_garbage_stops_intake_with_a_fatal_error(bad, tmp_path, run):
    r = run(fault_spec(bad, tmp_path, total_steps=20, group_size=4, max_turns=2, max_in_flight=2))
    r.until(lambda s: s.status == "error", 90, "the run stopped with an error")
    detail = r.state.status_detail
    assert "rollouts all failed" in detail and "malformed reply" in detail, detail
    a = r.state.accounting
    assert a.completed == 0 and a.received <= 4, a  # stopped after the first wave, not after 20 items
    r.assert_accounted()
    r.stop_clean()


def _client(url: str, timeout_s: float) -> tuple:
    """An openai client with the console's transport, as servers.instrument() installs it."""
    client = openai.AsyncClient(base_url=f"{url}/v1", api_key="x", timeout=timeout_s, max_retries=0)
    counters = ServerCounters()
    _wrap_transport(SimpleNamespace(openai=client, config=SimpleNamespace(timeout=timeout_s)), counters)
    return client, counters


async def _ask(client: openai.AsyncClient) -> None:
    try:
        await client.chat.completions.create(model="hermes-sim", messages=[{"role": "user", "content": "hi"}])
    finally:
        await client.close()


@pytest.mark.parametrize("bad", ["slowloris"], indirect=True)
def test_a_drip_feeding_server_is_cut_by_the_total_request_timeout(bad):
    # One byte every 0.3 s: httpx's inter-byte read timeout (2 s) never fires on its own.
    client, counters = _client(bad.base_url, timeout_s=2.0)
    with pytest.raises(openai.APITimeoutError):  # the 60 s guard firing would raise TimeoutError instead
        asyncio.run(asyncio.wait_for(_ask(client), 60))
    assert counters.transport_errors == 1
    assert "total per-request timeout" in counters.last_transport_error


@pytest.mark.parametrize("bad", ["huge"], indirect=True)
def test_an_oversized_reply_is_refused_by_the_size_cap(bad):
    client, counters = _client(bad.base_url, timeout_s=30.0)
    with pytest.raises(openai.InternalServerError, match="larger than"):
        asyncio.run(asyncio.wait_for(_ask(client), 60))
    assert counters.transport_errors == 1 and "reply larger than" in counters.last_transport_error
