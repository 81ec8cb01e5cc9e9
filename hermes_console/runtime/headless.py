"""``--headless``: the same host, a rich progress bar instead of the UI, a summary at the end.

Exit codes: 0 finished, 1 fatal error (bad env/config, server unreachable, setup
raised), 128+N stopped by signal N after a graceful stop (130 SIGINT, 143 SIGTERM, 129 SIGHUP).
A SIGTERM (what Slurm, Kubernetes and systemd send) that drained with nothing lost -- no group
cancelled, none left in flight, every kept group confirmed by the trainer -- exits
``sigterm_exit_code`` (0 by default: the stop was asked for and done; 143 makes a Kubernetes
Job retry the shard).
"""

from __future__ import annotations

import math
import signal
import threading
import time
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from hermes_console.runtime import gc_tuning
from hermes_console.runtime.state import ConsoleState

if TYPE_CHECKING:
    from hermes_console.runtime.api import RuntimeAPI

REFRESH_S = 0.25
PROGRESS_EVERY_S = 10.0  # without a terminal (Slurm/K8s logs): one progress line this often
EXIT_OK, EXIT_FATAL, EXIT_INTERRUPTED = 0, 1, 130


def _fmt(x: float) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def summary_table(state: ConsoleState) -> Table:
    acc = state.accounting
    t = Table(title="hermes-console run summary", show_header=False, title_justify="left")
    t.add_column("what", style="bold")
    t.add_column("value")
    t.add_row("env / mode", f"{state.run.env_name} / {state.run.mode} (phase {state.run.phase})")
    if state.run.shard:
        t.add_row("shard", state.run.shard)
    t.add_row("status", f"{state.status} {state.status_detail.splitlines()[0] if state.status_detail else ''}")
    t.add_row(
        "accounting",
        f"received {acc.received} = completed {acc.completed} + dropped {acc.dropped_total} + failed {acc.failed} "
        f"+ cancelled {acc.cancelled} + in flight {acc.in_flight}",
    )
    for reason, n in sorted(acc.dropped.items()):
        t.add_row("  dropped", f"{n} × {reason}")
    errors = {k: v for k, v in state.errors_by_kind.items() if not k.startswith("dropped:")}
    for kind, n in sorted(errors.items(), key=lambda kv: -kv[1]):
        t.add_row("  errors", f"{n} × {kind}")
    rs = state.reward_summary()
    t.add_row("rewards", f"n={rs['n']} mean={_fmt(rs['mean'])} p50={_fmt(rs['p50'])} p90={_fmt(rs['p90'])}")
    t.add_row(
        "rollouts",
        f"{state.rollouts_finished} finished, tool calls {state.tool_calls_total} ({state.tool_errors_total} errors)",
    )
    dh = state.data_health
    if dh.rollouts:
        figures = (
            f"trained {dh.trainable_tokens}/{dh.tokens} tokens ({dh.trained_share:.0%}), "
            f"turns {dh.trainable_turns}/{dh.assistant_turns}, drift {dh.drift}, "
            f"multi-node {dh.multi_node}, placeholder {dh.placeholder}"
        )
        problems = dh.problems()
        t.add_row("data", figures if not problems else f"[bold red]UNHEALTHY[/] {figures}")
        for problem in problems:
            t.add_row("  data", f"[red]{problem}[/]")
    t.add_row("loop lag", f"last {state.loop_lag_ms:.1f} ms, max {state.loop_lag_max_ms:.1f} ms")
    t.add_row("jsonl", state.run.jsonl_path or "-")
    if state.wandb is not None:
        t.add_row("wandb", wandb_line(state.wandb))
    for ev in state.evals.values():
        t.add_row(f"eval {ev.eval_id}", f"{ev.status} {ev.metrics if not ev.error else ev.error}")
    return t


def wandb_line(w: Any) -> str:
    """Where the run logs to wandb, in one line (status bar and summary)."""
    where = w.url or w.path or f"{w.project}/{w.name}"
    text = f"{w.state} ({w.mode}) {where}".rstrip()
    if w.mode == "offline" and w.path:
        text += f"  — sync later: wandb sync {w.path}"
    if w.log_errors:
        text += f"  [{w.log_errors} log error(s)]"
    if w.detail and w.state == "failed":
        text += f": {w.detail}"
    return text


STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")
FORCE_WAIT_S = 60.0  # after a forced stop: in-flight groups are cancelled, outputs closed


def _install_stop_handlers(on_signal: Any) -> dict[int, Any]:
    """SIGINT, SIGTERM and SIGHUP all take the graceful path (main thread only)."""
    previous: dict[int, Any] = {}
    if threading.current_thread() is not threading.main_thread():
        return previous
    for name in STOP_SIGNALS:
        signum = getattr(signal, name, None)
        if signum is not None:
            previous[signum] = signal.signal(signum, on_signal)
    return previous


def _say(console: Console, text: str, wrap: bool = True) -> None:
    """Print, but never let a closed terminal (SIGHUP) break the stop. ``wrap=False``: one
    line whatever the width (log lines stay greppable)."""
    try:
        console.print(text, markup=False, highlight=False, soft_wrap=not wrap)
    except (OSError, ValueError):
        pass


def progress_line(state: ConsoleState, now: float) -> str:
    """One greppable line of where the run is, for logs (no terminal to draw a bar on)."""
    acc = state.accounting
    rs = state.reward_summary()
    errors = sum(v for k, v in state.errors_by_kind.items() if not k.startswith("dropped:"))
    parts = [
        f"progress status={state.status}",
        f"received={acc.received} completed={acc.completed} dropped={acc.dropped_total} failed={acc.failed} "
        f"cancelled={acc.cancelled} in_flight={acc.in_flight}",
        f"rollouts_per_s={state.rollouts_per_s(now):.2f} reward_mean={_fmt(rs['mean'])} errors={errors}",
    ]
    if state.run.shard:
        parts.append(f"shard={state.run.shard.split(' ')[0]}")
    if state.trainer is not None:
        t = state.trainer
        parts.append(
            f"trainer={t.state} step={t.current_step}/{t.total_steps} confirmed={t.groups_sent} "
            f"unknown={t.send_unknown} send_errors={t.send_errors}"
        )
    return " ".join(parts)


def _progress_every() -> float:
    """``HERMES_PROGRESS_EVERY`` seconds (0 turns the lines off), else PROGRESS_EVERY_S."""
    import os

    raw = os.environ.get("HERMES_PROGRESS_EVERY", "")
    try:
        return max(0.0, float(raw)) if raw.strip() else PROGRESS_EVERY_S
    except ValueError:
        return PROGRESS_EVERY_S


