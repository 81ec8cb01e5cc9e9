"""The host listener (``--listen``) and the attach client, in-process over a stand-in runtime:
address parsing, access rules (token, loopback read-only, unix socket), the snapshot a late
attacher gets, and a host that goes away and comes back (nothing missed, nothing twice)."""

from __future__ import annotations

import json
import os
import stat
import urllib.error
import urllib.request
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from hermes_console.remote.client import FleetRuntime, parse_targets, wait_until
from hermes_console.runtime import events as rev
from hermes_console.runtime.errors import UsageError
from hermes_console.runtime.listener import ListenAddress, Listener, parse_address
from hermes_console.runtime.queue import EventQueue
from hermes_console.runtime.state import ConsoleState

pytestmark = pytest.mark.timeout(60)
TOKEN = "t0ken-for-tests"


class StandIn:
    """The part of RuntimeHost the listener uses: the event queue and the commands."""

    def __init__(self) -> None:
        self.queue = EventQueue()
        self.calls: list[str] = []
        self.driver = None

    def _done(self, name: str, result: Any = None) -> Future[Any]:
        self.calls.append(name)
        f: Future[Any] = Future()
        f.set_result(result)
        return f

    def pause(self) -> Future[None]:
        self.queue.push(rev.RuntimeStatus(status="paused"))
        return self._done("pause")

    def resume(self) -> Future[None]:
        self.queue.push(rev.RuntimeStatus(status="running"))
        return self._done("resume")

    def cancel_in_flight(self) -> Future[int]:
        return self._done("cancel_in_flight", 3)


def _groups(q: EventQueue, start: int, n: int) -> None:
    for i in range(start, start + n):
        q.push(rev.ItemReceived(group_id=f"g{i:04d}"))
        q.push(rev.ItemCompleted(group_id=f"g{i:04d}", scores=[1.0]))


