"""search_files: regex over contents or glob over names, in pure Python.

Pure Python keeps one regex dialect (Python's ``re``) on every backend and
needs no extra binary; the walk skips .git/node_modules/caches and never
follows a symlink out of the workspace. Bounded: at most MAX_FILES files, files
up to 50 MB each (larger ones are skipped), and SEARCH_TIMEOUT_S of wall time
(``HERMES_SEARCH_TIMEOUT_S``): past it the search stops between files and returns
what it found, marked as a timeout.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import re
import time
from typing import Any

from environments.redact import redact_known
from environments.tools.file_access import FileToolError, open_fs

MAX_FILES = 20_000
SEARCH_TIMEOUT_S = 30.0
_CHECK_EVERY_LINES = 2000


def search_timeout_s() -> float:
    raw = os.environ.get("HERMES_SEARCH_TIMEOUT_S", "")
    try:
        return float(raw) if raw.strip() else SEARCH_TIMEOUT_S
    except ValueError:
        return SEARCH_TIMEOUT_S


MAX_LINE_CHARS = 500  # a minified line must not flood the result


def _clip(line: str) -> str:
    line = redact_known(line)  # the console's own secrets never reach the model
    return line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + "…"


def _glob_match(glob: str, display: str) -> bool:
    return fnmatch.fnmatch(posixpath.basename(display), glob) or fnmatch.fnmatch(display, glob)


def search_files(
    pattern: str,
    target: str = "content",
    path: str = ".",
    file_glob: str | None = None,
    limit: int = 50,
    offset: int = 0,
    output_mode: str = "content",
    context: int = 0,
    task_id: str | None = None,
) -> dict[str, Any]:
    if target not in ("content", "files"):
        return {"error": f"'target' must be 'content' or 'files', got {target!r}"}
    if output_mode not in ("content", "files_only", "count"):
        return {"error": f"'output_mode' must be 'content', 'files_only' or 'count', got {output_mode!r}"}
    if limit < 1 or offset < 0 or context < 0:
        return {
            "error": f"'limit' must be >= 1 and 'offset'/'context' >= 0, got limit={limit}, offset={offset}, context={context}"
        }
    regex: re.Pattern[str] | None = None
    if target == "content":
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            return {"error": f"'pattern' {pattern!r} is not a valid regular expression: {exc}"}
    try:
        fs = open_fs(task_id)
        view = fs.resolve(path)
        if fs.stat(view).kind == "missing":
            return {"error": f"search path '{path}' does not exist"}
        budget = search_timeout_s()
        deadline = time.monotonic() + budget
        timed_out = False

        def in_time(walked: Any) -> Any:
            nonlocal timed_out
            for n, entry in enumerate(walked):
                if n and time.monotonic() > deadline:  # the first file always gets looked at
                    timed_out = True
                    return
                yield entry

        files = in_time(fs.walk(view, MAX_FILES, read=target == "content"))

        if target == "files":
            found = [fs.display(p) for p, _ in files]
            found = [p for p in found if _glob_match(pattern, p) and (not file_glob or _glob_match(file_glob, p))]
            page = found[offset : offset + limit]
            return _timed(
                {"total_count": len(found), "files": page, "truncated": offset + limit < len(found)}, timed_out, budget
            )

        assert regex is not None
        matches: list[dict[str, Any]] = []
        counts: dict[str, int] = {}
        for view_path, data in files:
            shown = fs.display(view_path)
            if file_glob and not _glob_match(file_glob, shown):
                continue
            if data is None or b"\x00" in data[:8192]:
                continue  # unreadable or binary
            lines = data.decode("utf-8", errors="replace").splitlines()
            for number, line in enumerate(lines, start=1):
                if number % _CHECK_EVERY_LINES == 0 and time.monotonic() > deadline:
                    timed_out = True
                    break
                if not regex.search(line):
                    continue
                counts[shown] = counts.get(shown, 0) + 1
                if output_mode == "content":
                    entry: dict[str, Any] = {"path": shown, "line": number, "content": _clip(line)}
                    if context:
                        entry["before"] = [_clip(x) for x in lines[max(0, number - 1 - context) : number - 1]]
                        entry["after"] = [_clip(x) for x in lines[number : number + context]]
                    matches.append(entry)
    except FileToolError as exc:
        return {"error": str(exc)}

    if output_mode == "content":
        out = {
            "total_count": len(matches),
            "matches": matches[offset : offset + limit],
            "truncated": offset + limit < len(matches),
        }
    elif output_mode == "files_only":
        names = list(counts)
        out = {
            "total_count": len(names),
            "files": names[offset : offset + limit],
            "truncated": offset + limit < len(names),
        }
    else:
        items = list(counts.items())[offset : offset + limit]
        out = {"total_count": sum(counts.values()), "counts": dict(items), "truncated": offset + limit < len(counts)}
    return _timed(out, timed_out, budget)


def _timed(result: dict[str, Any], timed_out: bool, budget: float) -> dict[str, Any]:
    """A search that ran out of time says so (a tool error, like a terminal timeout) and keeps what it found."""
    if timed_out:
        result["truncated"] = True
        result["timed_out"] = True
        result["error"] = (
            f"search_files timed out after {budget:g}s; the results are partial. Narrow 'path' or 'file_glob'."
        )
    return result
