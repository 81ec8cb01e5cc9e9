"""``--listen ADDR``: a headless host's events, controls and metrics on a socket.

Off by default. ``ADDR`` is ``unix:PATH`` or ``[HOST:]PORT`` (port 0 = the OS picks;
host defaults to loopback). One aiohttp server on its own thread and loop (a busy
env loop never delays a scrape), serving:

- ``GET /events``: JSON lines. First ``{"hello": {...}}`` (session id, host name, pid),
  then a snapshot of what happened so far (so a late attacher sees the run), then every
  new event live, each as ``{"seq": N, "event": {...}}``; ``{"ping": ts}`` every few
  seconds so a client notices a dead host. ``?since=N`` (with ``&session=ID``) sends only
  events after ``seq`` N when the session matches: what a reconnecting console missed.
- ``POST /control/<command>`` with a JSON body of keyword arguments: the RuntimeAPI
  commands the UI sends (pause, resume, cancel_in_flight, switch_phase, evaluate, stop,
  kill_sandbox, extend_sandbox, run_in_sandbox, sandbox_details). Answers
  ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": "..."}``.
- ``GET /metrics``: Prometheus text format (groups, rollouts, errors, trainer, paused).
- ``GET /info``: who this host is.

Access: a token (``--listen-token-file``, sent as ``Authorization: Bearer TOKEN``) is
required for everything except reads from the same machine (loopback TCP or the unix
socket, which is created 0600). Controls always need the token. A TCP address that
is not loopback is refused at start without a token.

The snapshot is built from a bounded history: lifecycle events (items, groups,
rollouts, sandboxes, evaluations) up to ``MAX_CORE_EVENTS``, the latest few of the
status-like kinds, and the last ``MAX_DETAIL_EVENTS`` turns/tool calls/logs. Past the
core bound the oldest lifecycle events are forgotten (a very long run's late attacher
sees recent history; ``/metrics`` counts everything).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import json
import logging
import math
import os
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from environments.events import Event
from hermes_console.runtime.errors import UsageError
from hermes_console.runtime.sinks import dumps_strict
from hermes_console.runtime.state import ConsoleState

logger = logging.getLogger(__name__)

PUMP_S = 0.1  # how often new events are moved from the tap to clients
PING_S = 2.0
MAX_CORE_EVENTS = 400_000
MAX_DETAIL_EVENTS = 20_000
MAX_CLIENT_BACKLOG = (
    3_000  # batches (one per pump, ~5 min): a client this far behind is cut; it reconnects with ?since=
)
LATEST_KINDS = {
    "run_configured": 4,
    "runtime_status": 64,
    "trainer_status": 1_000,
    "wandb_status": 4,
    "server_stats": 1,
    "loop_lag": 1,
    "phase_switch": 16,
}
DETAIL_KINDS = {
    "turn_started",
    "turn_finished",
    "tool_call_started",
    "tool_call_finished",
    "sandbox_command_started",
    "sandbox_command_finished",
    "log_record",
}
COMMANDS = {
    "pause": (),
    "resume": (),
    "cancel_in_flight": (),
    "switch_phase": ("phase", "cancel_in_flight"),
    "evaluate": ("pause_intake",),
    "stop": ("drain_deadline_s",),
    "kill_sandbox": ("task_id",),
    "extend_sandbox": ("task_id", "seconds"),
    "run_in_sandbox": ("task_id", "command", "timeout_s"),
    "sandbox_details": ("task_id",),
}


# --------------------------------------------------------------------------- addresses


@dataclass(frozen=True)
class ListenAddress:
    """Where to listen: a unix socket path, or a TCP host and port."""

    unix_path: str | None = None
    host: str = "127.0.0.1"
    port: int = 0

    @property
    def is_unix(self) -> bool:
        return self.unix_path is not None

    def __str__(self) -> str:
        if self.unix_path is not None:
            return f"unix:{self.unix_path}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def is_loopback(self) -> bool:
        return self.is_unix or _is_loopback(self.host)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _unix_socket_answers(path: str) -> bool:
    """Is a live process accepting on this socket path (not just a stale file)?"""
    if not os.path.exists(path):
        return False
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()


def parse_address(text: str, what: str = "--listen") -> ListenAddress:
    """``unix:PATH`` | ``HOST:PORT`` | ``PORT`` | ``[IPv6]:PORT``."""
    raw = (text or "").strip()
    expected = "expected unix:PATH, HOST:PORT or PORT (port 0 = any free port), e.g. 127.0.0.1:7070"
    if raw.startswith("unix:"):
        path = raw[len("unix:") :]
        if not path:
            raise UsageError(f"{what} {text!r}: the unix socket path is empty; {expected}")
        return ListenAddress(unix_path=str(Path(path).expanduser()))
    host, _, port_text = raw.rpartition(":")
    if not host:
        host = "127.0.0.1"
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        port = int(port_text)
    except ValueError:
        raise UsageError(f"{what} {text!r}: the port {port_text!r} is not a number; {expected}") from None
    if not 0 <= port <= 65535:
        raise UsageError(f"{what} {text!r}: port {port} is out of range 0-65535; {expected}")
    return ListenAddress(host=host, port=port)


def read_token_file(path: str, what: str = "--listen-token-file") -> str:
    try:
        token = Path(path).expanduser().read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise UsageError(
            f"{what} {path!r}: cannot be read ({exc.strerror or exc}); "
            "expected a file holding the access token on one line"
        ) from None
    if not token or len(token) < 8 or any(c.isspace() for c in token):
        raise UsageError(f"{what} {path!r}: expected one token of at least 8 characters without spaces")
    return token


# --------------------------------------------------------------------------- history


class History:
    """What a late attacher is sent first (module doc). Only the listener thread uses it."""

    def __init__(self) -> None:
        self.core: deque[tuple[int, Event]] = deque()
        self.detail: deque[tuple[int, Event]] = deque(maxlen=MAX_DETAIL_EVENTS)
        self.latest: dict[str, deque[tuple[int, Event]]] = {k: deque(maxlen=n) for k, n in LATEST_KINDS.items()}
        self.forgotten = 0

    def add(self, seq: int, event: Event) -> None:
        kind = event.kind
        if kind in self.latest:
            self.latest[kind].append((seq, event))
        elif kind in DETAIL_KINDS:
            self.detail.append((seq, event))
        else:
            self.core.append((seq, event))
            if len(self.core) > MAX_CORE_EVENTS:
                self.core.popleft()
                self.forgotten += 1

    def snapshot(self, after: int = 0) -> list[tuple[int, Event]]:
        items = [p for p in self.core if p[0] > after] + [p for p in self.detail if p[0] > after]
        for ring in self.latest.values():
            items.extend(p for p in ring if p[0] > after)
        items.sort(key=lambda p: p[0])
        return items


# --------------------------------------------------------------------------- metrics


def _label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _num(value: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "NaN"
    if isinstance(value, float) and math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if isinstance(value, float) else str(int(value))


def trainer_counts(state: ConsoleState) -> dict[str, int]:
    """Groups posted to the trainer API: sent = confirmed + unknown + failed."""
    t = state.trainer
    if t is None:
        return {"sent": 0, "confirmed": 0, "unknown": 0, "failed": 0}
    failed = max(0, t.send_errors - t.send_unknown)
    return {
        "sent": t.groups_sent + t.send_errors,
        "confirmed": t.groups_sent,
        "unknown": t.send_unknown,
        "failed": failed,
    }


def render_metrics(state: ConsoleState, name: str, now: float) -> str:
    """Prometheus text exposition format 0.0.4 of one host's state."""
    acc = state.accounting
    out: list[str] = []

    def metric(mname: str, mtype: str, help_text: str, samples: list[tuple[dict[str, str], float]]) -> None:
        out.append(f"# HELP {mname} {help_text}")
        out.append(f"# TYPE {mname} {mtype}")
        for labels, value in samples:
            label_text = ",".join(f'{k}="{_label_value(str(v))}"' for k, v in labels.items())
            out.append(f"{mname}{{{label_text}}} {_num(value)}" if label_text else f"{mname} {_num(value)}")

    host = {"host": name}
    metric("hermes_up", "gauge", "1 while the host's listener answers", [(host, 1)])
    metric(
        "hermes_info",
        "gauge",
        "what this host runs (labels)",
        [
            (
                {
                    **host,
                    "env": state.run.env_name,
                    "mode": state.run.mode,
                    "phase": str(state.run.phase),
                    "shard": state.run.shard.split(" ")[0] if state.run.shard else "",
                    "status": state.status,
                },
                1,
            )
        ],
    )
    groups = [
        ("received", acc.received),
        ("completed", acc.completed),
        ("dropped", acc.dropped_total),
        ("failed", acc.failed),
        ("cancelled", acc.cancelled),
    ]
    metric(
        "hermes_groups_total",
        "counter",
        "items taken and how their groups ended",
        [({**host, "outcome": k}, v) for k, v in groups],
    )
    metric("hermes_groups_in_flight", "gauge", "groups being rolled out now", [(host, acc.in_flight)])
    metric(
        "hermes_paused",
        "gauge",
        "1 while intake is paused (operator or drain)",
        [(host, 1 if state.status in ("paused", "draining") else 0)],
    )
    metric("hermes_rollouts_finished_total", "counter", "rollouts finished", [(host, state.rollouts_finished)])
    metric(
        "hermes_rollouts_per_second",
        "gauge",
        "finished rollouts per second (10 s window)",
        [(host, round(state.rollouts_per_s(now), 4))],
    )
    rs = state.reward_summary()
    metric("hermes_reward_mean", "gauge", "mean reward of recent rollouts", [(host, rs["mean"])])
    metric("hermes_tool_calls_total", "counter", "tool calls made", [(host, state.tool_calls_total)])
    metric("hermes_tool_errors_total", "counter", "tool calls that failed", [(host, state.tool_errors_total)])
    errors = {k: v for k, v in state.errors_by_kind.items() if not k.startswith("dropped:")}
    metric(
        "hermes_errors_total",
        "counter",
        "errors by kind",
        [({**host, "kind": k}, v) for k, v in sorted(errors.items())] or [({**host, "kind": "none"}, 0)],
    )
    tc = trainer_counts(state)
    metric(
        "hermes_trainer_groups_total",
        "counter",
        "groups posted to the trainer API, by outcome",
        [({**host, "outcome": k}, v) for k, v in tc.items()],
    )
    metric(
        "hermes_trainer_step",
        "gauge",
        "the trainer's current step",
        [(host, state.trainer.current_step if state.trainer else 0)],
    )
    metric("hermes_loop_lag_ms", "gauge", "how late the env loop woke up last", [(host, state.loop_lag_ms)])
    return "\n".join(out) + "\n"