def _request(url: str, token: str = "", method: str = "GET", unix: str = "") -> Any:
    req = urllib.request.Request(
        url,
        method=method,
        data=b"{}" if method == "POST" else None,
        headers={"Authorization": f"Bearer {token}"} if token else {},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_listen_json_is_whole_or_absent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader polls for listen.json (attach, the Slurm/k8s recipes): a write cut short (disk full, a crash)
    must never leave a half file there. Failed on the first version, which wrote the file in place."""
    rt = StandIn()
    rt.driver = type("D", (), {"run_dir": tmp_path / "run"})()
    listener = Listener(rt, parse_address("127.0.0.1:0"), token=TOKEN, name="n1")
    real_write = Path.write_text

    def cut_short(self: Path, data: str, *args: Any, **kwargs: Any) -> int:
        real_write(self, data[: len(data) // 2], *args, **kwargs)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", cut_short)
    listener._maybe_write_listen_json()
    monkeypatch.undo()
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == []  # no half file, no temp file left
    listener._maybe_write_listen_json()  # the next pump tries again and writes it whole
    info = json.loads((tmp_path / "run" / "listen.json").read_text())
    assert info["name"] == "n1"


def test_addresses_and_tokens_are_checked(tmp_path: Path) -> None:
    assert parse_address("0") == ListenAddress(host="127.0.0.1", port=0)
    assert parse_address("10.0.0.5:7070") == ListenAddress(host="10.0.0.5", port=7070)
    assert parse_address("[::1]:80").is_loopback
    assert parse_address(f"unix:{tmp_path}/s.sock").is_unix
    for bad in ("host:port", "1.2.3.4:70000", "unix:"):
        with pytest.raises(UsageError, match="--listen"):
            parse_address(bad)
    with pytest.raises(UsageError, match="reachable from other machines"):
        Listener(StandIn(), parse_address("0.0.0.0:0"))  # no token: refused before binding
    assert [label for label, _ in parse_targets(["127.0.0.1:1", "b=unix:/x=y.sock"])] == ["h0", "b"]
    (tmp_path / "listen.json").write_text(json.dumps({"address": "0.0.0.0:7070", "hostname": "node12"}))
    [(_, from_file)] = parse_targets([str(tmp_path / "listen.json")])
    assert from_file == ListenAddress(host="node12", port=7070)


def test_tcp_access_rules_and_metrics(tmp_path: Path) -> None:
    rt = StandIn()
    listener = Listener(rt, parse_address("127.0.0.1:0"), token=TOKEN, name="n1")
    listener.attach()
    url = f"http://{listener.start()}"
    try:
        _groups(rt.queue, 0, 3)
        assert _request(f"{url}/metrics")[0] == 200  # loopback read: no token needed
        code, body = _request(f"{url}/control/pause", method="POST")
        assert code == 401 and "token required for controls" in json.loads(body)["error"]
        code, body = _request(f"{url}/control/pause", token="not-the-token", method="POST")
        assert code == 401 and "wrong token" in json.loads(body)["error"]
        code, body = _request(f"{url}/metrics", token="not-the-token")  # a wrong token is never ignored
        assert code == 401 and "wrong token" in body
        assert rt.calls == []
        code, body = _request(f"{url}/control/pause", token=TOKEN, method="POST")
        assert code == 200 and json.loads(body) == {"ok": True, "result": None} and rt.calls == ["pause"]
        code, body = _request(f"{url}/control/cancel_in_flight", token=TOKEN, method="POST")
        assert json.loads(body)["result"] == 3
        code, body = _request(f"{url}/control/rm_rf", token=TOKEN, method="POST")
        assert code == 404 and "unknown command" in body
        assert wait_until(lambda: listener.state.status == "paused", 10)
        code, body = _request(f"{url}/metrics")
        assert 'hermes_groups_total{host="n1",outcome="completed"} 3' in body
        assert 'hermes_paused{host="n1"} 1' in body
    finally:
        listener.stop()


def test_no_token_means_read_only(tmp_path: Path) -> None:
    listener = Listener(StandIn(), parse_address("127.0.0.1:0"), token=None)
    listener.attach()
    url = f"http://{listener.start()}"
    try:
        code, body = _request(f"{url}/control/pause", method="POST")
        assert code == 403 and "--listen-token-file" in body
        assert _request(f"{url}/info")[0] == 200
    finally:
        listener.stop()


def _fleet_state(fleet: FleetRuntime, merged: ConsoleState) -> None:
    merged.apply_all(fleet.drain())


def test_late_attach_disconnect_and_resume_over_a_unix_socket(tmp_path: Path) -> None:
    """A late attacher sees the run from its start; the host goes away (shown as
    disconnected, the client keeps going) and comes back: exactly the missed events arrive."""
    sock = tmp_path / "host.sock"
    rt = StandIn()
    listener = Listener(rt, parse_address(f"unix:{sock}"), token=TOKEN, name="n1")
    listener.attach()
    rt.queue.push(rev.RuntimeStatus(status="running"))
    _groups(rt.queue, 0, 5)  # before anyone listens
    listener.start()
    assert stat.S_IMODE(os.stat(sock).st_mode) & 0o077 == 0  # only this user can connect
    with pytest.raises(UsageError, match="another process is listening"):
        Listener(StandIn(), parse_address(f"unix:{sock}")).start()  # a live socket is never taken over
    fleet = FleetRuntime(parse_targets([f"unix:{sock}"]), token=TOKEN)
    merged = ConsoleState()
    fleet.start()
    try:
        host = fleet.hosts[0]
        assert wait_until(lambda: (_fleet_state(fleet, merged), merged.accounting.completed == 5)[1], 20)
        assert host.link == "connected" and merged.status == "running"
        first_session = host.session

        listener.stop()
        assert wait_until(lambda: (_fleet_state(fleet, merged), host.link == "disconnected")[1], 30)
        assert "disconnected" in merged.status_detail
        _groups(rt.queue, 5, 3)  # while nobody listens
        listener.start()  # the same host process: the same session
        assert wait_until(lambda: (_fleet_state(fleet, merged), merged.accounting.completed == 8)[1], 30)
        assert host.session == first_session and host.connects == 2
        _groups(rt.queue, 8, 1)
        assert wait_until(lambda: (_fleet_state(fleet, merged), merged.accounting.completed == 9)[1], 20)
        # nothing twice: received counts every group once, on the host's view and the merged one
        assert merged.accounting.received == host.state.accounting.received == 9
        assert fleet.pause().result(10) is None and rt.calls == ["pause"]
    finally:
        fleet.stop().result(10)
        listener.stop()


def test_wrong_token_is_refused_by_attach(tmp_path: Path) -> None:
    rt = StandIn()
    listener = Listener(rt, parse_address("127.0.0.1:0"), token=TOKEN)
    listener.attach()
    addr = listener.start()
    fleet = FleetRuntime(parse_targets([addr]), token="a-wrong-token")
    merged = ConsoleState()
    fleet.start()
    try:
        host = fleet.hosts[0]
        assert wait_until(lambda: (_fleet_state(fleet, merged), host.link == "refused")[1], 20)
        assert "wrong token" in host.link_detail
        assert any("refused" in r.message and "wrong token" in r.message for r in merged.logs)
        with pytest.raises(RuntimeError, match="refused"):
            fleet.pause().result(10)
        assert rt.calls == []
    finally:
        fleet.stop().result(10)
        listener.stop()


def test_cli_flags_are_checked_before_anything_starts(tmp_path: Path, capsys) -> None:
    from hermes_console.cli import main

    token = tmp_path / "token"
    token.write_text(TOKEN)
    run = ["run", "environments.terminal_tasks", "--headless", "--runs-dir", str(tmp_path)]
    assert main([*run, "--listen-token-file", str(token)]) == 2
    assert "--listen-token-file needs --listen" in capsys.readouterr().err
    assert main([*run, "--listen", "0.0.0.0:0"]) == 2
    assert "reachable from other machines" in capsys.readouterr().err
    assert main([*run, "--listen", "localhost:http"]) == 2
    assert "is not a number" in capsys.readouterr().err
    assert main(["attach", "127.0.0.1:1", "--token-file", str(tmp_path / "missing")]) == 2
    assert "--token-file" in capsys.readouterr().err and not list(tmp_path.glob("*/listen.json"))


def test_a_restarted_host_ends_its_predecessors_groups(tmp_path: Path) -> None:
    """A new process behind the same address (a new session): the old one's unfinished groups
    are ended (cancelled, "restarted"), the new one's run is followed from its first event."""
    sock = tmp_path / "host.sock"
    old = StandIn()
    listener = Listener(old, parse_address(f"unix:{sock}"), token=TOKEN)
    listener.attach()
    _groups(old.queue, 0, 2)
    old.queue.push(rev.ItemReceived(group_id="stuck"))
    listener.start()
    fleet = FleetRuntime(parse_targets([f"unix:{sock}"]), token=TOKEN)
    merged = ConsoleState()
    fleet.start()
    new_listener = None
    try:
        assert wait_until(lambda: (_fleet_state(fleet, merged), merged.accounting.received == 3)[1], 20)
        listener.stop()
        new = StandIn()
        new_listener = Listener(new, parse_address(f"unix:{sock}"), token=TOKEN)
        new_listener.attach()
        _groups(new.queue, 100, 1)
        new_listener.start()
        assert wait_until(lambda: (_fleet_state(fleet, merged), merged.accounting.received == 4)[1], 30)
        a = merged.accounting
        assert (a.completed, a.cancelled, a.in_flight) == (3, 1, 0)
        assert merged.groups["stuck"].reason == "h0 restarted"
        assert fleet.hosts[0].state.accounting.received == 1  # the host's own view starts afresh
    finally:
        fleet.stop().result(10)
        if new_listener is not None:
            new_listener.stop()


def test_commands_go_to_the_filtered_host_or_to_all(tmp_path: Path) -> None:
    rts, listeners, addrs = [], [], []
    for _ in range(2):
        rt = StandIn()
        listener = Listener(rt, parse_address("127.0.0.1:0"), token=TOKEN)
        listener.attach()
        addrs.append(listener.start())
        rts.append(rt)
        listeners.append(listener)
    fleet = FleetRuntime(parse_targets(addrs), token=TOKEN)
    merged = ConsoleState()
    fleet.start()
    try:
        assert wait_until(lambda: (_fleet_state(fleet, merged), all(h.connected for h in fleet.hosts))[1], 20)
        fleet.selected = 1  # the console shows h1 only: `p` pauses h1 only
        fleet.pause().result(10)
        assert [rt.calls for rt in rts] == [[], ["pause"]]
        fleet.command("resume", all_hosts=True).result(10)
        assert [rt.calls for rt in rts] == [["resume"], ["pause", "resume"]]
        fleet.pause(host=0).result(10)
        assert rts[0].calls == ["resume", "pause"]
        assert fleet.cancel_in_flight().result(10) == 3  # to the filtered host: its answer
        fleet.selected = None
        assert fleet.cancel_in_flight().result(10) == 6  # to all: summed
    finally:
        fleet.stop().result(10)
        for listener in listeners:
            listener.stop()
