"""File tools: read_file, write_file, patch, search_files.

All paths are relative to the sandbox's current directory (or absolute inside
the sandbox view) and must stay inside the sandbox workspace. See
``file_access`` for how the workspace is reached on each backend.
"""

from __future__ import annotations

import difflib
import hashlib
import posixpath
import threading
from collections import OrderedDict
from typing import Any

from environments.redact import redact_known
from environments.tools.file_access import FileToolError, open_fs
from environments.tools.registry import register
from environments.tools.search import search_files

DEFAULT_READ_LIMIT = 500
MAX_READ_LIMIT = 2000
MAX_READ_CHARS = 100_000
MAX_TEXT_FILE_BYTES = 10 * 1024 * 1024  # read_file/patch load the whole file: check the size first
BINARY_SNIFF_BYTES = 8192
_BINARY_EXTENSIONS = frozenset(
    ".png .jpg .jpeg .gif .bmp .webp .ico .tiff .pdf .zip .gz .tgz .bz2 .xz .7z .tar .so .o .a .dylib .dll .exe "
    ".class .jar .pyc .whl .mp3 .mp4 .wav .ogg .mov .avi .sqlite .db .bin .npy .npz .pt .safetensors".split()
)

# task_id -> (view path, offset, limit) -> digest of what we returned, bounded per task.
_READS: dict[str, OrderedDict[tuple[str, int, int], str]] = {}
_READS_LOCK = threading.Lock()
_READS_PER_TASK = 256


def forget_task(task_id: str | None) -> None:
    """Drop read_file dedup state for a task (its sandbox is gone)."""
    with _READS_LOCK:
        _READS.pop(task_id or "default", None)


def _forget_on_close(task_id: str, reason: str) -> None:
    forget_task(task_id)


try:  # a closed sandbox's reads are stale: forget them whoever closed it (reaper, operator, cleanup)
    from environments.sandboxes import add_close_listener

    add_close_listener(_forget_on_close)
except ImportError:  # pragma: no cover - sandboxes are part of the tree
    pass


def _seen_before(task_id: str | None, key: tuple[str, int, int], digest: str) -> bool:
    with _READS_LOCK:
        reads = _READS.setdefault(task_id or "default", OrderedDict())
        previous = reads.pop(key, None)
        reads[key] = digest
        while len(reads) > _READS_PER_TASK:
            reads.popitem(last=False)
    return previous == digest


def _similar_files(fs: Any, view: str) -> list[str]:
    """Up to 5 files with a name like the missing one (same dir first, then the workspace)."""
    want = posixpath.basename(view)
    candidates: list[str] = []
    parent = posixpath.dirname(view)
    for directory in (parent, fs.workspace):
        try:
            if fs.stat(directory).kind == "dir":
                candidates.extend(fs.list_names(directory, 2000))
        except (FileToolError, OSError):
            continue
    names: dict[str, list[str]] = {}
    for path in dict.fromkeys(candidates):
        names.setdefault(posixpath.basename(path), []).append(path)
    close = difflib.get_close_matches(want, list(names), n=5, cutoff=0.5)
    stem = want.rsplit(".", 1)[0].lower()
    if stem:
        close += [n for n in names if stem in n.lower() and n not in close]
    out: list[str] = []
    for name in close:
        out.extend(fs.display(p) for p in names[name])
    return out[:5]


def _load_text(fs: Any, view: str, path: str) -> tuple[str | None, dict[str, Any] | None]:
    """(text, None) or (None, error dict) for a file the tools may edit or show."""
    st = fs.stat(view)
    if st.kind == "missing":
        return None, {"error": f"File not found: {path}", "similar_files": _similar_files(fs, view)}
    if st.kind == "dir":
        return None, {
            "error": f"'{path}' is a directory, not a file; list it with search_files(target='files') or terminal `ls`"
        }
    if st.kind != "file":
        return None, {"error": f"'{path}' is not a regular file (device, socket or fifo) and cannot be read"}
    ext = posixpath.splitext(view)[1].lower()
    if ext in _BINARY_EXTENSIONS:
        return None, {
            "error": f"'{path}' is a binary file ({ext}); read_file only shows text. Inspect it with terminal (e.g. `file`, `xxd | head`)"
        }
    if st.size > MAX_TEXT_FILE_BYTES:
        return None, {
            "error": f"'{path}' is {st.size} bytes, over the {MAX_TEXT_FILE_BYTES // (1024 * 1024)} MB limit of "
            "read_file/patch; look at part of it with terminal (e.g. `head -n 200`, `sed -n '1000,1200p'`, `grep -n`)"
        }
    data = fs.read(view, MAX_TEXT_FILE_BYTES)
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        return None, {
            "error": f"'{path}' looks binary (contains NUL bytes); read_file only shows text. Inspect it with terminal (e.g. `xxd | head`)"
        }
    return data.decode("utf-8", errors="replace"), None