def run_headless(
    runtime: RuntimeAPI,
    console: Console | None = None,
    drain_deadline_s: float = 10.0,
    sigterm_exit_code: int = EXIT_OK,
    freeze_gc_when_loaded: bool = False,
) -> int:
    """Start ``runtime``, show progress until it is done, print the summary; return the exit code.

    The first SIGINT/SIGTERM/SIGHUP stops gracefully (drain up to ``drain_deadline_s``); a
    second one forces the stop: in-flight groups are cancelled (and accounted) at once.
    ``freeze_gc_when_loaded``: this process is the run's (the CLI, which also raised the
    collector's thresholds): what is alive once the env is loaded (the status leaves
    "loading") is frozen out of later collections (``gc_tuning``)."""
    console = console or Console(stderr=False)
    state = ConsoleState()
    received: list[int] = []  # signals, in order; handled by the loop below (not in the handler)
    handled = 0

    def on_signal(signum: int, frame: Any) -> None:
        received.append(signum)

    previous = _install_stop_handlers(on_signal)
    frozen = not freeze_gc_when_loaded  # freeze once, when the env is loaded
    runtime.start()
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
    )

    def handle_signals(out: Console) -> None:
        nonlocal handled
        while handled < len(received):
            name = signal.Signals(received[handled]).name
            if handled == 0:
                _say(
                    out,
                    f"{name}: stopping, draining in-flight groups for up to {drain_deadline_s:g}s "
                    "(send it again to cancel them now)",
                )
                runtime.stop(drain_deadline_s)
            elif handled == 1:
                _say(out, f"{name} again: cancelling in-flight groups now")
                runtime.stop(0.0)
            handled += 1

    # A bar is drawn on a terminal; a log (Slurm, K8s, a file) gets a progress line now and then.
    log_every = 0.0 if console.is_terminal else _progress_every()
    next_log = time.monotonic() + log_every
    try:
        with Progress(*columns, console=console, transient=False) as progress:
            task = progress.add_task("loading", total=None, info="")
            while True:
                handle_signals(progress.console)
                if log_every and time.monotonic() >= next_log:
                    next_log = time.monotonic() + log_every
                    _say(progress.console, progress_line(state, time.time()), wrap=False)
                batch = runtime.drain()
                state.apply_all(batch)
                if not frozen and state.status not in ("loading", "error"):
                    gc_tuning.freeze_loaded()
                    frozen = True
                for event in _records(batch):
                    if event.level in ("ERROR", "CRITICAL"):
                        _say(progress.console, f"{event.level} {event.logger}: {event.message}")
                acc = state.accounting
                done = acc.completed + acc.dropped_total + acc.failed
                total = state.run.total_steps if state.run.mode == "process" and state.run.total_steps > 0 else None
                rs = state.reward_summary()
                info = (
                    f"{state.rollouts_per_s(time.time()):.1f} rollouts/s  reward {_fmt(rs['mean'])}  "
                    f"errors {sum(v for k, v in state.errors_by_kind.items() if not k.startswith('dropped:'))}  "
                    f"in flight {acc.in_flight}"
                )
                progress.update(task, description=state.status, completed=done, total=total, info=info)
                if runtime.done.done():
                    state.apply_all(runtime.drain())
                    break
                time.sleep(REFRESH_S)
    except BaseException as exc:  # e.g. the terminal went away: still stop cleanly
        _say(console, f"the progress display failed ({type(exc).__name__}: {exc}); stopping the run")
        _force_stop(runtime, state)
        if not isinstance(exc, (OSError, ValueError, KeyboardInterrupt)):
            raise
    finally:
        handle_signals(console)  # a signal during the last refresh is still honoured
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    runtime.join(10.0)
    interrupted = bool(received)
    try:
        if state.accounting.received or state.status != "error":
            console.print(summary_table(state))
        if state.status == "error" or runtime.fatal is not None:
            from environments.redact import redact

            detail = redact(state.status_detail or str(runtime.fatal or ""))
            console.print(f"error: {detail}", style="bold red", markup=False, highlight=False)
            return EXIT_FATAL
    except (OSError, ValueError):  # no terminal left to print the summary on
        pass
    if state.status == "error" or runtime.fatal is not None:
        return EXIT_FATAL
    if not interrupted:
        return EXIT_OK
    if received == [signal.SIGTERM] and lost_nothing(state):
        return sigterm_exit_code
    return 128 + received[0]


def lost_nothing(state: ConsoleState) -> bool:
    """After a graceful stop: nothing cancelled or left in flight, and (serve mode) every kept
    group confirmed by the trainer -- none failed, none with an unknown outcome."""
    acc = state.accounting
    if acc.in_flight or acc.cancelled:
        return False
    return state.trainer is None or not state.trainer.send_errors


def _force_stop(runtime: RuntimeAPI, state: ConsoleState) -> None:
    """Cancel what is in flight and wait (bounded) until outputs are closed."""
    runtime.stop(0.0)
    try:
        runtime.done.result(timeout=FORCE_WAIT_S)
    except Exception:  # noqa: BLE001 - the runtime is stuck: exit anyway, the recorder closes at exit
        pass
    state.apply_all(runtime.drain())


def _records(batch: list[Any]) -> list[Any]:
    """Log records in a drained batch, including those the queue folded into a segment."""
    out = []
    for item in batch:
        if item.kind == "log_record":
            out.append(item)
        elif item.kind == "coalesced":
            out.extend(item.logs or ())
    return out
