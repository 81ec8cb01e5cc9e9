"""The ``terminal`` tool: run a shell command in the rollout's sandbox.

Foreground commands block until they finish or time out. Every sandbox is one
persistent machine (see sandboxes/shell.py), so a job backgrounded with ``&`` whose
output goes elsewhere (``server >log 2>&1 &``) returns at once and lives until the
sandbox ends. Commands that would not finish on their own (servers, ``nohup``,
``tail -f``) or a ``&`` job that keeps writing to the command's output are refused
in the foreground with guidance; ``background=true`` starts them detached inside the
sandbox (its cleanup kills them) and returns at once with the pid and a log file.
"""

from __future__ import annotations

import os
import re
import shlex
import uuid
from typing import Any

from environments.redact import _TOKEN_RE, REDACTED, SECRET_WORDS, redact, redact_known
from environments.tools import sandbox_access
from environments.tools.registry import register

MAX_OUTPUT_CHARS = 50_000
HEAD_SHARE = 0.4  # of MAX_OUTPUT_CHARS kept from the start; the rest from the end
DEFAULT_MAX_FOREGROUND_TIMEOUT = 600.0
BACKGROUND_LOG_DIR = ".hermes-bg"
# Backends where a detached job cannot outlive its command (none: every backend is a machine).
NO_BACKGROUND_BACKENDS: frozenset[str] = frozenset()
_BG_AMP_RE = re.compile(r"(?<![&>|<])&(?![&>])")
_OUT_REDIRECT_RE = re.compile(r"(&>|(?<![0-9&<>])>|\b1>)")
_ERR_REDIRECT_RE = re.compile(r"(&>|\b2>)")

_ANSI_RE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI sequences (colours, cursor moves)
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC sequences (titles, hyperlinks)
    r"|\x1b[@-Z\\-_]"  # other two-byte escapes
)
_WORKDIR_RE = re.compile(r"^[A-Za-z0-9_\-./~+@:=,]+$")

# (pattern over the command with quoted text removed, what it is)
_LONG_LIVED = [
    (re.compile(r"(^|[\s;|&(])nohup(\s|$)"), "nohup"),
    (re.compile(r"(^|[\s;|&(])setsid(\s|$)"), "setsid"),
    (re.compile(r"(^|[\s;|&(])disown(\s|;|$)"), "disown"),
    (re.compile(r"(?<![&>|<])&(?![&>])"), "a backgrounding '&'"),
    (re.compile(r"\bpython[0-9.]*\s+(-\w+\s+)*-m\s+http\.server\b"), "python -m http.server"),
    (re.compile(r"(^|[\s;|&(])(uvicorn|gunicorn|hypercorn|daphne)(\s|$)"), "an ASGI/WSGI server"),
    (re.compile(r"\b(npm|pnpm|yarn|bun)\s+(run\s+)?(dev|start|serve|watch)\b"), "a dev server"),
    (re.compile(r"\bflask\s+run\b"), "flask run"),
    (re.compile(r"\bmanage\.py\s+runserver\b"), "django runserver"),
    (re.compile(r"\brails\s+(server|s)\b"), "rails server"),
    (re.compile(r"\b(next|vite|nuxt)\s+dev\b"), "a dev server"),
    (re.compile(r"\bjupyter\s+(notebook|lab|server)\b"), "jupyter"),
    (re.compile(r"\btail\s+(-\w*\s+)*-[a-zA-Z]*[fF]"), "tail -f"),
]

# command name -> {exit code: meaning} for codes that are not failures
_EXIT_MEANINGS: dict[str, dict[int, str]] = {
    "grep": {1: "No matches found (not an error)"},
    "egrep": {1: "No matches found (not an error)"},
    "fgrep": {1: "No matches found (not an error)"},
    "rg": {1: "No matches found (not an error)"},
    "ag": {1: "No matches found (not an error)"},
    "diff": {1: "Files differ (not an error)"},
    "cmp": {1: "Files differ (not an error)"},
    "test": {1: "Condition evaluated to false"},
    "[": {1: "Condition evaluated to false"},
    "[[": {1: "Condition evaluated to false"},
    "find": {1: "Some paths could not be read (results may be partial)"},
}


def strip_ansi(text: str) -> str:
    return _ANSI_RE.sub("", text)


def truncate_middle(text: str, limit: int = MAX_OUTPUT_CHARS) -> str:
    """Keep the head (40%) and tail (60%) of long output: errors usually sit at the end."""
    if len(text) <= limit:
        return text
    head = int(limit * HEAD_SHARE)
    tail = limit - head
    omitted = len(text) - head - tail
    notice = (
        f"\n\n... [output truncated: {omitted} characters omitted; showing the first {head} and the last {tail} "
        f"of {len(text)}. Redirect to a file and read it in parts to see everything] ...\n\n"
    )
    return text[:head] + notice + text[-tail:]


