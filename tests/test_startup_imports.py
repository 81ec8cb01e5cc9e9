"""What a console imports before its first frame.

On a slow box the way to the first frame is mostly imports and Textual's first styling, so
the modules the first frame does not need stay off it: pydantic (run configs), YAML (keymap
files), atroposlib and the model stack (loaded by the runtime after the first frame), and
the screens a key opens. Each run is a fresh interpreter: ``sys.modules`` is the oracle.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Not needed for the first frame; each costs tens of ms to import on a slow box.
HEAVY = (
    "pydantic",
    "yaml",
    "atroposlib",
    "transformers",
    "tokenizers",
    "openai",
    "aiohttp",
    "datasets",
    "wandb",
    "hermes_console.runtime.config",
    "hermes_console.runtime.replay",
    "hermes_console.ui.screens.sandbox",
    "hermes_console.ui.screens.transcript",
    "hermes_console.ui.screens.rollouts",
    "hermes_console.ui.screens.evaluation",
)

# The console is created: record what is imported by then, and leave before anything runs.
_CHILD = r"""
import json, os, sys
from hermes_console.ui import app as ui_app

def created(self, *args, **kwargs):
    print(json.dumps(sorted(sys.modules)), flush=True)
    os._exit(0)

ui_app.ConsoleApp.__init__ = created
from hermes_console import cli
cli.main(sys.argv[1:])
"""


def _modules_when_the_console_is_created(args: list[str], cwd: Path) -> set[str]:
    proc = subprocess.run([sys.executable, "-c", _CHILD, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip(), proc.stderr[-2000:]
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


def _heavy(modules: set[str] | list[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


@pytest.mark.timeout(180)
def test_the_demo_creates_its_console_before_any_heavy_import(tmp_path: Path) -> None:
    modules = _modules_when_the_console_is_created(["demo", "--runs-dir", str(tmp_path / "runs")], ROOT)
    assert "textual.app" in modules and "hermes_console.runtime.host" in modules  # the probe saw the UI
    assert _heavy(modules) == []


@pytest.mark.timeout(180)
def test_replay_creates_its_console_without_the_run_stack(tmp_path: Path) -> None:
    from tests.ui.eventlog import small_run, write_log

    log = tmp_path / "run.jsonl"
    write_log(small_run(), log)
    modules = _modules_when_the_console_is_created(["replay", str(log)], ROOT)
    assert "hermes_console.runtime.replay" in modules  # what replay needs, it has
    assert _heavy([m for m in modules if not m.startswith("hermes_console.runtime.replay")]) == []
