"""FleetRuntime: the RuntimeAPI the console uses over one or many ``--listen`` hosts.

Each host is followed on a background thread (its own asyncio loop): ``GET /events``
gives a snapshot then live events; a host that goes away is shown as disconnected
and retried, and on reconnect only the events after the last one seen are asked for
(``?since=``). ``drain()`` (the UI thread) folds each host's events into that host's
own :class:`ConsoleState` and returns one merged stream for the console's state:
per-group events with their ids tagged with the host (``ID@LABEL``, see :func:`host_key`;
two hosts may use the same ids, e.g. one host attached twice or replayed runs) when more
than one host is attached, status-like events (status, trainer, servers, loop lag)
replaced by one fleet-wide aggregate, log lines prefixed with the host. Never imports textual.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

from environments.events import Event, event_from_dict
from hermes_console.runtime import events as rev
from hermes_console.runtime.api import CommandUnavailable
from hermes_console.runtime.listener import ListenAddress, parse_address
from hermes_console.runtime.state import ConsoleState

if TYPE_CHECKING:  # the models are imported where a command's answer is parsed (pydantic: import cost)
    from hermes_console.runtime.payloads import DiagnosticResult, EvalMetrics, SandboxDetails

T = TypeVar("T")
RETRY_S = 1.0
REFUSED_RETRY_S = 5.0
READ_TIMEOUT_S = 10.0  # several pings (every 2 s) missed: the host is gone or frozen
COMMAND_TIMEOUT_S = 30.0
AGGREGATED = {"runtime_status", "trainer_status", "server_stats", "loop_lag"}
ID_FIELDS = ("group_id", "rollout_id", "task_id", "eval_id")  # the ids the console's state is keyed by
HOST_SEP = "@"  # ID@LABEL: a suffix, so id prefixes the state relies on ("eval-") still hold
_id_fields_of: dict[type, tuple[str, ...]] = {}


def host_key(raw_id: str, label: str) -> str:
    """The merged console's key for ``raw_id`` of host ``label`` (an empty id stays empty)."""
    return f"{raw_id}{HOST_SEP}{label}" if raw_id else raw_id


def split_host_key(key: str, labels: Iterable[str]) -> tuple[str | None, str]:
    """``(label, raw id)`` of a merged key; ``(None, key)`` when it names none of ``labels``."""
    raw, sep, label = key.rpartition(HOST_SEP)
    if sep and raw and label in labels:
        return label, raw
    return None, key


def tag_event(event: Event, label: str) -> Event:
    """``event`` with every id it carries tagged with host ``label``."""
    fields = _id_fields_of.get(type(event))
    if fields is None:
        fields = _id_fields_of[type(event)] = tuple(f for f in ID_FIELDS if hasattr(event, f))
    changes: dict[str, Any] = {f: host_key(getattr(event, f), label) for f in fields if getattr(event, f)}
    return replace(event, **changes) if changes else event


@dataclass
class ConfirmClock:
    """When the trainer API last confirmed a group from one host, read off the host's
    TrainerStatus stream (``groups_sent`` = groups the API confirmed). Staleness is how
    many trainer steps (and seconds, on the host's own clock) have passed since then."""

    confirmed: int = -1  # groups_sent of the last status seen; -1 = none seen yet
    step: int | None = None  # trainer step of the status where it last rose
    ts: float | None = None
    exact: bool = True  # False: the first status seen already counted groups (confirmed at or before it)

    def observe(self, t: rev.TrainerStatus) -> None:
        if t.groups_sent > max(self.confirmed, 0):
            self.exact = self.confirmed >= 0
            self.step, self.ts = t.current_step, t.ts
        self.confirmed = t.groups_sent

    def staleness(self, t: rev.TrainerStatus | None) -> tuple[int, float, bool] | None:
        """``(steps, seconds, exact)`` since the last confirmed group; None when none was."""
        if t is None or self.step is None or self.ts is None:
            return None
        return max(0, t.current_step - self.step), max(0.0, t.ts - self.ts), self.exact