def _without_quotes(command: str) -> str:
    """The command with quoted strings blanked, so '&' inside quotes is not a guard hit."""
    return re.sub(r"'[^']*'|\"(?:\\.|[^\"\\])*\"", "''", command)


def long_lived_reason(command: str) -> str | None:
    bare = _without_quotes(command)
    for pattern, what in _LONG_LIVED:
        if pattern.search(bare):
            return what
    return None


def detaches_output(command: str) -> bool:
    """True for a backgrounding ``&`` whose stdout and stderr are redirected, so the job
    does not keep writing into this command's output (``srv >log 2>&1 &``, ``&>/dev/null &``)."""
    bare = _without_quotes(command)
    return bool(_BG_AMP_RE.search(bare) and _OUT_REDIRECT_RE.search(bare) and _ERR_REDIRECT_RE.search(bare))


def exit_code_meaning(command: str, exit_code: int) -> str | None:
    """Meaning of a non-zero exit code that is not really a failure, judged by the last command."""
    if exit_code == 0:
        return None
    segments = re.split(r"&&|\|\||[;|]", _without_quotes(command))
    last = segments[-1].strip() if segments else ""
    try:
        words = shlex.split(last)
    except ValueError:
        words = last.split()
    while words and (re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]) or words[0] in ("sudo", "env", "time", "!")):
        words.pop(0)
    if not words:
        return None
    return _EXIT_MEANINGS.get(os.path.basename(words[0]), {}).get(exit_code)


def _fmt_seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def max_foreground_timeout() -> float:
    raw = os.environ.get("TERMINAL_MAX_FOREGROUND_TIMEOUT")
    if raw is None or raw.strip() == "":
        return DEFAULT_MAX_FOREGROUND_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"TERMINAL_MAX_FOREGROUND_TIMEOUT={raw!r} is not a number of seconds") from None
    if value <= 0:
        raise ValueError(f"TERMINAL_MAX_FOREGROUND_TIMEOUT={raw!r} must be > 0")
    return value


def _fail(message: str, output: str = "") -> dict[str, Any]:
    return {"output": output, "exit_code": -1, "error": message}


# environments.redact's name/URL patterns backtrack super-linearly on long runs of
# word characters (70 KB of "A" takes minutes). A run of [A-Za-z0-9_+.-] cannot hold
# a "name=value", URL credential or "Bearer x" on its own (those need ':', '=', '/'
# or a space), so long runs only get the token patterns (linear), plus a check of
# what precedes them for a "secret_name=" assignment whose value is the run.
_LONG_RUN_RE = re.compile(r"([A-Za-z0-9_+.\-]{128,})")
_SECRET_ASSIGN_TAIL = re.compile(
    rf"({SECRET_WORDS})[A-Za-z0-9_\-]*[\"']?\s*[:=]\s*[\"']?$",
    re.IGNORECASE,
)


def redact_output(text: str) -> str:
    parts = _LONG_RUN_RE.split(redact_known(text))  # known secrets first: base64 runs hold '/' too
    out = []
    for i, part in enumerate(parts):
        if i % 2 == 0:
            out.append(redact(part))
        elif _SECRET_ASSIGN_TAIL.search(parts[i - 1]):
            out.append(REDACTED)
        else:
            out.append(_TOKEN_RE.sub(REDACTED, part))
    return "".join(out)


def _clean_output(text: str) -> str:
    # truncate first: redaction cost grows with size and the dropped middle is never shown
    return redact_output(truncate_middle(strip_ansi(text or "")))


def _start_background(sandbox: Any, command: str, workdir: str | None, isolated: bool = False) -> dict[str, Any]:
    job = uuid.uuid4().hex[:8]
    inner = f"cd {shlex.quote(workdir)} && {command}" if workdir else command
    log_dir = f"{sandbox.workspace.rstrip('/')}/{BACKGROUND_LOG_DIR}"
    log_path = f"{log_dir}/{job}.log"
    # Detach stdio so execute() returns at once; the job stays in the sandbox's
    # process tree, so the sandbox's cleanup kills it.
    script = (
        f"mkdir -p {shlex.quote(log_dir)} && "
        f'{{ bash -c {shlex.quote(inner)} >{shlex.quote(log_path)} 2>&1 </dev/null & }} && echo "__HERMES_PID=$!"'
    )
    # reward code's jobs start from the verifier runner: the agent's shell has the model's
    # functions (a `bash` or `mkdir` of its own would run instead)
    result = sandbox_access.execute(sandbox, script, 30, isolated=isolated)
    match = re.search(r"__HERMES_PID=(\d+)", result.output or "")
    if result.exit_code != 0 or match is None:
        return _fail(f"could not start the background command: {_clean_output(result.output)[:500]}")
    pid = int(match.group(1))
    return {
        "output": f"Background process started (pid {pid}). Its output goes to {log_path}; "
        f"check it with `tail -n 50 {log_path}`, stop it with `kill {pid}`.",
        "exit_code": 0,
        "error": None,
        "pid": pid,
        "log_path": log_path,
    }


