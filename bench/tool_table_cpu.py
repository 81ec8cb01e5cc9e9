"""UI-thread CPU of one tool-table redraw in a flood: the DataTable version vs the Line-API one.

    python -m bench.tool_table_cpu [--old 1901527] [--rounds 6] [--turnovers 5] [--size 80x24] [--sort args]

A ``ConsoleState`` holds 500 tool calls; between two redraws ``--new-calls`` (default 600)
more arrive, so the table's whole 500-row window turns over (as in the P3 flood). One
sample = ``update_from`` + the repaint Textual then does (``pilot.pause``: the idle pass,
layout, the compositor asking the table for its visible lines), measured with
``time.thread_time`` (this thread's CPU, not waits). The table fills a headless app of
``--size``. Old = ``tool_calls_table.py`` at ``--old`` (the ``KeyedTable`` / ``DataTable``
version, loaded from git), new = this tree. Rounds alternate which side goes first; each
round builds a fresh app per side and takes ``--turnovers`` samples after one warm-up.
``--sort COLUMN``: the table is sorted by that column first (new calls land in their place).
Medians; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import subprocess
import sys
import time
import types
from typing import Any

from textual.app import App, ComposeResult

from bench.common import REPO, load_average, median, rnd
from environments import events as ev
from hermes_console.runtime.state import ConsoleState
from hermes_console.ui.widgets import tool_calls_table as new_module

OLD_PATH = "hermes_console/ui/widgets/tool_calls_table.py"
NOW = 1_767_226_000.0


def _old_class(rev: str) -> type:
    source = subprocess.run(
        ["git", "show", f"{rev}:{OLD_PATH}"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    module = types.ModuleType("bench_old_tool_calls_table")
    exec(compile(source, f"{rev}:{OLD_PATH}", "exec"), module.__dict__)  # our own file at a commit
    return module.ToolCallsTable


def _calls(state: ConsoleState, first: int, n: int) -> None:
    for i in range(first, first + n):
        rid, call_id = f"r{i % 1024}", f"c{i}"
        state.apply(
            ev.ToolCallStarted(
                ts=NOW, rollout_id=rid, turn=i, call_id=call_id, tool_name="terminal", args_head=f"ls -la /tmp/{i}"
            )
        )
        state.apply(
            ev.ToolCallFinished(
                ts=NOW,
                rollout_id=rid,
                turn=i,
                call_id=call_id,
                tool_name="terminal",
                duration_s=0.01,
                exit_code=int(i % 7 == 0),
            )
        )


class _Bench(App[None]):
    CSS = "#tools { height: 1fr; border: round $primary; }"

    def __init__(self, table_class: type) -> None:
        super().__init__()
        self.table_class = table_class

    def compose(self) -> ComposeResult:
        yield self.table_class(id="tools")


async def _side(
    table_class: type, size: tuple[int, int], turnovers: int, new_calls: int, sort: str | None
) -> list[dict[str, float]]:
    state = ConsoleState()
    _calls(state, 0, 500)
    app = _Bench(table_class)
    samples: list[dict[str, float]] = []
    async with app.run_test(size=size) as pilot:
        table: Any = app.query_one("#tools")
        table.update_from(state, NOW)
        if sort:
            table.sort_by(sort)
        await pilot.pause()
        await pilot.pause()
        for k in range(turnovers + 1):  # the first one warms up
            _calls(state, 500 + k * new_calls, new_calls)
            gc.collect()
            t0 = time.thread_time()
            table.update_from(state, NOW)
            t1 = time.thread_time()
            await pilot.pause()
            await pilot.pause()
            t2 = time.thread_time()
            if k:
                samples.append({"update_ms": (t1 - t0) * 1e3, "total_ms": (t2 - t0) * 1e3})
        assert table.row_count == 500, table.row_count
    return samples


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old", default="1901527", help="commit with the DataTable tool table")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--turnovers", type=int, default=5)
    p.add_argument("--new-calls", type=int, default=600)
    p.add_argument("--size", default="80x24")
    p.add_argument("--sort", default=None, help="sort the table by this column key first (e.g. args)")
    args = p.parse_args(argv)
    width, height = (int(x) for x in args.size.split("x"))
    sides = {"old": _old_class(args.old), "new": new_module.ToolCallsTable}
    got: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    load = [load_average()]
    for r in range(args.rounds):
        for name in ("old", "new") if r % 2 == 0 else ("new", "old"):
            got[name] += asyncio.run(_side(sides[name], (width, height), args.turnovers, args.new_calls, args.sort))
    load.append(load_average())
    out: dict[str, Any] = {"size": args.size, "sort": args.sort, "samples_per_side": len(got["new"]), "load": load}
    for name, samples in got.items():
        out[name] = {
            "update_ms_median": rnd(median([s["update_ms"] for s in samples]), 2),
            "update_plus_repaint_ms_median": rnd(median([s["total_ms"] for s in samples]), 2),
            "update_plus_repaint_ms_max": rnd(max(s["total_ms"] for s in samples), 2),
        }
    out["new_over_old"] = rnd(
        out["new"]["update_plus_repaint_ms_median"] / out["old"]["update_plus_repaint_ms_median"], 3
    )
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