def read_file(
    path: str, offset: int = 1, limit: int = DEFAULT_READ_LIMIT, task_id: str | None = None, dedup: bool = True
) -> dict[str, Any]:
    if offset < 1:
        return {"error": f"'offset' must be >= 1 (1-based line number), got {offset}"}
    if not 1 <= limit <= MAX_READ_LIMIT:
        return {"error": f"'limit' must be between 1 and {MAX_READ_LIMIT} lines, got {limit}"}
    try:
        fs = open_fs(task_id)
        view = fs.resolve(path)
        text, error = _load_text(fs, view, path)
    except FileToolError as exc:
        return {"error": str(exc)}
    if error:
        return error
    assert text is not None
    lines = text.splitlines()
    total = len(lines)
    if total and offset > total:
        return {"error": f"'offset' {offset} is past the end of '{path}', which has {total} lines"}
    window = lines[offset - 1 : offset - 1 + limit]
    content = "\n".join(f"{offset + i}|{line}" for i, line in enumerate(window))
    if len(content) > MAX_READ_CHARS:
        return {
            "error": f"lines {offset}-{offset + len(window) - 1} of '{path}' are {len(content)} characters, over the "
            f"{MAX_READ_CHARS}-character limit per read. Read fewer lines (smaller 'limit'), find the part you need "
            "with search_files, or use terminal (e.g. `cut -c1-500`) for very long lines."
        }
    end = offset + len(window) - 1
    digest = hashlib.sha1(text.encode("utf-8", errors="replace")).hexdigest()
    if dedup and _seen_before(task_id, (view, offset, limit), digest):
        return {
            "status": "unchanged",
            "dedup": True,
            "path": path,
            "message": f"'{path}' has not changed since you last read these lines ({offset}-{end}); use that output.",
        }
    truncated = end < total
    if total == 0:
        hint: str | None = "The file is empty."
    elif truncated:
        hint = f"Showing lines {offset}-{end} of {total}. Use offset={end + 1} to continue reading."
    else:
        hint = None
    file_size = len(text.encode("utf-8", errors="replace"))
    # known secrets of the console (local backend: a model can copy /proc/$PPID/environ into the workspace)
    content = redact_known(content)
    return {"content": content, "total_lines": total, "file_size": file_size, "truncated": truncated, "hint": hint}


def write_file(path: str, content: str, task_id: str | None = None) -> dict[str, Any]:
    try:
        fs = open_fs(task_id)
        view = fs.resolve(path)
        kind = fs.stat(view).kind
        if kind == "dir":
            return {"error": f"'{path}' is a directory; give a file path to write"}
        if kind == "other":
            return {"error": f"'{path}' is not a regular file (FIFO, device, socket or link); refusing to write it"}
        data = content.encode("utf-8")
        dirs_created = fs.write(view, data)
    except FileToolError as exc:
        return {"error": str(exc)}
    except OSError as exc:
        return {"error": f"could not write '{path}': {exc.strerror or exc}"}
    return {"path": path, "bytes_written": len(data), "dirs_created": dirs_created, "created": kind == "missing"}


def patch(
    path: str, old_string: str, new_string: str, replace_all: bool = False, task_id: str | None = None
) -> dict[str, Any]:
    if old_string == "":
        return {"error": "'old_string' is empty: give the exact text to replace (use write_file to create a file)"}
    if old_string == new_string:
        return {"error": "'old_string' and 'new_string' are identical; nothing to change"}
    try:
        fs = open_fs(task_id)
        view = fs.resolve(path)
        text, error = _load_text(fs, view, path)
        if error:
            return error
        assert text is not None
        count = text.count(old_string)
        if count == 0:
            hint = ""
            squashed = " ".join(old_string.split())
            if squashed and squashed in " ".join(text.split()):
                hint = (
                    " A match exists with different whitespace or indentation: copy the text exactly as in the file "
                    "(without the 'N|' line-number prefixes read_file adds)."
                )
            return {"error": f"'old_string' was not found in '{path}'.{hint}"}
        if count > 1 and not replace_all:
            return {
                "error": f"'old_string' matches {count} places in '{path}'; add surrounding lines to make it unique, "
                "or pass replace_all=true to replace every occurrence"
            }
        new_text = text.replace(old_string, new_string) if replace_all else text.replace(old_string, new_string, 1)
        fs.write(view, new_text.encode("utf-8"))
    except FileToolError as exc:
        return {"error": str(exc)}
    except OSError as exc:
        return {"error": f"could not patch '{path}': {exc.strerror or exc}"}
    shown = fs.display(view)
    diff = "".join(
        difflib.unified_diff(
            text.splitlines(keepends=True),
            new_text.splitlines(keepends=True),
            fromfile=f"a/{shown}",
            tofile=f"b/{shown}",
        )
    )
    return {
        "success": True,
        "path": path,
        "replacements": count if replace_all else 1,
        "diff": diff,
        "files_modified": [shown],
    }


