"""``--headless``: the same host, a rich progress bar instead of the UI, a summary at the end.

Exit codes: 0 finished (or stopped on request), 1 fatal error (bad env/config,
server unreachable, setup raised), 130 interrupted by SIGINT after a graceful stop.
"""

from __future__ import annotations

import math
import signal
import threading
import time
from typing import Any, Optional

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from hermes_console.runtime.state import ConsoleState

REFRESH_S = 0.25
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
    t.add_row("rollouts", f"{state.rollouts_finished} finished, tool calls {state.tool_calls_total} ({state.tool_errors_total} errors)")
    dh = state.data_health
    if dh.rollouts:
        figures = (f"trained {dh.trainable_tokens}/{dh.tokens} tokens ({dh.trained_share:.0%}), "
                   f"turns {dh.trainable_turns}/{dh.assistant_turns}, drift {dh.drift}, "
                   f"multi-node {dh.multi_node}, placeholder {dh.placeholder}")
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


def run_headless(runtime: Any, console: Optional[Console] = None, drain_deadline_s: float = 10.0) -> int:
    """Start ``runtime``, show progress until it is done, print the summary; return the exit code."""
    console = console or Console(stderr=False)
    state = ConsoleState()
    interrupted = threading.Event()

    def on_sigint(signum: int, frame: Any) -> None:
        if interrupted.is_set():
            raise KeyboardInterrupt  # second Ctrl-C: stop waiting
        interrupted.set()
        console.print(f"[yellow]stopping: draining in-flight groups for up to {drain_deadline_s:g}s (Ctrl-C again to abort)")
        runtime.stop(drain_deadline_s)

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGINT, on_sigint)
    runtime.start()
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
    )
    try:
        with Progress(*columns, console=console, transient=False) as progress:
            task = progress.add_task("loading", total=None, info="")
            while True:
                batch = runtime.drain()
                state.apply_all(batch)
                for event in batch:
                    if event.kind == "log_record" and event.level in ("ERROR", "CRITICAL"):
                        progress.console.print(f"{event.level} {event.logger}: {event.message}", markup=False, highlight=False)
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
    except KeyboardInterrupt:
        console.print("[red]aborted before the runtime finished stopping")
        runtime.stop(0.0)
        runtime.done.result(timeout=30)
        state.apply_all(runtime.drain())
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    runtime.join(10.0)
    if state.accounting.received or state.status != "error":
        console.print(summary_table(state))
    if state.status == "error" or getattr(runtime, "fatal", None) is not None:
        from environments.redact import redact

        detail = redact(state.status_detail or str(getattr(runtime, "fatal", "")))
        console.print(f"error: {detail}", style="bold red", markup=False, highlight=False)
        return EXIT_FATAL
    return EXIT_INTERRUPTED if interrupted.is_set() else EXIT_OK
