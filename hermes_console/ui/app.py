"""ConsoleApp: drains the runtime's events on a timer, folds them into its own
ConsoleState and lets the visible screen redraw what changed. Operator keys
become RuntimeAPI commands; a failed command is a toast, never a crash.
"""

from __future__ import annotations

import asyncio
import math
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from contextlib import suppress
from typing import Any, TypeVar

from textual.app import App, SystemCommand
from textual.css.query import NoMatches
from textual.dom import NoScreen
from textual.events import Event, Key
from textual.screen import ModalScreen, Screen
from textual.timer import Timer

from hermes_console.runtime import gc_tuning
from hermes_console.runtime.api import ExtendsCommands, RuntimeAPI
from hermes_console.runtime.coalesce import Coalesced
from hermes_console.runtime.state import ConsoleState
from hermes_console.ui.bindings import bindings_for
from hermes_console.ui.budget import UiBudget
from hermes_console.ui.commands import ConsoleCommands
from hermes_console.ui.config import ConsoleConfig, KeymapError, load_console_config
from hermes_console.ui.first_hop_keys import app_binding_for
from hermes_console.ui.format import duration, visible
from hermes_console.ui.replay_controls import ReplayControls
from hermes_console.ui.screens.confirm import ConfirmModal
from hermes_console.ui.screens.help import HelpScreen
from hermes_console.ui.screens.main import MainScreen

Clock = float | Callable[[], float] | None
T = TypeVar("T")  # what a command's Future resolves with
CPU_CHECK_EVERY = 64  # plain events applied between two reads of the step's CPU clock
CATCH_UP_MAX = 4.0  # a late drain step with a backlog may use up to this many step budgets
PHASE_NAMES = {1: "Phase 1 — OpenAI-compatible chat", 2: "Phase 2 — ManagedServer /generate (tokens + logprobs)"}


