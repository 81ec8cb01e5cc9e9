"""Bounded disk use for throwaway runs: keep the newest N run directories of one env
under runs/ and delete the older ones (``hermes-console demo --keep-runs``)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

# default_run_dir's names: <env>-YYYYMMDD-HHMMSS, -<n> when two start in the same second.
_STAMP = r"-(\d{8}-\d{6})(?:-(\d+))?$"


def run_dirs(runs_dir: str, env_prefix: str) -> list[Path]:
    """``env_prefix``'s run directories under ``runs_dir``, oldest first (by their name's stamp)."""
    pattern = re.compile(re.escape(env_prefix) + _STAMP)
    root = Path(runs_dir)
    if not root.is_dir():
        return []
    found = []
    for path in root.iterdir():
        match = pattern.match(path.name)
        if match and path.is_dir() and not path.is_symlink():
            found.append((match.group(1), int(match.group(2) or 0), path))
    return [path for _, _, path in sorted(found)]


def rotate(runs_dir: str, env_prefix: str, keep: int) -> list[Path]:
    """Delete all but the newest ``keep`` (>= 0) run directories of ``env_prefix``; returns
    the deleted ones. Other names under runs/ are never touched."""
    found = run_dirs(runs_dir, env_prefix)
    old = found[: len(found) - max(0, keep)]
    for path in old:
        shutil.rmtree(path, ignore_errors=True)
    return old
