"""Regenerate the README screenshots from the real app fed by deterministic event logs.

    python -m hermes_console_dev.screenshots OUT_DIR [--fixtures DIR]

Each scene replays one fixture log (tests/ui/fixtures/*.jsonl, written by
``python -m tests.ui.eventlog``) into a :class:`FakeRuntime`, with the clock
fixed at the log's last event, then opens the scene's screen and saves an SVG.
The snapshot tests use the same scenes, so the screenshots are what CI checks.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textual.pilot import Pilot

from environments.events import Event, event_from_dict
from hermes_console.runtime.events import ConfigRow
from hermes_console.runtime.payloads import CommandRecord, LiveOutput, ProcessInfo, SandboxDetails
from hermes_console.ui.app import ConsoleApp
from hermes_console.ui.config import ConsoleConfig
from hermes_console.ui.screens.evaluation import EvaluationScreen
from hermes_console.ui.screens.main import MainScreen
from hermes_console.ui.screens.rollout import RolloutScreen
from hermes_console.ui.screens.sandbox import SandboxScreen
from hermes_console.ui.widgets.turns_stream import TurnsStream
from hermes_console_dev.fake_runtime import FakeResults, FakeRuntime

DEFAULT_FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "ui" / "fixtures"


def _sandbox_scene_details(task_id: str) -> SandboxDetails:
    """The sandbox scene's details (the fixture logs carry no process tree): a long find | sort
    running, with its live output, after a failing test run."""
    return SandboxDetails(
        task_id=task_id,
        backend="local",
        workspace=f"/tmp/hermes/{task_id}",
        state="running",
        created_at=0.0,
        last_activity=0.0,
        lifetime_s=300.0,
        cwd=f"/tmp/hermes/{task_id}/src",
        process_tree=[
            ProcessInfo(pid=4101, ppid=1, command="bash --noprofile --norc", state="S", elapsed_s=212.0),
            ProcessInfo(pid=4188, ppid=4101, command="find src -type f -printf '%s %p\\n'", state="R", elapsed_s=95.0),
            ProcessInfo(pid=4189, ppid=4101, command="sort -n", state="S", elapsed_s=95.0),
        ],
        live_output=LiveOutput(
            command="find src -type f -printf '%s %p\\n' | sort -n",
            running_s=95.0,
            bytes=139,
            tail="12 src/__init__.py\n96 src/test_calc.py\n310 src/calc.py\n2048 src/vendor/big.py\n",
        ),
        recent_commands=[
            CommandRecord(
                command="ls -la",
                started_at=0.0,
                duration_s=0.02,
                exit_code=0,
                output_head="total 12\n-rw-r--r-- 1 agent agent 310 calc.py\n-rw-r--r-- 1 agent agent 96 test_calc.py",
            ),
            CommandRecord(
                command="python -m pytest -q",
                started_at=1.0,
                duration_s=1.42,
                exit_code=1,
                output_head="F.\nFAILED test_calc.py::test_add - assert -1 == 5",
            ),
            CommandRecord(
                command="cat calc.py",
                started_at=3.0,
                duration_s=0.01,
                exit_code=0,
                output_head="def add(a, b):\n    return a - b",
            ),
        ],
    )


SANDBOX_SCENE_TASK = "g0033-r2"


def _console(pilot: Pilot[Any]) -> ConsoleApp:
    app = pilot.app
    assert isinstance(app, ConsoleApp), f"expected the console app, got {type(app).__name__}"
    return app


async def _settle(pilot: Pilot[Any], rounds: int = 4) -> None:
    # The app drains by a time budget, so a loaded machine needs more ticks for the
    # whole log: wait for it (bounded), then settle, so every capture is the same.
    runtime = _console(pilot).runtime
    for _ in range(500):
        if not isinstance(runtime, FakeRuntime) or not runtime.backlog:
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


async def _main(pilot: Pilot[Any]) -> None:
    await _settle(pilot)


async def _rollout(pilot: Pilot[Any]) -> None:
    await _settle(pilot)
    pilot.app.push_screen(RolloutScreen("g0033-r1"))
    await _settle(pilot)


async def _sandbox(pilot: Pilot[Any]) -> None:
    await _settle(pilot)
    pilot.app.push_screen(SandboxScreen(SANDBOX_SCENE_TASK))
    await _settle(pilot, 6)


async def _evaluation(pilot: Pilot[Any]) -> None:
    await _settle(pilot)
    pilot.app.push_screen(EvaluationScreen("eval-0001"))
    await _settle(pilot)


async def _errors(pilot: Pilot[Any]) -> None:
    await _settle(pilot)
    screen = pilot.app.screen
    assert isinstance(screen, MainScreen), f"expected the main screen, got {type(screen).__name__}"
    screen.action_toggle_errors_only()  # errors-only tool table (as the `o` key does)
    await _settle(pilot)


async def _rollouts(pilot: Pilot[Any]) -> None:
    from hermes_console.ui.screens.rollouts import RolloutQuery, RolloutsScreen

    await _settle(pilot)
    pilot.app.push_screen(RolloutsScreen(RolloutQuery(sort="score")))
    await _settle(pilot)


async def _transcript(pilot: Pilot[Any]) -> None:
    from hermes_console.ui.screens.transcript import TranscriptScreen

    await _settle(pilot)
    pilot.app.push_screen(TranscriptScreen("g0095-r1"))
    await _settle(pilot)
    screen = pilot.app.screen
    assert isinstance(screen, TranscriptScreen), f"expected the transcript, got {type(screen).__name__}"
    screen.action_toggle_results()  # tool results expanded
    await _settle(pilot)


async def _insight(pilot: Pilot[Any]) -> None:
    from hermes_console.ui.screens.insight import InsightScreen

    await _settle(pilot)
    pilot.app.push_screen(InsightScreen())
    await _settle(pilot)


SAMPLE_CONFIG: list[ConfigRow] = [
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


async def _config(pilot: Pilot[Any]) -> None:
    from hermes_console.runtime import events as rev
    from hermes_console.ui.screens.config_view import ConfigScreen

    await _settle(pilot)
    # The fixture logs predate the config rows: give the run its resolved config as a live run would.
    app = _console(pilot)
    run = app.state.run
    app.apply_events(
        [
            rev.RunConfigured(
                ts=app.now(),
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
    run_before: Callable[[Pilot[Any]], Awaitable[None]]


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
    # No CPU budget: what a capture shows must not depend on this machine's CPU speed
    config = ConsoleConfig(tick_hz=20.0, ui_cpu_share=0.0)
    results = FakeResults(sandbox_details=_sandbox_scene_details(SANDBOX_SCENE_TASK))
    return ConsoleApp(FakeRuntime(events, results=results), now=now, config=config)


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