def terminal_tool(
    command: Any,
    timeout: float | None = None,
    background: bool = False,
    workdir: str | None = None,
    task_id: str | None = None,
    isolated: bool = False,
) -> dict[str, Any]:
    """Run ``command`` in the sandbox of ``task_id``; see the module docstring. ``isolated``
    (the reward code's ToolContext): run it in the sandbox's verifier runner, immune to the
    functions, PATH and exports the model left in its shell."""
    if not isinstance(command, str):
        return _fail(f"'command' must be a string, got {type(command).__name__} {command!r:.80}")
    if not command.strip():
        return _fail("'command' is empty: pass the shell command to run")
    if workdir is not None and (not isinstance(workdir, str) or not _WORKDIR_RE.match(workdir)):
        return _fail(
            f"'workdir' {workdir!r} is not a plain path (letters, digits, and . _ - / ~ + @ : = , only); "
            "or omit it and `cd` in the command"
        )

    if background:
        sandbox = sandbox_access.get_sandbox(task_id)
        if getattr(sandbox, "backend", "") in NO_BACKGROUND_BACKENDS:
            return _fail(
                f"background=true is not supported on the {sandbox.backend} sandbox: every command runs in its own "
                "PID namespace, so a detached process dies when the command returns. Run it in the foreground "
                "bounded by `timeout <seconds> <command>`, in one command together with whatever uses it."
            )
        return _start_background(sandbox, command, workdir, isolated)

    reason = long_lived_reason(command)
    if reason is not None and not detaches_output(command):
        return _fail(
            f"refused to run {reason} in the foreground: the command would not finish (or a background job would "
            "keep writing into its output). Start it detached with its output redirected, e.g. "
            "`<cmd> >/tmp/cmd.log 2>&1 &`, or run it with background=true (returns at once with a pid and a log "
            "file), or make it finish on its own (e.g. `timeout 10 <cmd>`)."
        )

    cap = max_foreground_timeout()
    if timeout is None:
        effective = sandbox_access.default_timeout()
    else:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            return _fail(f"'timeout' must be a positive number of seconds, got {timeout!r}")
        if timeout > cap:
            return _fail(
                f"'timeout' {_fmt_seconds(timeout)} exceeds the foreground limit of {_fmt_seconds(cap)} seconds. "
                "Use background=true for long-running commands and poll their log, or split the work."
            )
        effective = float(timeout)

    sandbox = sandbox_access.get_sandbox(task_id)
    to_run = f"( cd {shlex.quote(workdir)} && {command}\n)" if workdir else command
    try:
        result = sandbox_access.execute(sandbox, to_run, effective, isolated=isolated)
    except Exception as exc:  # noqa: BLE001 - the model needs the failure, not a traceback
        return _fail(f"the sandbox failed to run the command: {type(exc).__name__}: {exc}")

    output = _clean_output(result.output)
    exit_code = int(result.exit_code)
    out: dict[str, Any] = {"output": output, "exit_code": exit_code, "error": None}
    if getattr(result, "timed_out", False) or exit_code == 124:
        out["error"] = f"Command timed out after {_fmt_seconds(effective)} seconds"
    else:
        meaning = exit_code_meaning(command, exit_code)
        if meaning:
            out["exit_code_meaning"] = meaning
    return out


TERMINAL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "description": "The bash command to run. cd and exports persist between calls."},
        "timeout": {
            "type": "integer",
            "minimum": 1,
            "description": "Seconds before the command is killed (default: the sandbox timeout; max 600 in the foreground).",
        },
        "background": {
            "type": "boolean",
            "description": "Start a long-running command (server, watcher) detached; returns its pid and log file at once.",
        },
        "workdir": {
            "type": "string",
            "description": "Directory to run this one command in (the session cwd is unchanged).",
        },
    },
    "required": ["command"],
    "additionalProperties": False,
}


def _handler(args: dict[str, Any], task_id: str | None, **kw: Any) -> dict[str, Any]:
    return terminal_tool(
        args.get("command"),
        timeout=args.get("timeout"),
        background=bool(args.get("background", False)),
        workdir=args.get("workdir"),
        task_id=task_id,
        # host-side callers only, never in the model's args: reward code (ToolContext) runs in the verifier
        isolated=bool(kw.get("isolated", False)) or sandbox_access.on_reward_side(),
    )


register(
    "terminal",
    "terminal",
    "Run a bash command in your sandbox and get its output and exit code. The working directory and exported "
    "variables persist between calls. Long-running servers must use background=true.",
    TERMINAL_PARAMETERS,
    _handler,
)