_PATH = {
    "type": "string",
    "description": "File path, relative to the current directory or absolute inside the workspace",
}

register(
    "read_file",
    "file",
    "Read a text file. Returns numbered lines 'N|text' starting at 'offset' (1-based), at most 'limit' lines "
    f"(default {DEFAULT_READ_LIMIT}, max {MAX_READ_LIMIT}), plus total_lines and a hint to continue.",
    {
        "type": "object",
        "properties": {
            "path": _PATH,
            "offset": {"type": "integer", "minimum": 1, "description": "First line to show (1-based, default 1)"},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_READ_LIMIT, "description": "Number of lines"},
        },
        "required": ["path"],
        "additionalProperties": False,
    },
    lambda args, task_id, **ctx: read_file(
        args["path"],
        args.get("offset", 1),
        args.get("limit", DEFAULT_READ_LIMIT),
        task_id=task_id,
        dedup=bool(ctx.get("dedup", True)),
    ),
    max_result_size_chars=float("inf"),
)

register(
    "write_file",
    "file",
    "Create or overwrite a text file with 'content'. Parent directories are created.",
    {
        "type": "object",
        "properties": {"path": _PATH, "content": {"type": "string", "description": "The full new file content"}},
        "required": ["path", "content"],
        "additionalProperties": False,
    },
    lambda args, task_id, **_: write_file(args["path"], args["content"], task_id=task_id),
)


def _patch_call(args: dict[str, Any], task_id: str | None) -> dict[str, Any]:
    mode = args.get("mode") or "replace"
    if mode != "replace":
        return {"error": f"patch mode {mode!r} is not supported; use mode='replace' with old_string/new_string"}
    return patch(
        args["path"], args["old_string"], args["new_string"], bool(args.get("replace_all", False)), task_id=task_id
    )


register(
    "patch",
    "file",
    "Replace exact text in a file. 'old_string' must match exactly once unless replace_all=true. Returns a unified diff.",
    {
        "type": "object",
        "properties": {
            # Hermes models were trained on a schema with `mode` (replace | patch);
            # we accept it so their calls work, and implement the replace mode.
            "mode": {"type": "string", "enum": ["replace"], "description": "Edit mode; only 'replace' is supported"},
            "path": _PATH,
            "old_string": {"type": "string", "description": "Exact text to find (include enough context to be unique)"},
            "new_string": {"type": "string", "description": "Replacement text"},
            "replace_all": {"type": "boolean", "description": "Replace every occurrence (default false)"},
        },
        "required": ["path", "old_string", "new_string"],
        "additionalProperties": False,
    },
    lambda args, task_id, **_: _patch_call(args, task_id),
)

register(
    "search_files",
    "file",
    "Search the workspace. target='content': regex over file contents (output_mode content|files_only|count, "
    "optional 'context' lines); target='files': glob over file names. Paginate with limit/offset.",
    {
        "type": "object",
        "properties": {
            "pattern": {
                "type": "string",
                "description": "Regex (target=content) or glob such as '*.py' (target=files)",
            },
            "target": {
                "type": "string",
                "enum": ["content", "files"],
                "description": "What to search (default content)",
            },
            "path": {"type": "string", "description": "Directory or file to search (default '.')"},
            "file_glob": {
                "type": "string",
                "description": "Only search files whose name matches this glob, e.g. '*.py'",
            },
            "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "Max results (default 50)"},
            "offset": {"type": "integer", "minimum": 0, "description": "Skip this many results (default 0)"},
            "output_mode": {
                "type": "string",
                "enum": ["content", "files_only", "count"],
                "description": "Default content",
            },
            "context": {
                "type": "integer",
                "minimum": 0,
                "maximum": 20,
                "description": "Lines of context around matches",
            },
        },
        "required": ["pattern"],
        "additionalProperties": False,
    },
    lambda args, task_id, **_: search_files(task_id=task_id, **args),
)
