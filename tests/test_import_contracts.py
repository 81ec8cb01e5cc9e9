"""The import-linter contracts in pyproject.toml hold (runtime/sim never import Textual or the UI;
environments never import the console)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_linter_contracts_are_kept():
    lint = Path(sys.executable).with_name("lint-imports")
    assert lint.exists(), f"import-linter is not installed in {lint.parent}"
    proc = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=100)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout
