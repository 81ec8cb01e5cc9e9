"""RuntimeHost: the live runtime. Its own thread runs its own asyncio loop, so a
reward function that blocks cannot freeze the UI; only events (drain) and
commands (futures) cross the thread boundary.

``start()`` returns at once after queueing RuntimeStatus("loading"): atroposlib
(~3 s to import), the env class and its config are loaded on the runtime thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
import traceback
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, TypeVar

from environments import events
from environments.events import Event
from hermes_console.runtime import atropos_bridge
from hermes_console.runtime import events as rev
from hermes_console.runtime.errors import ConfigError, first_line
from hermes_console.runtime.logbridge import DISCARD, LogBridge
from hermes_console.runtime.queue import EventQueue

if TYPE_CHECKING:
    from hermes_console.runtime.config import ResolvedRun, RunSpec
    from hermes_console.runtime.payloads import DiagnosticResult, EvalMetrics, RuntimeDiagnostics, SandboxDetails

logger = logging.getLogger(__name__)
T = TypeVar("T")
THREAD_NAME = "hermes-runtime"
CLEANUP_WAIT_S = 30.0  # at stop: cancelled rollouts' sandbox cleanups (slow under load: /proc scans)


class RuntimeHost:
    """Implements :class:`hermes_console.runtime.api.RuntimeAPI` for a live run."""

    def __init__(
        self,
        spec: RunSpec | Callable[[], RunSpec],
        *,
        exit_when_finished: bool = True,
        prepare: Callable[[], Any] | None = None,
    ) -> None:
        # A callable is called once, when the spec is first needed (at start, on the thread
        # that starts the runtime): the demo builds its own there, after the UI's first frame.
        self._spec: RunSpec | None = None if callable(spec) else spec
        self._spec_factory = spec if callable(spec) else None
        self.exit_when_finished = exit_when_finished
        # Runs on the host thread before loading (e.g. the demo starts its simulator
        # there, after the UI's first frame); its failure is a fatal load error.
        self._prepare = prepare
        self.queue = EventQueue()
        self.recorder: Any = None
        self.rollout_log: Any = None  # rollouts.jsonl in the run dir (set once the run dir is known)
        self.env: Any = None
        self.driver: Any = None
        self.resolved: ResolvedRun | None = None
        self.fatal: BaseException | None = None  # setup/config error that ended the run
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._loop_ready = threading.Event()
        self._ready: asyncio.Event | None = None  # driver built (or loading failed)
        self._stop_event: asyncio.Event | None = None
        self._stop_deadline = 10.0
        self._done: Future[None] = Future()
        self._started = False
        self._log_bridge = LogBridge()

    @property
    def spec(self) -> RunSpec:
        if self._spec is None:
            assert self._spec_factory is not None
            self._spec = self._spec_factory()
        return self._spec

    # ------------------------------------------------------------------ lifecycle

    @property
    def is_live(self) -> bool:
        return True

    def drain(self, max_events: int | None = None) -> list[Event]:
        return self.queue.drain(max_events)

    def start(self) -> None:
        if self._started:
            raise RuntimeError("RuntimeHost.start() was already called")
        self._started = True
        if self.spec.record_path:
            from hermes_console.runtime.recorder import Recorder

            self.recorder = Recorder(self.spec.record_path)
            self.queue.add_tap(self.recorder.tap)
        events.add_observer(self.queue.push)
        events.emit(rev.RuntimeStatus(status="loading", detail="importing the env and atroposlib"))
        self._thread = threading.Thread(target=self._thread_main, name=THREAD_NAME, daemon=True)
        self._thread.start()

    def join(self, timeout: float | None = None) -> bool:
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    @property
    def done(self) -> Future[None]:
        """Resolves when the runtime thread has finished everything (after stop or a finished run)."""
        return self._done

    def stop(self, drain_deadline_s: float = 10.0) -> Future[None]:
        """Ask for a graceful stop; the returned future (one per caller, so no caller can
        cancel another's wait) resolves when the runtime has finished everything."""
        self._stop_deadline = drain_deadline_s
        if not self._started:
            if not self._done.done():
                self._done.set_result(None)
            return _follow(self._done)
        self._loop_ready.wait(5.0)  # started a moment ago: the loop is being created
        loop = self._loop
        if loop is None:
            return _follow(self._done)
        with contextlib.suppress(RuntimeError):  # loop already closed: nothing to stop
            loop.call_soon_threadsafe(self._request_stop, drain_deadline_s)
        return _follow(self._done)

    def _request_stop(self, drain_deadline_s: float) -> None:
        if self._stop_event is not None:
            self._stop_event.set()
        if drain_deadline_s <= 0 and self.driver is not None:
            self.driver.cut_drain()  # forced: a drain already running ends now

    # ------------------------------------------------------------------ commands

    def _submit(self, fn: Callable[[], Awaitable[T]]) -> Future[T]:
        self._loop_ready.wait(5.0)
        loop = self._loop
        if loop is None or loop.is_closed() or self._done.done():
            fut: Future[T] = Future()
            fut.set_exception(RuntimeError("the runtime is not running"))
            return fut

        async def runner() -> T:
            assert self._ready is not None
            await self._ready.wait()
            if self.driver is None:
                raise RuntimeError(f"the runtime failed to start: {first_line(self.fatal)}")
            return await fn()

        try:
            return asyncio.run_coroutine_threadsafe(runner(), loop)
        except RuntimeError as exc:  # loop closed between the check and the call
            fut = Future()
            fut.set_exception(RuntimeError(f"the runtime is not running ({exc})"))
            return fut

    def pause(self) -> Future[None]:
        async def go() -> None:
            self.driver.pause()

        done = self._submit(go)
        driver, ready = self.driver, self._ready
        if driver is None or ready is None or not ready.is_set() or done.done():
            return done  # not running yet (or any more): the loop answers, as for every command
        # Intake closes now, from this thread: however busy the runtime loop is, no item is
        # taken after the key press. The loop then sets the status and wakes the driver.
        driver.gate.hold_for_operator_now()
        done.add_done_callback(_log_failure("pause"))
        closed: Future[None] = Future()
        closed.set_result(None)
        return closed

    def resume(self) -> Future[None]:
        async def go() -> None:
            self.driver.resume()

        return self._submit(go)

    def cancel_in_flight(self) -> Future[int]:
        return self._submit(lambda: self.driver.cancel_in_flight(reason="cancelled by operator", requeue=True))

    def switch_phase(self, phase: int, cancel_in_flight: bool = False) -> Future[None]:
        # The driver holds intake only for the switch itself; an operator pause stays as it was.
        return self._submit(lambda: self.driver.switch_phase(phase, cancel_in_flight=cancel_in_flight))

    def evaluate(self, pause_intake: bool = False) -> Future[EvalMetrics]:
        return self._submit(lambda: self.driver.evaluate(pause_intake=pause_intake))

    def kill_sandbox(self, task_id: str) -> Future[bool]:
        from hermes_console.runtime import sandbox_ops

        return self._submit(lambda: asyncio.to_thread(sandbox_ops.kill, task_id))

    def extend_sandbox(self, task_id: str, seconds: float) -> Future[float]:
        from hermes_console.runtime import sandbox_ops

        return self._submit(lambda: asyncio.to_thread(sandbox_ops.extend, task_id, seconds))

    def extend_command(self, task_id: str, seconds: float) -> Future[float]:
        """More time for the sandbox's running command; its new timeout (not in RuntimeAPI:
        the console asks for it by name, so remote and replay runtimes need not have it)."""
        from hermes_console.runtime import sandbox_ops

        return self._submit(lambda: asyncio.to_thread(sandbox_ops.extend_command, task_id, seconds))

    def run_in_sandbox(self, task_id: str, command: str, timeout_s: float = 10.0) -> Future[DiagnosticResult]:
        from hermes_console.runtime import sandbox_ops

        return self._submit(lambda: asyncio.to_thread(sandbox_ops.run, task_id, command, timeout_s))

    def sandbox_details(self, task_id: str) -> Future[SandboxDetails]:
        from hermes_console.runtime import sandbox_ops

        return self._submit(lambda: asyncio.to_thread(sandbox_ops.details, task_id))

    def diagnostics(self) -> Future[RuntimeDiagnostics]:
        """Tasks on the runtime loop and live threads (leak checks, the UI's debug pane)."""

        from hermes_console.runtime.payloads import RuntimeDiagnostics

        async def go() -> RuntimeDiagnostics:
            current = asyncio.current_task()
            tasks = sorted(t.get_name() for t in asyncio.all_tasks() if t is not current and not t.done())
            return RuntimeDiagnostics(
                tasks=tasks,
                threads=sorted(t.name for t in threading.enumerate()),
                in_flight=len(self.driver.in_flight),
                phase=self.driver.phase,
                get_next_item_calls=self.driver.get_next_item_calls,
            )

        return self._submit(go)

    # ------------------------------------------------------------------ the runtime thread

    def _thread_main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        self._ready = asyncio.Event()
        self._stop_event = asyncio.Event()
        self._loop_ready.set()
        try:
            loop.run_until_complete(self._main())
        except BaseException as exc:  # noqa: BLE001 - reported, never swallowed silently
            self.fatal = self.fatal or exc
            events.emit(rev.RuntimeStatus(status="error", detail=first_line(exc)))
        finally:
            try:
                loop.run_until_complete(_cancel_all_tasks(loop))
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.run_until_complete(loop.shutdown_default_executor())
            finally:
                asyncio.set_event_loop(None)
                loop.close()
            self._log_bridge.detach()
            events.remove_observer(self.queue.push)
            if self.recorder is not None:
                self.recorder.close()
            if self.rollout_log is not None:
                self.rollout_log.close()
            if not self._done.done():
                self._done.set_result(None)

    async def _load(self) -> None:
        """Import, resolve, check the server, build the env and the driver."""
        from environments.atropos_compat import apply_offline_defaults, sensible_max_token_len, tame_atroposlib_logging

        apply_offline_defaults()
        if self._prepare is not None:
            await asyncio.to_thread(self._prepare)
        # atroposlib's own records go through the bridge (LogRecord events), not stderr.
        tame_atroposlib_logging(stream=DISCARD)
        self._log_bridge.attach("", "atroposlib")
        from hermes_console.runtime.config import resolve
        from hermes_console.runtime.driver import Driver
        from hermes_console.runtime.loader import load_env_class
        from hermes_console.runtime.servers import build_server_manager, close_server_manager, probe_servers

        spec = self.spec
        env_cls = load_env_class(spec.env)
        resolved = resolve(spec, env_cls)
        self.resolved = resolved
        servers = resolved.servers_for(resolved.phase)
        if spec.check_server:
            await probe_servers(servers, wait_s=spec.server_wait_s)
        try:
            env = env_cls(
                config=resolved.env_config, server_configs=servers, slurm=resolved.slurm, testing=resolved.testing
            )
        except ConfigError:
            raise
        except Exception as exc:
            raise ConfigError(f"{env_cls.__name__}(...) could not be constructed: {first_line(exc)}") from exc
        # Our own ServerManager: instrumented, and with tool_parser set (BaseEnv forgets it).
        await close_server_manager(env.server)
        atropos_bridge.install_server_manager(env, build_server_manager(env, servers, resolved.phase))
        if getattr(env, "max_token_len", -1) <= 0 and spec.mode != "serve":
            # Without a trainer, atroposlib warns on every group (trap 7).
            atropos_bridge.set_max_token_len(
                env, sensible_max_token_len(env.config.max_token_length, getattr(env.config, "max_agent_turns", 1))
            )
        if spec.mode == "process":
            atropos_bridge.enter_process_mode(env, env.config.total_steps, env.config.group_size)
        self.env = env
        self.driver = Driver(
            env, resolved, phase=resolved.phase, max_in_flight=spec.max_in_flight, idle_poll_s=spec.idle_poll_s
        )
        from hermes_console.runtime.rollout_log import RolloutLog

        self.rollout_log = RolloutLog(self.driver.run_dir / "rollouts.jsonl")  # every rollout, on disk
        self.queue.add_tap(self.rollout_log.tap)
        settings = _sandbox_settings()
        events.emit(
            rev.RunConfigured(
                env_name=getattr(env_cls, "name", None) or env_cls.__name__,
                mode=spec.mode,
                phase=resolved.phase,
                group_size=env.config.group_size,
                max_in_flight=self.driver.max_in_flight,
                worker_timeout_s=float(env.config.worker_timeout),
                terminal_backend=str(getattr(env.config, "terminal_backend", settings.get("backend", "local"))),
                terminal_timeout_s=float(getattr(env.config, "terminal_timeout", settings.get("timeout", 0.0)) or 0.0),
                terminal_lifetime_s=float(
                    getattr(env.config, "terminal_lifetime", settings.get("lifetime", 0.0)) or 0.0
                ),
                total_steps=int(env.config.total_steps),
                jsonl_path=self.driver.jsonl_path,
                servers=[f"{c.server_type} {c.base_url}" for c in servers],
                shard=f"{resolved.shard} ({resolved.shard.source})" if resolved.shard else "",
                config=_config_rows(resolved),
            )
        )
        for note in resolved.notes:
            events.emit(rev.LogRecord(level="INFO", logger="config", message=note))
        from environments.redact import local_backend_warning

        warning = local_backend_warning(str(getattr(env.config, "terminal_backend", settings.get("backend", "local"))))
        if warning:  # local sandboxes can read this process's secrets from /proc
            events.emit(rev.LogRecord(level="WARNING", logger="security", message=warning))
        await self._start_wandb(env, resolved)

    async def _start_wandb(self, env: Any, resolved: ResolvedRun) -> None:
        """``use_wandb``: a wandb run, as atroposlib's process/serve managers would start it
        (serve mode starts it once the trainer has registered us: project and group are the trainer's)."""
        from hermes_console.runtime.wandb_link import WandbLink, run_config

        assert self.driver is not None
        link = WandbLink(
            env,
            mode=self.spec.mode,
            run_dir=self.driver.run_dir,
            config=run_config(env, resolved, self.spec.mode, resolved.phase),
        )
        self.driver.wandb = link
        if link.enabled and self.spec.mode != "serve":
            await asyncio.to_thread(link.start)

    async def _main(self) -> None:
        assert self._ready is not None and self._stop_event is not None
        helpers: list[asyncio.Task[Any]] = []
        try:
            try:
                await self._load()
            except BaseException as exc:  # noqa: BLE001 - any load failure is the run's fatal error, shown with its cause
                self.fatal = exc
                detail = (
                    str(exc) if isinstance(exc, ConfigError) else f"{first_line(exc)}\n{traceback.format_exc(limit=4)}"
                )
                from environments.redact import redact  # URLs with credentials, keys in env __init__ errors

                events.emit(rev.RuntimeStatus(status="error", detail=redact(detail)))
                return
            finally:
                self._ready.set()
            loop = asyncio.get_running_loop()
            helpers.append(loop.create_task(self._heartbeat(), name="hermes-heartbeat"))
            helpers.append(loop.create_task(self._server_stats(), name="hermes-server-stats"))
            run_task = loop.create_task(self._run_driver(), name="hermes-driver")
            stop_wait = loop.create_task(self._stop_event.wait(), name="hermes-stop-wait")
            await asyncio.wait({run_task, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            if stop_wait.done() or not self.exit_when_finished:
                if not stop_wait.done():
                    await stop_wait  # finished; keep serving commands (evaluate, sandboxes) until stop()
                await self.driver.shutdown(self._stop_deadline)
                if not run_task.done():
                    try:
                        await asyncio.wait_for(asyncio.shield(run_task), timeout=5.0)
                    except TimeoutError:
                        run_task.cancel()
                with contextlib.suppress(BaseException):
                    await run_task
                self.driver.mark_stopped()
            else:
                stop_wait.cancel()
                with contextlib.suppress(BaseException):
                    await run_task
        finally:
            for task in helpers:
                task.cancel()
            for task in helpers:
                with contextlib.suppress(BaseException):
                    await task
            await self._teardown()

    async def _run_driver(self) -> None:
        try:
            await self.driver.run()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - any run failure is recorded as fatal, then groups are accounted
            self.fatal = exc
            where = "setup()" if self.driver.status == "loading" else "the run"
            await self.driver.shutdown(0.0)  # in-flight groups are cancelled and accounted
            self.driver.mark_error(f"{where} raised {first_line(exc)}")

    async def _teardown(self) -> None:
        """Close outputs, servers and sandboxes. Never raises."""
        from hermes_console.runtime.servers import close_server_manager

        if self.driver is not None:
            with contextlib.suppress(Exception):
                await self.driver.finish_outputs()
            if self.driver.wandb is not None:  # offline runs end complete and sync-ready
                await asyncio.to_thread(self.driver.wandb.finish, 1 if self.fatal is not None else 0)
        if self.env is not None:
            with contextlib.suppress(Exception):
                await close_server_manager(self.env.server)
            with contextlib.suppress(Exception):
                await self.env.cleanup()
        await asyncio.to_thread(_cleanup_sandboxes)
        left = await asyncio.to_thread(_stop_env_threads, CLEANUP_WAIT_S)
        # A tool thread still running at the first sweep (a cancelled rollout's first terminal
        # call) may have created a sandbox since: close it now, while its close event still
        # reaches the console (and the event log), not at interpreter exit.
        await asyncio.to_thread(_cleanup_sandboxes)
        if left:
            events.emit(
                rev.LogRecord(
                    level="WARNING",
                    logger="runtime",
                    message=f"{left} sandbox cleanup(s) still running after {CLEANUP_WAIT_S:g}s; "
                    "their close events may be missing from this run's record",
                )
            )

    async def _heartbeat(self) -> None:
        """LoopLag: how late the loop wakes up. Blocking env code shows up here."""
        interval = self.spec.heartbeat_s
        loop = asyncio.get_running_loop()
        while True:
            t0 = loop.time()
            await asyncio.sleep(interval)
            lag_ms = max(0.0, (loop.time() - t0 - interval) * 1000.0)
            events.emit(rev.LoopLag(lag_ms=round(lag_ms, 3)))

    async def _server_stats(self) -> None:
        from hermes_console.runtime.servers import server_stats

        while True:
            await asyncio.sleep(self.spec.stats_interval_s)
            if self.env is not None and self.driver is not None:
                try:
                    rows = server_stats(self.env.server)
                except Exception:  # noqa: BLE001 - a manager mid-swap
                    continue
                events.emit(rev.ServerStats(phase=self.driver.phase, servers=rows))


def _follow(source: Future[None]) -> Future[None]:
    """A new future that settles like ``source``; cancelling it leaves ``source`` alone."""
    mine: Future[None] = Future()

    def copy(done: Future[None]) -> None:
        if mine.done():
            return
        if done.cancelled():
            mine.cancel()
        elif done.exception() is not None:
            mine.set_exception(done.exception())
        else:
            mine.set_result(None)

    source.add_done_callback(copy)
    return mine


async def _cancel_all_tasks(loop: asyncio.AbstractEventLoop) -> None:
    current = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks(loop) if t is not current and not t.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=5.0)


def _sandbox_settings() -> dict[str, Any]:
    try:
        from environments.sandboxes import current_settings

        return dict(current_settings().model_dump())
    except Exception:  # noqa: BLE001 - informational only
        return {}


def _stop_env_threads(timeout_s: float) -> int:
    """Wait for cancelled rollouts' sandbox cleanups, then stop the tool pools,
    so a stopped runtime leaves no thread of the env layer running.
    Returns how many cleanups were still running after ``timeout_s``."""
    loaded = sys.modules  # only what the run imported: no import cost on a config-error exit
    left = 0
    if "environments.hermes_base_env" in loaded:
        base_env = loaded["environments.hermes_base_env"]
        left = int(base_env.wait_for_cleanups(timeout_s) or 0)
        base_env.shutdown_cleanup_pool(wait=left == 0)  # a hung teardown must not hang the stop
    if "environments.agent_loop" in loaded:
        loaded["environments.agent_loop"].shutdown_tool_pool(wait=True)
    if "environments.tool_context" in loaded:
        loaded["environments.tool_context"].shutdown_executor(wait=True)
    if "environments.tokenizer_copies" in loaded:
        loaded["environments.tokenizer_copies"].shutdown_workers(wait=True)
    return left


def _cleanup_sandboxes() -> None:
    try:
        from environments import sandboxes
    except ImportError:
        return
    for name in ("cleanup_all_environments", "shutdown"):
        fn = getattr(sandboxes, name, None)
        if fn is not None:
            try:
                fn()
            except Exception as exc:  # noqa: BLE001
                logger.warning("sandboxes.%s() failed: %s", name, exc)


def _config_rows(resolved: ResolvedRun) -> list[rev.ConfigRow]:
    """The config view's rows; never lets a config that cannot be shown stop the run."""
    from hermes_console.runtime.config_rows import config_rows

    try:
        return config_rows(resolved)
    except Exception as exc:  # noqa: BLE001
        logger.warning("config view: could not list the resolved config: %s", exc)
        return []


def _log_failure(what: str) -> Callable[[Future[Any]], None]:
    """A done-callback that logs a command's failure nobody else waits for."""

    def check(done: Future[Any]) -> None:
        if not done.cancelled() and done.exception() is not None:
            logger.warning("%s failed in the runtime: %s", what, done.exception())

    return check
