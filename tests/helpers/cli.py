"""The console's CLI as a subprocess: the interpreter running the tests, not a path
into a particular virtualenv (so a clone with its venv elsewhere, or none, works)."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CLI: list[str] = [sys.executable, "-m", "hermes_console"]
