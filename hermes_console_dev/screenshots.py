"""Regenerate the README screenshots from the real app fed by deterministic event logs.

    python -m hermes_console_dev.screenshots OUT_DIR [--fixtures DIR]

Each scene replays one fixture log (tests/ui/fixtures/*.jsonl, written by
``python -m tests.ui.eventlog``) into a :class:`ScriptedRuntime`, with the clock
fixed at the log's last event, then opens the scene's screen and saves an SVG.
The snapshot tests use the same scenes, so the screenshots are what CI checks.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textual.pilot import Pilot

from environments.events import Event, event_from_dict
from hermes_console.ui.app import ConsoleApp
from hermes_console.ui.config import ConsoleConfig
from hermes_console.ui.screens.evaluation import EvaluationScreen
from hermes_console.ui.screens.rollout import RolloutScreen
from hermes_console.ui.screens.sandbox import SandboxScreen
from hermes_console.ui.widgets.turns_stream import TurnsStream

DEFAULT_FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "ui" / "fixtures"


class ScriptedRuntime:
    """A live-looking RuntimeAPI over a fixed list of events; commands succeed at once.

    Sandbox details are synthesised (in the real runtime's shape: ``process_tree``,
    ``recent_commands``) so the sandbox screen has content.
    """

    def __init__(self, events: list[Event]) -> None:
        self._events = list(events)
        self.fatal: BaseException | None = None
        self._finished: Future[None] = Future()

    @property
    def done(self) -> Future[None]:
        return self._finished

    def join(self, timeout: float | None = None) -> bool:
        return True

    @property
    def is_live(self) -> bool:
        return True

    @property
    def pending(self) -> int:
        return len(self._events)

    def drain(self, max_events: int | None = None) -> list[Event]:
        n = len(self._events) if max_events is None else max_events
        out, self._events = self._events[:n], self._events[n:]
        return out

    def start(self) -> None:
        pass

    @staticmethod
    def _done(value: Any = None) -> Future[Any]:
        future: Future = Future()
        future.set_result(value)
        return future

    def stop(self, drain_deadline_s: float = 10.0) -> Future[None]:
        if not self._finished.done():
            self._finished.set_result(None)
        return self._finished

    def pause(self) -> Future[None]:
        return self._done()

    def resume(self) -> Future[None]:
        return self._done()

    def cancel_in_flight(self) -> Future[int]:
        return self._done(0)

    def switch_phase(self, phase: int, cancel_in_flight: bool = False) -> Future[None]:
        return self._done()

    def evaluate(self, pause_intake: bool = False) -> Future[dict[str, Any]]:
        return self._done({})

    def kill_sandbox(self, task_id: str) -> Future[bool]:
        return self._done(True)

    def extend_sandbox(self, task_id: str, seconds: float) -> Future[float]:
        return self._done(seconds)

    def run_in_sandbox(self, task_id: str, command: str, timeout_s: float = 10.0) -> Future[dict[str, Any]]:
        return self._done({"output": "", "exit_code": 0, "duration_s": 0.0})

    def sandbox_details(self, task_id: str) -> Future[dict[str, Any]]:
        return self._done(
            {
                "cwd": f"/tmp/hermes/{task_id}/src",
                "process_tree": [
                    {"pid": 4101, "ppid": 1, "command": "bash --noprofile --norc", "state": "S", "elapsed_s": 212.0},
                    {
                        "pid": 4188,
                        "ppid": 4101,
                        "command": "find src -type f -printf '%s %p\\n'",
                        "state": "R",
                        "elapsed_s": 95.0,
                    },
                    {"pid": 4189, "ppid": 4101, "command": "sort -n", "state": "S", "elapsed_s": 95.0},
                ],
                "live_output": {
                    "command": "find src -type f -printf '%s %p\\n' | sort -n",
                    "running_s": 95.0,
                    "bytes": 139,
                    "tail": "12 src/__init__.py\n96 src/test_calc.py\n310 src/calc.py\n2048 src/vendor/big.py\n",
                },
                "recent_commands": [
                    {
                        "command": "ls -la",
                        "duration_s": 0.02,
                        "exit_code": 0,
                        "output_head": "total 12\n-rw-r--r-- 1 agent agent 310 calc.py\n-rw-r--r-- 1 agent agent 96 test_calc.py",
                    },
                    {
                        "command": "python -m pytest -q",
                        "duration_s": 1.42,
                        "exit_code": 1,
                        "output_head": "F.\nFAILED test_calc.py::test_add - assert -1 == 5",
                    },
                    {
                        "command": "cat calc.py",
                        "duration_s": 0.01,
                        "exit_code": 0,
                        "output_head": "def add(a, b):\n    return a - b",
                    },
                ],
            }
        )


async def _settle(pilot: Pilot, rounds: int = 4) -> None:
    # The app drains by a time budget, so a loaded machine needs more ticks for the
    # whole log: wait for it (bounded), then settle, so every capture is the same.
    runtime = getattr(pilot.app, "runtime", None)
    for _ in range(500):
        if not getattr(runtime, "pending", 0):
            break
        await pilot.pause(0.02)
    for _ in range(rounds):
        await pilot.pause()
        await pilot.pause(0.02)
    # The tail's first scroll-to-end can land before the last layout pass; pin it so
    # every capture shows the same rows and scrollbar thumb.
    for stream in pilot.app.query(TurnsStream):
        if stream.following:
            stream.follow()
    await pilot.pause()


async def _main(pilot: Pilot) -> None:
    await _settle(pilot)


async def _rollout(pilot: Pilot) -> None:
    await _settle(pilot)
    pilot.app.push_screen(RolloutScreen("g0033-r1"))
    await _settle(pilot)


async def _sandbox(pilot: Pilot) -> None:
    await _settle(pilot)
    pilot.app.push_screen(SandboxScreen("g0033-r2"))
    await _settle(pilot, 6)


async def _evaluation(pilot: Pilot) -> None:
    await _settle(pilot)
    pilot.app.push_screen(EvaluationScreen("eval-0001"))
    await _settle(pilot)


async def _errors(pilot: Pilot) -> None:
    await _settle(pilot)
    pilot.app.screen.action_toggle_errors_only()  # errors-only tool table (as the `o` key does)
    await _settle(pilot)


async def _rollouts(pilot: Pilot) -> None:
    from hermes_console.ui.screens.rollouts import RolloutQuery, RolloutsScreen

    await _settle(pilot)
    pilot.app.push_screen(RolloutsScreen(RolloutQuery(sort="score")))
    await _settle(pilot)


async def _transcript(pilot: Pilot) -> None:
    from hermes_console.ui.screens.transcript import TranscriptScreen

    await _settle(pilot)
    pilot.app.push_screen(TranscriptScreen("g0095-r1"))
    await _settle(pilot)
    pilot.app.screen.action_toggle_results()  # tool results expanded
    await _settle(pilot)


async def _insight(pilot: Pilot) -> None:
    from hermes_console.ui.screens.insight import InsightScreen

    await _settle(pilot)
    pilot.app.push_screen(InsightScreen())
    await _settle(pilot)


SAMPLE_CONFIG = [
    {"section": "env", "key": "env.group_size", "value": "4", "source": "flags"},
    {"section": "env", "key": "env.max_agent_turns", "value": "8", "source": "config_init()"},
    {"section": "env", "key": "env.max_token_length", "value": "4096", "source": "config file 'demo.yaml'"},
    {"section": "env", "key": "env.terminal_backend", "value": "'local'", "source": "config_init()"},
    {"section": "env", "key": "env.use_wandb", "value": "False", "source": "process mode default (offline)"},
    {
        "section": "env",
        "key": "env.data_path_to_save_groups",
        "value": "runs/terminal_tasks/groups.jsonl",
        "source": "run dir default",
    },
    {
        "section": "openai",
        "key": "openai[0].base_url",
        "value": "http://127.0.0.1:8100/v1",
        "source": "config file 'demo.yaml' openai[0]",
    },
    {"section": "openai", "key": "openai[0].api_key", "value": "(set, hidden)", "source": "config_init()"},
    {
        "section": "phase2",
        "key": "phase2[0].server_type",
        "value": "'vllm'",
        "source": "phase 1 server as token-level (vllm)",
    },
    {"section": "run", "key": "run.phase", "value": "1", "source": "derived from the server types"},
]


async def _config(pilot: Pilot) -> None:
    from hermes_console.runtime import events as rev
    from hermes_console.ui.screens.config_view import ConfigScreen

    await _settle(pilot)
    # The fixture logs predate the config rows: give the run its resolved config as a live run would.
    run = pilot.app.state.run
    pilot.app.apply_events(
        [
            rev.RunConfigured(
                ts=pilot.app.now(),
                env_name=run.env_name,
                mode=run.mode,
                phase=run.phase,
                group_size=run.group_size,
                max_in_flight=run.max_in_flight,
                worker_timeout_s=run.worker_timeout_s,
                config=SAMPLE_CONFIG,
            )
        ]
    )
    pilot.app.push_screen(ConfigScreen())
    await _settle(pilot)


@dataclass(frozen=True)
class Scene:
    log: str
    size: tuple[int, int]
    run_before: Callable[[Pilot], Awaitable[None]]


SCENES: dict[str, Scene] = {
    "main": Scene("main.jsonl", (200, 50), _main),
    "main_compact": Scene("main.jsonl", (80, 24), _main),
    "rollout": Scene("main.jsonl", (200, 50), _rollout),
    "sandbox": Scene("main.jsonl", (200, 50), _sandbox),
    "evaluation": Scene("evaluation.jsonl", (200, 50), _evaluation),
    "phase_switch": Scene("phase_switch.jsonl", (200, 50), _main),
    "errors": Scene("errors.jsonl", (200, 50), _errors),
    "serve": Scene("serve.jsonl", (200, 50), _main),
    "rollouts": Scene("main.jsonl", (200, 50), _rollouts),
    "rollouts_80x24": Scene("main.jsonl", (80, 24), _rollouts),
    "transcript": Scene("main.jsonl", (160, 45), _transcript),
    "transcript_120x40": Scene("main.jsonl", (120, 40), _transcript),
    "insight": Scene("errors.jsonl", (200, 50), _insight),
    "insight_120x40": Scene("errors.jsonl", (120, 40), _insight),
    "config": Scene("main.jsonl", (160, 45), _config),
    "main_120x40": Scene("main.jsonl", (120, 40), _main),
}


def read_log(path: Path) -> list[Event]:
    with path.open(encoding="utf-8") as fh:
        return [event_from_dict(json.loads(line)) for line in fh if line.strip()]


def build_app(scene: str, fixtures: Path = DEFAULT_FIXTURES) -> ConsoleApp:
    """The console over the scene's log, clock fixed at the log's last event."""
    events = read_log(fixtures / SCENES[scene].log)
    now = max(e.ts for e in events)
    # No flood line cap, no CPU budget: what a capture shows must not depend on how fast this machine drains
    config = ConsoleConfig(tick_hz=20.0, flood_lines_per_tick=1_000_000, ui_cpu_share=0.0)  # nor its CPU speed
    return ConsoleApp(ScriptedRuntime(events), now=now, config=config)


async def capture(scene: str, out_dir: Path, fixtures: Path = DEFAULT_FIXTURES) -> Path:
    app = build_app(scene, fixtures)
    spec = SCENES[scene]
    path = out_dir / f"{scene}.svg"
    async with app.run_test(size=spec.size) as pilot:
        await spec.run_before(pilot)
        path.write_text(app.export_screenshot(title=f"hermes-console — {scene}"), encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hermes_console_dev.screenshots", description=__doc__.split("\n")[0]
    )
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--fixtures", type=Path, default=DEFAULT_FIXTURES, help="directory with the *.jsonl logs")
    parser.add_argument("--scene", action="append", choices=sorted(SCENES), help="only these scenes")
    args = parser.parse_args(argv)
    missing = sorted({s.log for s in SCENES.values() if not (args.fixtures / s.log).is_file()})
    if missing:
        print(
            f"screenshots: missing fixture logs in {args.fixtures}: {', '.join(missing)} "
            "(write them with: python -m tests.ui.eventlog)",
            file=sys.stderr,
        )
        return 2
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for scene in args.scene or list(SCENES):
        path = asyncio.run(capture(scene, args.out_dir, args.fixtures))
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
