"""Several inference servers: per-server stats in ConsoleState, and a server that
dies mid-run is marked unhealthy and routed around while the run finishes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hermes_console.runtime.health import DOWN_AFTER, _probe_url, is_connection_failure
from tests.scaleout.scaleout_helpers import identity_holds, spec_for

pytestmark = pytest.mark.timeout(120)


def _two_server_yaml(tmp_path: Path, a, b) -> str:
    path = tmp_path / "servers.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "openai": [
                    {"base_url": f"{a.base_url}/v1", "model_name": "hermes-sim", "api_key": "x", "timeout": 10},
                    {"base_url": f"{b.base_url}/v1", "model_name": "hermes-sim", "api_key": "x", "timeout": 10},
                ]
            }
        )
    )
    return str(path)


def _row(state, url):
    [row] = [r for r in state.servers if r["url"].startswith(url)]
    return row


def test_killing_one_of_two_servers_does_not_stop_the_run(tmp_path, sims, live):
    a, b = sims(latency_ms=60.0, seed=1), sims(latency_ms=60.0, seed=2)
    a_url, b_url = a.base_url, b.base_url
    spec = spec_for(
        tmp_path,
        "--env.total_steps",
        "10",
        config_path=_two_server_yaml(tmp_path, a, b),
        max_in_flight=3,
        stats_interval_s=0.25,
    )
    p = live(spec)
    p.until(lambda s: len(s.servers) == 2 and all(r["requests"] > 0 for r in s.servers), 60, "both servers in use")
    assert all(r["healthy"] for r in p.state.servers)
    b.stop()  # server B dies mid-run (connections refused from now on)
    p.until(lambda s: not _row(s, b_url)["healthy"], 60, "server B marked unhealthy")
    dead = _row(p.state, b_url)
    assert dead["connection_failures"] >= DOWN_AFTER and dead["down_since"] is not None
    assert "Connection" in (dead["last_connection_failure"] or "")
    served_by_a = _row(p.state, a_url)["requests"]

    p.until(lambda s: s.status == "finished", 90, "the run finishes on server A alone")
    acc = p.state.accounting
    assert identity_holds(p) and acc.completed + acc.dropped_total + acc.failed == 10
    assert acc.completed >= 7, acc  # a rollout caught mid-turn may fail; the run does not stall
    alive, dead = _row(p.state, a_url), _row(p.state, b_url)
    assert alive["healthy"] and alive["requests"] > served_by_a
    assert not dead["healthy"] and dead["connection_failures"] >= DOWN_AFTER
    warnings = [e.message for e in p.of("log_record") if e.logger == "servers"]
    assert any("marked unhealthy" in m and b_url in m for m in warnings)


def test_a_revived_server_is_put_back_in_rotation(tmp_path, sims, live):
    a, b = sims(latency_ms=60.0, seed=1), sims(latency_ms=60.0, seed=2)
    b_url = b.base_url
    port = int(b_url.rsplit(":", 1)[1])
    spec = spec_for(
        tmp_path,
        "--env.total_steps",
        "1000",
        config_path=_two_server_yaml(tmp_path, a, b),
        max_in_flight=3,
        stats_interval_s=0.25,
    )
    p = live(spec, exit_when_finished=False)
    p.until(lambda s: len(s.servers) == 2 and all(r["requests"] > 0 for r in s.servers), 60, "both servers in use")
    b.stop()
    p.until(lambda s: not _row(s, b_url)["healthy"], 60, "B unhealthy")
    sims(latency_ms=60.0, seed=3, port=port)  # B comes back on the same port
    p.until(lambda s: _row(s, b_url)["healthy"], 30, "B healthy again (probe)")
    before = _row(p.state, b_url)["requests"]
    p.until(lambda s: _row(s, b_url)["requests"] > before, 30, "B serves again")
    assert any("back in rotation" in e.message for e in p.of("log_record"))


def test_connection_failure_classification_and_probe_urls():
    import httpx
    import openai

    req = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    assert is_connection_failure(openai.APIConnectionError(request=req))
    assert is_connection_failure(openai.APITimeoutError(request=req))
    assert is_connection_failure(ConnectionRefusedError())
    assert is_connection_failure(TimeoutError())
    resp = httpx.Response(500, request=req)
    assert not is_connection_failure(openai.InternalServerError("boom", response=resp, body=None))
    assert not is_connection_failure(ValueError("bad reply"))

    class S:  # stand-in server with only a config
        def __init__(self, url, kind):
            self.config = type("C", (), {"base_url": url, "server_type": kind})()

    assert _probe_url(S("http://h:1/v1", "openai")) == "http://h:1/v1/models"
    assert _probe_url(S("http://h:1/v1", "vllm")) == "http://h:1/health"
    assert _probe_url(S("http://h:1", "sglang")) == "http://h:1/health"