@dataclass
class HostLink:
    """One attached host, as the console sees it."""

    index: int
    label: str
    address: ListenAddress
    state: ConsoleState = field(default_factory=ConsoleState)
    link: str = "connecting"  # connecting | connected | disconnected | refused
    link_detail: str = ""
    session: str | None = None
    last_seq: int = 0  # the last event seq folded (UI thread); the follower asks from here
    name: str = ""  # the host's own name (hostname:pid)
    connects: int = 0
    confirm: ConfirmClock = field(default_factory=ConfirmClock)

    @property
    def connected(self) -> bool:
        return self.link == "connected"

    @property
    def paused(self) -> bool:
        return self.state.status in ("paused", "draining")


def parse_targets(texts: list[str]) -> list[tuple[str, ListenAddress]]:
    """``[NAME=]ADDR`` each (ADDR may be a host's listen.json); unnamed hosts are h0, h1, ..."""
    out: list[tuple[str, ListenAddress]] = []
    for i, text in enumerate(texts):
        label, sep, addr = text.partition("=")
        if not sep or not label or any(c in label for c in ":/[") or not addr:
            label, addr = f"h{i}", text  # no name given (a path or address may hold "=")
        out.append((label, parse_address(_from_listen_json(addr), what="attach")))
    labels = [label for label, _ in out]
    if len(set(labels)) != len(labels):
        from hermes_console.runtime.errors import UsageError

        raise UsageError(f"attach: host names must be unique, got {labels}")
    return out