class ConsoleApp(ReplayControls, App[int]):
    TITLE = "hermes-console"
    CSS_PATH = "console.tcss"
    BINDINGS = bindings_for("app")
    COMMANDS = App.COMMANDS | {ConsoleCommands}

    def __init__(
        self, runtime: RuntimeAPI, *, now: Clock = None, config: ConsoleConfig | None = None, start_runtime: bool = True
    ) -> None:
        super().__init__()
        self.runtime = runtime
        self.config = config or ConsoleConfig()
        self.state = ConsoleState()
        self.stopping = False
        self._stop_began: float | None = None  # time.monotonic() when quit began
        self._clock = now
        self._start_runtime = start_runtime
        self._drain_failed = False
        # Freeze the collector's view once the env is loaded (the status leaves "loading"): the
        # runtime starts its thread and returns at once, so a freeze after start() froze little.
        self._gc_frozen = False
        self._render_key: tuple = ()
        self._cost_per_event_s = 5e-6  # running estimate of reducer CPU per item, sizes each drain step
        self._carry: deque[Any] = deque()  # drained but not applied yet: a step's CPU budget ran out
        self.cpu_clock: Callable[[], float] = time.thread_time  # the UI thread's CPU (tests inject one)
        self.wall_clock: Callable[[], float] = time.monotonic  # when drain steps run (tests inject one)
        self._last_step_at: float | None = None
        self._behind = False  # the last drain step left items waiting
        self._flood_timer: Timer | None = None  # drains at flood_drain_hz while a backlog waits
        self.flood_rhythm = False  # that timer runs
        # The budget's base drain interval is the fastest rhythm (the flood's): a step that left a
        # backlog may be followed that soon (UiBudget.drain_due).
        flood_hz = max(self.config.drain_hz, self.config.flood_drain_hz, self.config.tick_hz)
        self.budget = UiBudget(
            self.config.ui_cpu_share,
            1.0 / self.config.tick_hz,
            1.0 / flood_hz,
            max_redraw_s=self.config.max_redraw_interval_s,
            max_drain_s=self.config.max_drain_interval_s,
        )
        self._more_panels = False  # a throttled redraw left panels for the next tick
        self.switch_peak = 0  # largest in-flight count seen during the current phase switch
        # Evaluations that existed before the operator pressed `e`; a new one that
        # finishes afterwards opens the results screen.
        self._evals_before: set[str] | None = None
        self._eval_result: dict | None = None
        self.frozen = False  # `z`: events keep being read, the screens keep what they show

    # ------------------------------------------------------------------ clock

    def now(self) -> float:
        """The time ages are measured against: injected (tests, screenshots),
        the log's own time for replay, or the wall clock for a live run."""
        if callable(self._clock):
            return self._clock()
        if self._clock is not None:
            return float(self._clock)
        if not self.runtime.is_live and self.state.last_ts is not None:
            return self.state.last_ts
        return time.time()

    # ------------------------------------------------------------------ lifecycle

    def on_mount(self) -> None:
        if self.config.keymap:
            self.set_keymap(self.config.keymap)
        self.push_screen(MainScreen())
        if self._start_runtime:
            # start() may load the env (slow): keep it off the UI thread, and begin after the
            # first frame, so its imports do not share the GIL with drawing that frame.
            self.call_after_refresh(self._start_in_worker)
        self.set_interval(1.0 / max(self.config.drain_hz, self.config.tick_hz), self.tick, name="drain")
        # The flood rhythm (``budget.base_drain_s``) runs only while a drain step leaves a backlog.
        self._flood_timer = self.set_interval(self.budget.base_drain_s, self.tick, name="drain-flood", pause=True)
        self.call_after_refresh(self.tick)  # first events as soon as the screen exists
        self._watch_stop_signals()

    def _watch_stop_signals(self) -> None:
        """SIGTERM/SIGHUP stop like quit (drain, then exit); a second one cancels in-flight work now."""
        import signal

        loop = asyncio.get_running_loop()
        for name in ("SIGTERM", "SIGHUP"):
            signum = getattr(signal, name, None)
            if signum is not None:
                try:
                    loop.add_signal_handler(signum, self._on_stop_signal)
                except (NotImplementedError, RuntimeError, ValueError):  # not the main thread / platform
                    pass

    def _on_stop_signal(self) -> None:
        if self.stopping:
            self.runtime.stop(0.0)  # forced: the drain ends now, the waiting shutdown then exits
        else:
            self.shutdown()

    def _start_in_worker(self) -> None:
        if self.stopping:  # quit (or a stop signal) before the first frame: nothing to start
            return
        self.run_worker(self._start, thread=True, group="runtime-start", exit_on_error=False)

    def _start(self) -> None:
        try:
            self.runtime.start()
        except Exception as exc:  # noqa: BLE001 - shown to the operator, the UI stays up
            self.call_from_thread(
                self.notify, f"runtime failed to start: {exc}", severity="error", title="runtime", timeout=30
            )
            return

    def tick(self) -> None:
        """Drain and redraw at the pace the UI's CPU budget allows (``UiBudget``): the
        base rates (``drain_hz``, ``tick_hz``) while that costs little, slower while the
        env is busy and the UI thread would take more than ``ui_cpu_share`` of a core."""
        budget = self.budget
        drained = 0
        if budget.drain_due():
            # A late step with a backlog may catch up several budgets' worth: one budget now,
            # the rest as callbacks of one budget each, so a key waits for one step, not all.
            base_s = self.config.drain_budget_ms / 1000.0
            total_s = self._step_budget_s()
            drained, full = self._drain_step(min(base_s, total_s))
            budget.drained(drained, backlog=full)
            self._flood_rhythm(full)
            more = round(total_s / base_s) - 1
            if full and more > 0:
                self._soon(self._catch_up, more)
            if (
                not self._gc_frozen
                and self.config.freeze_gc_after_start
                and self.state.status not in ("loading", "error")
            ):
                self._gc_frozen = True
                gc_tuning.freeze_loaded()  # once: the env's objects leave every later full collection
        budget.update()
        if budget.redraw_due():
            budget.redrawn()
            if drained:
                self._soon(self._redraw)  # its own callback, after the step (and any key) ran
            else:
                self._redraw()

    def _soon(self, callback: Callable[..., Any], *args: Any) -> None:
        """Run ``callback`` as its own turn of the event loop. Not through the app's message
        queue (``call_later``): a key queued behind a chain of drain steps there waits for all
        of them; on the loop, the app's message pump takes its turn between two steps."""

        def run() -> None:
            if self._exit:
                return  # as Textual's timers do: nothing more once the app is exiting
            try:
                callback(*args)
            except Exception as exc:  # noqa: BLE001 - as Textual reports a failing callback
                self._handle_exception(exc)

        asyncio.get_running_loop().call_soon(run)

    def _flood_rhythm(self, backlog: bool) -> None:
        """Drain at ``flood_drain_hz`` while a backlog waits, at ``drain_hz`` otherwise."""
        timer = self._flood_timer  # None before mount (tests call tick directly)
        if timer is None or backlog == self.flood_rhythm:
            return
        self.flood_rhythm = backlog
        if backlog:
            timer.resume()
        else:
            timer.pause()

    def _catch_up(self, steps: int) -> None:
        """One more step of catching up (one drain budget), then the next as its own callback."""
        events, full = self._drain_step(self.config.drain_budget_ms / 1000.0)
        self.budget.drained(events, backlog=full)
        if full and steps > 1:
            self._soon(self._catch_up, steps - 1)

    def panels_per_redraw(self) -> int | None:
        """How many changed panels one redraw may update (None: all): few while throttling."""
        return self.config.throttled_panels_per_redraw if self.budget.throttled else None

    def redraw_soon(self) -> None:
        """Panels are still waiting to be drawn: redraw on the next tick."""
        self.redraw_later()
        self.budget.kick()

    def redraw_later(self) -> None:
        """A redraw left changes for the next one: redraw when the budget next allows, even if
        nothing changes until then (a replay at its end, a quiet run), else they never show."""
        self._more_panels = True

    def on_key(self, _event: Any) -> None:
        self.budget.kick()  # whatever the key did shows on the next tick, throttled or not

    async def on_event(self, event: Event) -> None:
        # A key only the app binds runs here, at its first queue, instead of after bubbling
        # through every container back to the app (ui/first_hop_keys.py): in a flood each
        # queue on the way is a turn of the loop, and an operator's pause waited for all.
        if isinstance(event, Key) and not event.is_forwarded:
            binding = app_binding_for(self, event.key)
            if binding is not None:
                self.app_focus = True  # as Textual's route does for a key, and a tooltip goes
                if self.focused is not None:
                    with suppress(NoScreen):
                        self.screen._clear_tooltip()
                self.budget.kick()
                if await self.run_action(binding.action, self):
                    return
        await super().on_event(event)

    def ui_note(self) -> str:
        """The status bar's note while the UI is throttling its redraws."""
        return self.budget.note()

    def _drain_step(self, budget_s: float) -> tuple[int, bool]:
        """Apply about ``drain_budget_ms`` of reducer CPU; returns the events applied and
        whether the step was full (more is waiting).

        One ``runtime.drain`` call per step, sized by the UI thread's CPU per item (not wall
        time, which GIL waits inflate). A folded segment stands for hundreds of events and
        costs far more than one, so the step also watches its own CPU (``cpu_clock``: after
        each segment and every ``CPU_CHECK_EVERY`` events) and stops when the budget is
        spent: the items left are kept in ``_carry`` and applied first by the next step,
        so nothing is lost and a key never waits for more than about one budget."""
        config = self.config
        want = int(budget_s / self._cost_per_event_s)
        want = max(min(512, config.max_events_per_tick), min(config.max_events_per_tick, want))
        carry = self._carry
        try:
            fresh = self.runtime.drain(max(0, want - len(carry)))
        except Exception as exc:  # noqa: BLE001
            if not self._drain_failed:
                self._drain_failed = True
                self.notify(f"reading runtime events failed: {exc}", severity="error", title="runtime")
            fresh = []
        carry.extend(fresh)
        if not carry:
            self._behind = False
            return 0, False
        cpu = self.cpu_clock
        t0 = cpu()
        deadline = t0 + budget_s
        events = taken = plain = 0
        out_of_budget = False
        while carry and taken < want:
            item = carry.popleft()
            taken += 1
            events += self._apply_one(item)
            if isinstance(item, Coalesced):
                plain = 0
            else:
                plain += 1
                if plain < CPU_CHECK_EVERY:
                    continue
                plain = 0
            if cpu() >= deadline:
                out_of_budget = True
                break
        if taken >= 64:  # small batches measure timer noise, not the reducer
            cost = (cpu() - t0) / taken
            self._cost_per_event_s = min(1e-3, max(5e-7, 0.7 * self._cost_per_event_s + 0.3 * cost))
        self._behind = out_of_budget or bool(carry) or taken >= want
        return events, self._behind

    def _step_budget_s(self) -> float:
        """This step's CPU budget: ``drain_budget_ms``; while a backlog waits, as much more as the
        step is late (the loop was busy drawing), up to ``CATCH_UP_MAX`` times. So catching up gets
        ``drain_budget_ms`` per base drain interval of CPU however few ticks run, and one step stays
        short enough for a key to wait for at most a few tens of ms."""
        now = self.wall_clock()
        last, self._last_step_at = self._last_step_at, now
        base_s = self.config.drain_budget_ms / 1000.0
        if not self._behind or last is None:
            return base_s
        late = (now - last) / self.budget.base_drain_s
        return base_s * min(CATCH_UP_MAX, max(1.0, late))

    def _fold(self, events: Iterable[Any]) -> int:
        """Apply queued items (events and folded segments); returns the events they stand for."""
        apply_one = self._apply_one
        return sum(apply_one(event) for event in events)

    def _apply_one(self, event: Any) -> int:
        """Apply one queued item; returns the events it stands for."""
        self.state.apply(event)
        if isinstance(event, Coalesced):
            return event.count
        if event.kind == "phase_switch":
            self._track_switch(event)
        return 1

    def apply_events(self, events: Iterable[Any], *, force: bool = False) -> None:
        """Apply ``events`` and redraw at once (shutdown, tests)."""
        self._fold(events)
        self._redraw(force=force)

    def _redraw(self, *, force: bool = False) -> None:
        if self.frozen and not force:
            return
        self._maybe_open_eval_results()
        # Redraw only when the model changed or the displayed second moved on:
        # an idle console costs nothing per tick.
        render_key = (self.state.version, int(self.now()), self.stopping, self.stop_note())
        if render_key == self._render_key and not force and not self._more_panels:
            return
        self._render_key = render_key
        self._more_panels = False
        with self.batch_update():
            for screen in self._visible_screens():
                refresh = getattr(screen, "refresh_view", None)
                if refresh is None or not getattr(screen, "ready", False):
                    continue
                try:
                    refresh(self.state, self.now())
                except NoMatches:
                    # A tick that lands while the app tears the screen down has
                    # nothing to draw; on a live screen a missing widget is a bug.
                    tearing_down = any(
                        getattr(node, flag, False) for node in (self, screen) for flag in ("_closing", "_closed")
                    )
                    if screen.is_attached and not tearing_down:
                        raise

    def _track_switch(self, event: Any) -> None:
        # The reducer keeps only the latest stage; the drain bar needs the in-flight count it started from.
        if event.stage in ("done", "failed"):
            self.switch_peak = 0
        else:
            self.switch_peak = max(self.switch_peak, event.in_flight)

    def _visible_screens(self) -> Iterable[Screen]:
        """The top screen, plus what shows through under modals."""
        for screen in reversed(self.screen_stack):
            yield screen
            if not isinstance(screen, ModalScreen):
                break

    # ------------------------------------------------------------------ commands

    def send(
        self,
        label: str,
        call: Callable[[], Future[T]],
        *,
        success: str | Callable[[T], str] | None = None,
        on_result: Callable[[T], None] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
        quiet_replay: bool = False,
    ) -> bool:
        """Send one command; its Future is awaited in a worker. Returns False if refused."""
        if not self.runtime.is_live:
            if not quiet_replay:
                self.notify(
                    f"{label}: controls are disabled while replaying a log.", severity="warning", title="replay"
                )
            return False
        try:
            future = call()
        except Exception as exc:  # noqa: BLE001 - a command that raises synchronously is still just a toast
            self._command_failed(label, exc, on_error)
            return False
        self.run_worker(self._await(label, future, success, on_result, on_error), group="commands", exit_on_error=False)
        return True

    async def _await(
        self,
        label: str,
        future: Future[T],
        success: str | Callable[[T], str] | None,
        on_result: Callable[[T], None] | None,
        on_error: Callable[[BaseException], None] | None,
    ) -> None:
        try:
            result = await asyncio.wrap_future(future)
        except BaseException as exc:  # includes CancelledError of the runtime's future
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            self._command_failed(label, exc, on_error)
            return
        if success is not None:
            self.notify(success(result) if callable(success) else success, title=label)
        if on_result is not None:
            on_result(result)

    def _command_failed(self, label: str, exc: BaseException, on_error: Callable[[BaseException], None] | None) -> None:
        cause = visible(str(exc)) or type(exc).__name__
        self.notify(f"{label} failed: {cause}", severity="error", title=label, timeout=10)
        if on_error is not None:
            on_error(exc)

    # ------------------------------------------------------------------ operator actions

    def action_toggle_pause(self) -> None:
        source = self._replay_source()
        if source is not None:
            source.set_paused(not source.paused)
            self._redraw(force=True)
            return
        if self.state.status in ("paused", "draining"):
            self.send("resume", self.runtime.resume, success="intake resumed")
        else:
            self.send("pause", self.runtime.pause, success="intake paused; in-flight groups drain")

    def action_cancel_in_flight(self) -> None:
        if not self._live_or_notice("cancel in-flight"):
            return
        n = self.state.accounting.in_flight

        def answer(yes: bool | None) -> None:
            if yes:
                self.send(
                    "cancel in-flight",
                    self.runtime.cancel_in_flight,
                    success=lambda count: f"cancelled {count} group(s)",
                )

        self.push_screen(
            ConfirmModal(
                "Cancel in-flight groups?",
                f"{n} group(s) in flight will be cancelled and their items counted as cancelled. Intake continues.",
                "Cancel them",
            ),
            answer,
        )

    def action_switch_phase(self) -> None:
        if not self._live_or_notice("switch phase"):
            return
        current = self.state.run.phase
        target = 2 if current == 1 else 1
        switch = self.state.phase_switch
        if switch is not None and switch.stage not in ("done", "failed"):
            self.notify(f"A phase switch to {switch.to_phase} is already {switch.stage}.", severity="warning")
            return
        n = self.state.accounting.in_flight

        def answer(yes: bool | None) -> None:
            if yes:
                self.send("phase switch", lambda: self.runtime.switch_phase(target), success=f"now in Phase {target}")

        self.push_screen(
            ConfirmModal(
                f"Switch Phase {current} → {target}?",
                f"From: {PHASE_NAMES.get(current)}\nTo:   {PHASE_NAMES.get(target)}\n\n"
                f"Intake pauses, the {n} in-flight group(s) drain, then the servers are rebuilt. "
                "Progress shows in the status bar.",
                "Switch",
            ),
            answer,
        )

    def action_evaluate(self) -> None:
        if self._evals_before is not None:
            self.notify("An evaluation is already running.", severity="warning")
            return
        before = set(self.state.evals)

        def done(result: Any) -> None:
            self._eval_result = result if isinstance(result, dict) else None
            self._maybe_open_eval_results()

        def failed(_: BaseException) -> None:
            self._evals_before = None

        if self.send("evaluate", lambda: self.runtime.evaluate(), on_result=done, on_error=failed):
            self._evals_before = before
            self.notify("evaluation started; results open when it finishes", title="evaluate")

    def _maybe_open_eval_results(self) -> None:
        if self._evals_before is None:
            return
        new = [v for k, v in self.state.evals.items() if k not in self._evals_before]
        finished = [v for v in new if v.status != "running"]
        if finished:
            view = finished[-1]
        elif self._eval_result is not None and not new:
            # The runtime resolved without eval events (or they were evicted): show what we got.
            view = None
        else:
            return
        from hermes_console.ui.screens.evaluation import EvaluationScreen

        self._evals_before = None
        result, self._eval_result = self._eval_result, None
        self.push_screen(EvaluationScreen(view.eval_id if view else "latest", fallback_metrics=result))

    def kill_sandbox(self, task_id: str) -> None:
        if not self._live_or_notice("kill sandbox"):
            return
        sandbox = self.state.sandboxes.get(task_id)
        running = f"\nIt is running: {sandbox.running_command}" if sandbox and sandbox.running_command else ""

        def answer(yes: bool | None) -> None:
            if yes:
                self.send(
                    "kill sandbox",
                    lambda: self.runtime.kill_sandbox(task_id),
                    success=lambda ok: f"sandbox {task_id} killed" if ok else f"sandbox {task_id} was gone",
                )

        self.push_screen(
            ConfirmModal(
                f"Kill sandbox {task_id}?",
                f"Its processes are killed and its workspace removed; the rollout's next command fails.{running}",
                "Kill",
            ),
            answer,
        )

    def extend_sandbox(self, task_id: str) -> None:
        seconds = self.config.extend_minutes * 60.0
        self.send(
            "extend sandbox",
            lambda: self.runtime.extend_sandbox(task_id, seconds),
            success=lambda lifetime: (
                f"sandbox {task_id}: lifetime now {duration(lifetime)}"
                if isinstance(lifetime, (int, float))
                else f"sandbox {task_id} extended"
            ),
        )

    def extend_command(self, task_id: str) -> None:
        """More time for the sandbox's running command (its timeout, not the idle lifetime)."""
        seconds = self.config.extend_minutes * 60.0
        runtime = self.runtime
        if not isinstance(runtime, ExtendsCommands):
            self.notify("extend command: this runtime cannot extend a running command", severity="warning")
            return
        self.send(
            "extend command",
            lambda: runtime.extend_command(task_id, seconds),
            success=lambda timeout: (
                f"sandbox {task_id}: command timeout now {duration(timeout)}"
                if isinstance(timeout, (int, float))
                else f"sandbox {task_id}: command extended"
            ),
        )

    def action_toggle_freeze(self) -> None:
        # A FROZEN badge in the status bar says it for as long as it lasts (not a toast that stays).
        self.frozen = not self.frozen
        self._redraw(force=True)  # draws the badge (on) or everything read meanwhile (off)

    def action_insight(self) -> None:
        from hermes_console.ui.screens.insight import InsightScreen

        if not isinstance(self.screen, InsightScreen):
            self.push_screen(InsightScreen())

    def action_eval_history(self) -> None:
        from hermes_console.ui.screens.evaluation import EvaluationScreen

        if isinstance(self.screen, EvaluationScreen):
            return
        if not self.state.evals:
            self.notify("No evaluation in this session yet (e runs one).", title="evaluations")
            return
        self.push_screen(EvaluationScreen(next(reversed(self.state.evals))))

    def action_config(self) -> None:
        from hermes_console.ui.screens.config_view import ConfigScreen

        if not isinstance(self.screen, ConfigScreen):
            self.push_screen(ConfigScreen())

    def _live_or_notice(self, label: str) -> bool:
        if self.runtime.is_live:
            return True
        self.notify(f"{label}: controls are disabled while replaying a log.", severity="warning", title="replay")
        return False

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Textual's palette entries, minus its own Quit: ours (from the bindings) confirms
        while rollouts are live and drains; Textual's would exit at once."""
        for command in super().get_system_commands(screen):
            if command.title != "Quit":
                yield command

    async def action_quit(self) -> None:
        """Any route to Textual's quit (e.g. a stray binding) takes the console's quit path."""
        self.action_request_quit()

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_request_quit(self) -> None:
        if self.stopping:
            # Second q while stopping: cut the drain (in-flight groups are cancelled and
            # accounted) and leave the screen now. The stop itself is never cancelled:
            # the CLI waits for its cleanup after the UI is gone.
            self.runtime.stop(0.0)
            self.exit(self._exit_code())
            return
        live = sum(1 for r in self.state.rollouts.values() if r.status == "running")
        in_flight = self.state.accounting.in_flight
        if self.runtime.is_live and (live or in_flight) and self.state.status not in ("stopped", "finished"):

            def answer(yes: bool | None) -> None:
                if yes:
                    self.shutdown()

            self.push_screen(
                ConfirmModal(
                    "Quit hermes-console?",
                    f"{in_flight} group(s) / {live} rollout(s) are live. The runtime gets "
                    f"{self.config.drain_deadline_s:.0f}s to drain, then stops.",
                    "Quit",
                ),
                answer,
            )
        else:
            self.shutdown()

    def shutdown(self) -> None:
        """Stop the runtime (drain until the deadline) and exit when it is done."""
        self.stopping = True
        self._stop_began = time.monotonic()
        self.apply_events([], force=True)  # show "STOPPING" at once
        try:
            future = self.runtime.stop(self.config.drain_deadline_s)
        except Exception as exc:  # noqa: BLE001
            self.notify(f"stop failed: {exc}", severity="error")
            self.exit(1)
            return
        self.run_worker(self._wait_stopped(future), group="shutdown", exit_on_error=False)

    async def _wait_stopped(self, future: Future[Any]) -> None:
        # Wait for the whole stop (drain, cancel, sandbox cleanup), however long it takes:
        # the status bar counts down, and a second q leaves early. shield(): cancelling this
        # worker (app exit) must never cancel the runtime's stop future.
        try:
            await asyncio.shield(asyncio.wrap_future(future))
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - exiting anyway; the runtime logs its own failure
            self.exit(1)
            return
        self.exit(self._exit_code())

    def _exit_code(self) -> int:
        """By outcome: 1 when the run ended in error, else 0."""
        return 1 if self.state.status == "error" else 0

    def stop_note(self) -> str:
        """What the status bar says while stopping: the drain countdown, then cleanup."""
        if self._stop_began is None:
            return ""
        left = self.config.drain_deadline_s - (time.monotonic() - self._stop_began)
        in_flight = self.state.accounting.in_flight
        if left > 0 and in_flight:
            return f"draining {in_flight} group(s), cancelling the rest in {math.ceil(left)}s · q: leave now"
        return "cleaning up sandboxes and outputs · q: leave now (cleanup continues)"


def run_console(
    runtime: RuntimeAPI,
    *,
    now: Clock = None,
    config: ConsoleConfig | None = None,
    drain_deadline_s: float | None = None,
) -> int:
    """Run the console over ``runtime`` until the operator quits. Returns the exit code.

    ``config`` defaults to the keymap at ~/.config/hermes-console/keys.yaml (if any);
    an invalid keymap is reported on stderr with exit code 2 before the UI starts.
    """
    if config is None:
        try:
            config = load_console_config()
        except KeymapError as exc:
            print(f"hermes-console: {exc}", file=sys.stderr)
            return 2
    if drain_deadline_s is not None:  # --drain-deadline reaches the UI's quit too
        config.drain_deadline_s = drain_deadline_s
    gc_tuning.tune()  # this process is the console's: see gc_tuning for why and why not in tests
    config.freeze_gc_after_start = True
    app = ConsoleApp(runtime, now=now, config=config)
    result = app.run()
    if app.return_code not in (None, 0):
        return int(app.return_code)
    return int(result or 0)