def _write_whole(path: Path, text: str) -> None:
    """Whole or absent: a reader polling for the file never sees it half written."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


# --------------------------------------------------------------------------- the listener


class Listener:
    """Serves one runtime (module doc). ``attach()`` before ``runtime.start()`` so the
    snapshot holds the run from its first event; ``start()`` binds and returns the address."""

    def __init__(self, runtime: Any, address: ListenAddress, token: str | None = None, name: str | None = None) -> None:
        if not address.is_loopback and not token:
            raise UsageError(
                f"--listen {address}: that address is reachable from other machines; give "
                "--listen-token-file FILE (or listen on loopback / a unix socket and use an ssh tunnel)"
            )
        self.runtime = runtime
        self.address = address
        self.token = token
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.session = uuid.uuid4().hex
        self.bound: str | None = None
        self.state = ConsoleState()
        self.history = History()
        self.seq = 0
        self._inbox: deque[Event] = deque()
        self._clients: set[asyncio.Queue[Any]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._stopping: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._listen_json: Path | None = None

    # ---- wiring

    def attach(self) -> None:
        self.runtime.queue.add_tap(self._inbox.append)

    def start(self, timeout: float = 15.0) -> str:
        self._started.clear()
        self._error = None
        self._thread = threading.Thread(target=self._thread_main, name="hermes-listener", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout):
            raise UsageError(f"--listen {self.address}: the listener did not start within {timeout:g}s")
        if self._error is not None:
            raise UsageError(f"--listen {self.address}: cannot listen there ({self._error})")
        assert self.bound is not None
        return self.bound

    def stop(self, timeout: float = 5.0) -> None:
        loop = self._loop
        if loop is not None and self._stopping is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._stopping.set)
        if self._thread is not None:
            self._thread.join(timeout)
        if self.address.is_unix:
            with contextlib.suppress(OSError):
                os.unlink(self.address.unix_path or "")
        if self._listen_json is not None:  # the address is gone: a stale file would mislead attach
            with contextlib.suppress(OSError):
                data = json.loads(self._listen_json.read_text())
                data["stopped_at"] = time.time()
                _write_whole(self._listen_json, json.dumps(data, indent=1) + "\n")

    # ---- thread

    def _thread_main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._main())
        except BaseException as exc:  # noqa: BLE001 - reported through start()
            self._error = self._error or exc
            self._started.set()
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            asyncio.set_event_loop(None)
            loop.close()

    async def _main(self) -> None:
        from aiohttp import web

        self._stopping = asyncio.Event()
        app = web.Application()
        app.router.add_get("/events", self._events)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/info", self._info)
        app.router.add_post("/control/{command}", self._control)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        try:
            try:
                if self.address.is_unix:
                    path = self.address.unix_path or ""
                    if _unix_socket_answers(path):
                        raise OSError(f"another process is listening on {path}")
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)  # a stale socket of an earlier run
                    Path(path).parent.mkdir(parents=True, exist_ok=True)
                    old = os.umask(0o177)  # the socket is created 0600: only this user reads
                    try:
                        site: Any = web.UnixSite(runner, path)
                        await site.start()
                    finally:
                        os.umask(old)
                    self.bound = f"unix:{path}"
                else:
                    site = web.TCPSite(runner, self.address.host, self.address.port)
                    await site.start()
                    port = site._server.sockets[0].getsockname()[1]  # port 0: the one the OS chose
                    self.bound = str(ListenAddress(host=self.address.host, port=int(port)))
            except OSError as exc:
                self._error = exc
                self._started.set()
                return
            self._started.set()
            pump = asyncio.get_running_loop().create_task(self._pump())
            await self._stopping.wait()
            pump.cancel()
            with contextlib.suppress(BaseException):
                await pump
            self._pump_once()  # the last events (the final status) reach attached consoles
            for q in list(self._clients):
                q.put_nowait(None)
            await asyncio.sleep(0.2)
        finally:
            await runner.cleanup()

    async def _pump(self) -> None:
        while True:
            self._pump_once()
            self._maybe_write_listen_json()
            await asyncio.sleep(PUMP_S)

    def _pump_once(self) -> None:
        pop = self._inbox.popleft
        batch: list[tuple[int, Event]] = []
        while True:
            try:
                event = pop()
            except IndexError:
                break
            self.seq += 1
            try:
                self.state.apply(event)
            except Exception:
                logger.exception("listener: folding %s failed", event.kind)
            self.history.add(self.seq, event)
            batch.append((self.seq, event))
        if not batch:
            return
        for q in list(self._clients):
            if q.qsize() > MAX_CLIENT_BACKLOG:
                q.put_nowait(None)  # too slow: cut it; it reconnects and catches up with ?since=
                self._clients.discard(q)
            else:
                q.put_nowait(batch)

    def _maybe_write_listen_json(self) -> None:
        if self._listen_json is not None:
            return
        driver = getattr(self.runtime, "driver", None)
        run_dir = getattr(driver, "run_dir", None)
        if run_dir is None:
            return
        path = Path(run_dir) / "listen.json"
        info = {**self._info_dict(), "token_required_for": "control, and reads from other machines"}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            _write_whole(path, json.dumps(info, indent=1) + "\n")
        except OSError as exc:
            logger.warning("could not write %s: %s (tried again on the next pump)", path, exc)
            return
        self._listen_json = path

    # ---- access

    def _is_local(self, request: Any) -> bool:
        if self.address.is_unix:
            return True
        return _is_loopback(request.remote or "")

    def _refusal(self, request: Any, control: bool) -> tuple[int, str] | None:
        """None when the request may go on, else (HTTP status, reason)."""
        header = request.headers.get("Authorization", "")
        given = header[len("Bearer ") :].strip() if header.startswith("Bearer ") else ""
        if given and self.token and hmac.compare_digest(given.encode(), self.token.encode()):
            return None
        if given:
            return 401, (
                "wrong token: the Authorization bearer token does not match this host's --listen-token-file"
                if self.token
                else "this host has no token (started without --listen-token-file); controls are off"
            )
        if not control and self._is_local(request):
            return None
        if control and not self.token:
            return 403, (
                "controls need a token: start the host with --listen-token-file FILE and attach with --token-file FILE"
            )
        what = "controls" if control else "reads from another machine"
        return 401, f"token required for {what}: send 'Authorization: Bearer TOKEN' (attach --token-file FILE)"

    def _deny(self, request: Any, control: bool) -> Any:
        from aiohttp import web

        refusal = self._refusal(request, control)
        if refusal is None:
            return None
        status, reason = refusal
        return web.json_response({"ok": False, "error": reason}, status=status)

    # ---- handlers

    def _info_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "address": self.bound,
            "session": self.session,
            "pid": os.getpid(),
            "hostname": socket.gethostname(),
            "seq": self.seq,
            "env": self.state.run.env_name,
            "mode": self.state.run.mode,
            "shard": self.state.run.shard,
            "status": self.state.status,
        }

    async def _info(self, request: Any) -> Any:
        from aiohttp import web

        denied = self._deny(request, control=False)
        return denied or web.json_response(self._info_dict())

    async def _metrics(self, request: Any) -> Any:
        from aiohttp import web

        denied = self._deny(request, control=False)
        if denied is not None:
            return denied
        body = render_metrics(self.state, self.name, time.time())
        return web.Response(
            text=body, content_type="text/plain", charset="utf-8", headers={"X-Content-Type-Options": "nosniff"}
        )

    async def _events(self, request: Any) -> Any:
        from aiohttp import web

        denied = self._deny(request, control=False)
        if denied is not None:
            return denied
        since = 0
        if request.query.get("session") == self.session:
            with contextlib.suppress(ValueError):
                since = max(0, int(request.query.get("since", "0")))
        queue: asyncio.Queue[Any] = asyncio.Queue()
        self._pump_once()  # the snapshot is exact up to now; later events come through the queue
        snapshot = self.history.snapshot(after=since)
        self._clients.add(queue)
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        try:
            hello = {
                **self._info_dict(),
                "snapshot_events": len(snapshot),
                "since": since,
                "forgotten": self.history.forgotten,
            }
            await response.write((json.dumps({"hello": hello}) + "\n").encode())
            await self._write_batch(response, snapshot)
            while True:
                try:
                    batch = await asyncio.wait_for(queue.get(), timeout=PING_S)
                except TimeoutError:
                    await response.write((json.dumps({"ping": time.time(), "seq": self.seq}) + "\n").encode())
                    continue
                if batch is None:
                    break
                await self._write_batch(response, batch)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._clients.discard(queue)
        return response

    @staticmethod
    async def _write_batch(response: Any, batch: list[tuple[int, Event]]) -> None:
        chunk: list[str] = []
        for seq, event in batch:
            chunk.append('{"seq": %d, "event": %s}' % (seq, dumps_strict(event.to_dict())))
            if len(chunk) >= 500:
                await response.write(("\n".join(chunk) + "\n").encode())
                chunk = []
        if chunk:
            await response.write(("\n".join(chunk) + "\n").encode())

    async def _control(self, request: Any) -> Any:
        from aiohttp import web

        from hermes_console.runtime.payloads import ControlReply, to_wire

        denied = self._deny(request, control=True)
        if denied is not None:
            return denied
        command = request.match_info["command"]
        if command not in COMMANDS:
            return web.json_response(
                {"ok": False, "error": f"unknown command {command!r}; expected one of {sorted(COMMANDS)}"}, status=404
            )
        try:
            body = await request.json() if request.can_read_body else {}
        except ValueError:
            return web.json_response(
                {
                    "ok": False,
                    "error": f"the body is not JSON; expected an object of arguments {list(COMMANDS[command])}",
                },
                status=400,
            )
        if not isinstance(body, dict) or set(body) - set(COMMANDS[command]):
            return web.json_response(
                {
                    "ok": False,
                    "error": f"{command}: unexpected arguments "
                    f"{sorted(set(body) - set(COMMANDS[command])) if isinstance(body, dict) else body!r}; "
                    f"expected {list(COMMANDS[command])}",
                },
                status=400,
            )
        try:
            future = getattr(self.runtime, command)(**body)
            result = await asyncio.wrap_future(future)
        except Exception as exc:  # noqa: BLE001 - the console shows it as a failed command
            failed = ControlReply(ok=False, error=f"{type(exc).__name__}: {exc}")
            return web.json_response(failed.model_dump(exclude_unset=True), status=409)
        # The payload models go out as the JSON they always were (an attached console parses them back).
        reply = ControlReply(ok=True, result=to_wire(result))
        return web.Response(text=dumps_strict(reply.model_dump(exclude_unset=True)), content_type="application/json")


def start_listener(runtime: Any, listen: str, token_file: str | None, say: Callable[[str], None]) -> Listener:
    """The CLI's entry: parse, attach to ``runtime`` (before it starts), bind, say where."""
    address = parse_address(listen)
    token = read_token_file(token_file) if token_file else None
    listener = Listener(runtime, address, token)
    listener.attach()
    bound = listener.start()
    access = "token required for controls" if token else "read-only (no --listen-token-file: controls are off)"
    say(
        f"hermes-console: listening on {bound} ({access}); attach with: hermes-console attach {bound}"
        + (" --token-file FILE" if token else "")
    )
    return listener