def _from_listen_json(addr: str) -> str:
    """``runs/<run>/listen.json`` stands for the address written in it (a wildcard bind
    address becomes the host's name: that is where another machine reaches it)."""
    if not addr.endswith(".json"):
        return addr
    from hermes_console.runtime.errors import UsageError

    try:
        info = json.loads(open(addr, encoding="utf-8").read())
        bound = str(info["address"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f'attach {addr!r}: not a readable listen.json with an "address" ({exc})') from None
    host, _, port = bound.rpartition(":")
    if host in ("0.0.0.0", "[::]") and info.get("hostname"):
        return f"{info['hostname']}:{port}"
    return bound


class FleetRuntime:
    """Implements :class:`hermes_console.runtime.api.RuntimeAPI` over attached hosts."""

    def __init__(self, targets: list[tuple[str, ListenAddress]], token: str | None = None) -> None:
        self.hosts = [HostLink(i, label, address) for i, (label, address) in enumerate(targets)]
        # More than one host: the merged state's ids carry their host (ID@LABEL) and the
        # console shows a host column; one host looks exactly like a local console.
        self.multi_host = len(self.hosts) > 1
        self._labels = frozenset(h.label for h in self.hosts)
        self.host_width = max([4, *(len(h.label) for h in self.hosts)])
        self.token = token
        self.selected: int | None = None  # host filter: commands go to this host only
        self.fatal: BaseException | None = None
        self._inbox: deque[tuple[int, str, Any]] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._loop_ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._done: Future[None] = Future()
        self._sessions: dict[int, Any] = {}
        self._last_status: tuple[str, str] = ("", "")

    # ------------------------------------------------------------------ lifecycle

    @property
    def is_live(self) -> bool:
        return True

    @property
    def done(self) -> Future[None]:
        return self._done

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("FleetRuntime.start() was already called")
        self._thread = threading.Thread(target=self._thread_main, name="hermes-attach", daemon=True)
        self._thread.start()
        self._loop_ready.wait(10.0)

    def stop(self, drain_deadline_s: float = 10.0) -> Future[None]:
        """Detach: the hosts keep running (stop one with :meth:`stop_host`)."""
        loop = self._loop
        if loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._stop.set)
        elif not self._done.done():
            self._done.set_result(None)
        return self._done

    def join(self, timeout: float | None = None) -> bool:
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    def _thread_main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        self._stop = asyncio.Event()
        self._loop_ready.set()
        try:
            loop.run_until_complete(self._main())
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            asyncio.set_event_loop(None)
            loop.close()
            if not self._done.done():
                self._done.set_result(None)

    async def _main(self) -> None:
        assert self._stop is not None
        tasks = [asyncio.get_running_loop().create_task(self._follow(h), name=f"attach-{h.label}") for h in self.hosts]
        await self._stop.wait()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        for session in self._sessions.values():
            with contextlib.suppress(Exception):
                await session.close()

    # ------------------------------------------------------------------ following a host

    def _session_for(self, host: HostLink) -> Any:
        import aiohttp

        session = self._sessions.get(host.index)
        if session is None or session.closed:
            connector = aiohttp.UnixConnector(path=host.address.unix_path) if host.address.is_unix else None
            session = aiohttp.ClientSession(connector=connector)
            self._sessions[host.index] = session
        return session

    def _url(self, host: HostLink, path: str) -> str:
        if host.address.is_unix:
            return f"http://localhost{path}"
        h = host.address.host
        return f"http://{'[' + h + ']' if ':' in h else h}:{host.address.port}{path}"

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def _link(self, host: HostLink, link: str, detail: str = "") -> None:
        self._inbox.append((host.index, "link", (link, detail)))

    async def _follow(self, host: HostLink) -> None:
        import aiohttp

        session_id: str | None = None
        since = 0
        while True:
            wait = RETRY_S
            try:
                params = {"since": str(since), "session": session_id} if session_id else {}
                timeout = aiohttp.ClientTimeout(total=None, connect=5.0, sock_read=READ_TIMEOUT_S)
                async with self._session_for(host).get(
                    self._url(host, "/events"), params=params, headers=self._headers(), timeout=timeout
                ) as resp:
                    if resp.status in (401, 403):
                        reason = await _error_text(resp)
                        self._link(host, "refused", f"HTTP {resp.status}: {reason}")
                        wait = REFUSED_RETRY_S
                        raise _Retry()
                    if resp.status != 200:
                        raise OSError(f"HTTP {resp.status} from /events")
                    async for line in _lines(resp.content):
                        msg = json.loads(line)
                        if "event" in msg:
                            since = int(msg["seq"])
                            self._inbox.append((host.index, "event", (since, event_from_dict(msg["event"]))))
                        elif "hello" in msg:
                            hello = msg["hello"]
                            if session_id is not None and hello.get("session") != session_id:
                                since = 0
                                self._inbox.append((host.index, "restarted", hello))
                            session_id = hello.get("session")
                            self._inbox.append((host.index, "hello", hello))
                            self._link(host, "connected", str(hello.get("name", "")))
                    raise OSError("the host closed the event stream")
            except asyncio.CancelledError:
                raise
            except _Retry:
                pass
            except (TimeoutError, OSError, ValueError, aiohttp.ClientError) as exc:
                detail = str(exc) or type(exc).__name__
                self._link(host, "disconnected", detail)
            await asyncio.sleep(wait)

    # ------------------------------------------------------------------ the UI thread: drain

    def drain(self, max_events: int | None = None) -> list[Event]:
        out: list[Event] = []
        dirty = False
        pop = self._inbox.popleft
        n = len(self._inbox) if max_events is None else min(max_events, len(self._inbox))
        for _ in range(n):
            try:
                index, what, payload = pop()
            except IndexError:
                break
            host = self.hosts[index]
            if what == "event":
                seq, event = payload
                host.last_seq = seq
                host.state.apply(event)
                if event.kind in AGGREGATED:
                    if event.kind == "trainer_status":
                        host.confirm.observe(event)
                    dirty = True
                elif event.kind == "log_record":
                    out.append(replace(event, logger=f"{host.label} {event.logger}"))
                elif event.kind == "run_configured":  # the fleet's run: no one host's shard or jsonl
                    out.append(replace(event, shard="", jsonl_path=None))
                else:
                    out.append(tag_event(event, host.label) if self.multi_host else event)
            elif what == "link":
                link, detail = payload
                if (link, detail) != (host.link, host.link_detail):
                    host.link, host.link_detail = link, detail
                    if link != "connected":
                        level = "ERROR" if link == "refused" else "WARNING"
                        out.append(
                            rev.LogRecord(
                                level=level,
                                logger=f"{host.label} attach",
                                message=f"{host.label} ({host.address}) {link}: {detail}",
                            )
                        )
                    dirty = True
            elif what == "hello":
                host.session = payload.get("session")
                host.name = str(payload.get("name", ""))
                host.connects += 1
            elif what == "restarted":
                out.extend(self._host_restarted(host))
                dirty = True
        if dirty:
            out.extend(self._aggregates())
        return out

    def _host_restarted(self, host: HostLink) -> list[Event]:
        """A new process behind the address: its predecessor's unfinished groups are over."""
        gone = [g.group_id for g in host.state.active_groups()]
        host.state = ConsoleState()
        host.last_seq = 0
        host.confirm = ConfirmClock()
        out: list[Event] = [rev.ItemCancelled(group_id=g, reason=f"{host.label} restarted") for g in gone]
        return [tag_event(e, host.label) for e in out] if self.multi_host else out

    # ------------------------------------------------------------------ host of a merged key

    def split_key(self, key: str) -> tuple[HostLink | None, str]:
        """The host a merged-state id comes from, and the id as that host knows it.
        An untagged id (one host attached, or the console filtered to one host's own
        state) belongs to the filtered host when there is one."""
        label, raw = split_host_key(key, self._labels) if self.multi_host else (None, key)
        if label is not None:
            return next(h for h in self.hosts if h.label == label), raw
        if self.selected is not None:
            return self.hosts[self.selected], key
        return (self.hosts[0], key) if not self.multi_host else (None, key)

    def host_of(self, key: str) -> str:
        """The host column's text for a row keyed by ``key`` ("" when it names no host)."""
        host, _ = self.split_key(key)
        return host.label if host is not None else ""

    def _aggregates(self) -> list[Event]:
        out: list[Event] = []
        status, detail = self.fleet_status()
        if (status, detail) != self._last_status:
            self._last_status = (status, detail)
            out.append(rev.RuntimeStatus(status=status, detail=detail))
        trainer = self.fleet_trainer()
        if trainer is not None:
            out.append(trainer)
        rows: list[dict[str, Any]] = []
        for h in self.hosts:
            rows.extend({**row, "url": f"{h.label} {row.get('url', '')}"} for row in h.state.servers)
        if rows:
            out.append(rev.ServerStats(phase=max(h.state.run.phase for h in self.hosts), servers=rows))
        lag = max((h.state.loop_lag_ms for h in self.hosts if h.connected), default=0.0)
        out.append(rev.LoopLag(lag_ms=lag))
        return out

    def fleet_status(self) -> tuple[str, str]:
        """One status for the console's status bar, and every host's in the detail."""
        live = [h for h in self.hosts if h.connected]
        statuses = {h.state.status for h in live}
        if not live:
            status = "disconnected"
        elif len(statuses) == 1:
            status = statuses.pop()
        elif "running" in statuses:
            status = "running"
        else:
            status = sorted(statuses)[0]
        parts = [f"{h.label} {h.state.status if h.connected else h.link}" for h in self.hosts]
        return status, f"{len(live)}/{len(self.hosts)} hosts: " + " · ".join(parts)

    def fleet_trainer(self) -> rev.TrainerStatus | None:
        """The hosts' trainer figures summed (per host: the fleet screen)."""
        ts = [h.state.trainer for h in self.hosts if h.state.trainer is not None]
        if not ts:
            return None
        first = ts[0]
        states = sorted({t.state for t in ts})
        return rev.TrainerStatus(
            state=states[0] if len(states) == 1 else "/".join(states),
            current_step=max(t.current_step for t in ts),
            total_steps=max(t.total_steps for t in ts),
            queue_size=max(t.queue_size for t in ts),
            self_queue_size=sum(t.self_queue_size for t in ts),
            total_queue_size=max(t.total_queue_size for t in ts),
            batch_size=first.batch_size,
            group_size=first.group_size,
            max_group_size=first.max_group_size,
            env_weight=sum(t.env_weight for t in ts),
            unallocated_fraction=first.unallocated_fraction,
            groups_sent=sum(t.groups_sent for t in ts),
            groups_sent_this_step=sum(t.groups_sent_this_step for t in ts),
            groups_per_step=round(sum(t.groups_per_step for t in ts), 2),
            send_errors=sum(t.send_errors for t in ts),
            send_unknown=sum(t.send_unknown for t in ts),
            send_retries=sum(t.send_retries for t in ts),
            reregistrations=sum(t.reregistrations for t in ts),
            last_send_error=next((t.last_send_error for t in reversed(ts) if t.last_send_error), None),
            backpressure=any(t.backpressure for t in ts),
            wait_trainer_s=sum(t.wait_trainer_s for t in ts),
            wait_inference_s=sum(t.wait_inference_s for t in ts),
            warning=next((t.warning for t in ts if t.warning), None),
            detail=" · ".join(f"{h.label} {h.state.trainer.state}" for h in self.hosts if h.state.trainer),
        )

    # ------------------------------------------------------------------ commands

    def command(
        self,
        name: str,
        args: dict[str, Any] | None = None,
        host: int | None = None,
        combine: Callable[[dict[str, Any]], Any] | None = None,
        all_hosts: bool = False,
    ) -> Future[Any]:
        """POST /control/NAME to ``host``, else the filtered host, else (or with ``all_hosts``)
        every connected one. Resolves with ``combine({label: result})`` or fails naming each host."""
        if host is not None:
            targets = [self.hosts[host]]
        elif self.selected is not None and not all_hosts:
            targets = [self.hosts[self.selected]]
        else:
            targets = [h for h in self.hosts if h.connected] or list(self.hosts)
        return self._submit(self._command_all(name, args or {}, targets, combine))

    async def _command_all(
        self, name: str, args: dict[str, Any], targets: list[HostLink], combine: Callable[[dict[str, Any]], Any] | None
    ) -> Any:
        results = await asyncio.gather(*(self._command_one(h, name, args) for h in targets), return_exceptions=True)
        errors = [f"{h.label}: {r}" for h, r in zip(targets, results) if isinstance(r, BaseException)]
        if errors:
            raise RuntimeError("; ".join(errors))
        by_host = {h.label: r for h, r in zip(targets, results)}
        return combine(by_host) if combine else None

    async def _command_one(self, host: HostLink, name: str, args: dict[str, Any]) -> Any:
        import aiohttp
        from pydantic import ValidationError

        from hermes_console.runtime.payloads import ControlReply

        if not host.connected:
            raise RuntimeError(
                f"{host.address} is {host.link}" + (f" ({host.link_detail})" if host.link_detail else "")
            )
        timeout = aiohttp.ClientTimeout(total=None if name == "evaluate" else COMMAND_TIMEOUT_S)
        async with self._session_for(host).post(
            self._url(host, f"/control/{name}"), json=args, headers=self._headers(), timeout=timeout
        ) as resp:
            try:
                reply = ControlReply.model_validate(await resp.json(content_type=None))
            except (ValueError, ValidationError):  # ValidationError: JSON, but not a control answer
                reply = ControlReply(ok=False, error=f"HTTP {resp.status}: not a control answer")
            if resp.status != 200 or not reply.ok:
                raise RuntimeError(reply.error or f"HTTP {resp.status}")
            return reply.result

    def _submit(self, coro: Any) -> Future[Any]:
        loop = self._loop
        if loop is None or loop.is_closed() or self._done.done():
            coro.close()
            fut: Future[Any] = Future()
            fut.set_exception(RuntimeError("not attached (the console is detaching)"))
            return fut
        return asyncio.run_coroutine_threadsafe(coro, loop)

    def pause(self, host: int | None = None) -> Future[None]:
        return self.command("pause", host=host)

    def resume(self, host: int | None = None) -> Future[None]:
        return self.command("resume", host=host)

    def stop_host(self, host: int, drain_deadline_s: float = 10.0) -> Future[None]:
        return self.command("stop", {"drain_deadline_s": drain_deadline_s}, host=host)

    def cancel_in_flight(self) -> Future[int]:
        return self.command("cancel_in_flight", combine=lambda r: sum(int(v or 0) for v in r.values()))

    def switch_phase(self, phase: int, cancel_in_flight: bool = False) -> Future[None]:
        return self.command("switch_phase", {"phase": phase, "cancel_in_flight": cancel_in_flight})

    def evaluate(self, pause_intake: bool = False) -> Future[EvalMetrics]:
        def combine(by_host: dict[str, Any]) -> EvalMetrics:
            if len(by_host) == 1:
                return dict(next(iter(by_host.values())) or {})
            return {f"{label}/{k}": v for label, m in by_host.items() for k, v in (m or {}).items()}

        return self.command("evaluate", {"pause_intake": pause_intake}, combine=combine)

    def _sandbox_host(self, task_id: str) -> tuple[int, str]:
        """The host running sandbox ``task_id`` (a merged key or a host's own id), and its own id."""
        label, raw = split_host_key(task_id, self._labels) if self.multi_host else (None, task_id)
        if label is not None:
            return next(h.index for h in self.hosts if h.label == label), raw
        # an untagged id: the filtered host's own state first (two hosts may share ids)
        first = [self.hosts[self.selected]] if self.selected is not None else []
        for h in first + self.hosts:
            if task_id in h.state.sandboxes or task_id in h.state.rollouts:
                return h.index, task_id
        raise CommandUnavailable(f"sandbox {task_id!r} is not known on any attached host")

    def _sandbox_command(self, name: str, task_id: str, parse: Callable[[Any], T], **args: Any) -> Future[T]:
        """One host's answer (JSON from the wire) parsed into what the command resolves with."""
        index, raw = self._sandbox_host(task_id)
        fut: Future[T] = self.command(
            name, {"task_id": raw, **args}, host=index, combine=lambda r: parse(next(iter(r.values())))
        )
        return fut

    def kill_sandbox(self, task_id: str) -> Future[bool]:
        return self._sandbox_command("kill_sandbox", task_id, bool)

    def extend_sandbox(self, task_id: str, seconds: float) -> Future[float]:
        return self._sandbox_command("extend_sandbox", task_id, float, seconds=seconds)

    def run_in_sandbox(self, task_id: str, command: str, timeout_s: float = 10.0) -> Future[DiagnosticResult]:
        from hermes_console.runtime.payloads import DiagnosticResult

        return self._sandbox_command(
            "run_in_sandbox", task_id, DiagnosticResult.model_validate, command=command, timeout_s=timeout_s
        )

    def sandbox_details(self, task_id: str) -> Future[SandboxDetails]:
        from hermes_console.runtime.payloads import SandboxDetails

        return self._sandbox_command("sandbox_details", task_id, SandboxDetails.model_validate)


async def _lines(stream: Any) -> Any:
    """Whole lines of a chunked body, however long (aiohttp's own line reader has a size limit)."""
    buf = b""
    async for chunk in stream.iter_any():
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            if line.strip():
                yield line


class _Retry(Exception):
    """Leave the request and try again after the chosen wait."""


async def _error_text(resp: Any) -> str:
    try:
        body = await resp.json(content_type=None)
        return str(body.get("error") or body)
    except Exception:  # noqa: BLE001 - not JSON: show the start of the text
        return (await resp.text())[:200]


def wait_until(pred: Callable[[], bool], timeout: float, step: float = 0.05) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return pred()
