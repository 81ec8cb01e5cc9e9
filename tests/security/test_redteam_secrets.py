"""Red team (#18, finding 5): the console's secrets reach no sandbox environment, and no
tool result, record or start-up error, not even base64-encoded.

Oracles: the `base64` module decodes whatever the tools returned; the sandbox's own
`env` / `/proc/self/environ` shows what it was given.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from environments.redact import REDACTED, local_backend_warning, redact, safe_head
from environments.sandboxes.bwrap import BwrapSandbox
from environments.sandboxes.local import LocalSandbox
from environments.sandboxes.settings import SandboxSettings
from hermes_console.runtime.errors import first_line
from tests.helpers.cli import CLI

pytestmark = pytest.mark.timeout(90)
REPO = str(Path(__file__).resolve().parents[2])

# Names the old name-pattern scrub let through (no KEY/TOKEN/SECRET/PASSWORD in them).
ODD_SECRETS = {
    "MY_DB_CRED_MAIN": "Zq8rT2vLmN0pWx4yQ",
    "SERVICE_PW": "hunter2-but-longer",
    "SENTRY_DSN": "https://abc123def456@o1.ingest.example/42",
}


@pytest.fixture
def odd_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in ODD_SECRETS.items():
        monkeypatch.setenv(name, value)


def _recoverable(text: str, secret: str) -> bool:
    """True if ``secret`` can be read back from ``text``: plainly, or by base64-decoding
    any run of it at any alignment."""
    if secret in text:
        return True
    want = secret.encode()
    for piece in text.replace(REDACTED, "\n").split():
        for alphabet in (None, b"-_"):
            for shift in range(4):
                chunk = piece[shift:]
                chunk = chunk[: len(chunk) - len(chunk) % 4]
                try:
                    raw = base64.b64decode(chunk, altchars=alphabet) if chunk else b""
                except (binascii.Error, ValueError):
                    continue
                if want in raw:
                    return True
    return False


@pytest.mark.parametrize("backend", [LocalSandbox, BwrapSandbox])
def test_allow_list_env_drops_oddly_named_secrets(backend, odd_secrets, tmp_path: Path) -> None:
    box = backend("odd", SandboxSettings(sandbox_root=tmp_path))
    try:
        result = box.execute("env; tr '\\0' '\\n' < /proc/self/environ", 10)
    finally:
        box.cleanup()
    for name, value in ODD_SECRETS.items():
        assert name not in result.output and value not in result.output


def test_passthrough_adds_names_but_never_secret_looking_ones(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MY_TOOL_HOME", "/opt/tool")
    monkeypatch.setenv("MY_TOOL_TOKEN", "tok-abcdefgh12345")
    box = LocalSandbox(
        "pass", SandboxSettings(sandbox_root=tmp_path, env_passthrough=("MY_TOOL_HOME", "MY_TOOL_TOKEN"))
    )
    try:
        result = box.execute("env", 10)
    finally:
        box.cleanup()
    assert "MY_TOOL_HOME=/opt/tool" in result.output
    assert "MY_TOOL_TOKEN" not in result.output


@pytest.mark.parametrize("shift", [0, 1, 2])
def test_base64_of_a_known_secret_is_redacted_at_every_alignment(odd_secrets, shift: int) -> None:
    for secret in ODD_SECRETS.values():
        blob = base64.b64encode(b"P" * shift + f"X={secret}\n".encode() + b"tail-bytes").decode()
        for text in (blob, base64.urlsafe_b64encode(base64.b64decode(blob)).decode(), f"out: {blob} end"):
            assert _recoverable(text, secret)  # the oracle sees it before
            shown = redact(text)
            assert not _recoverable(shown, secret), (secret, shown)
            assert not _recoverable(safe_head(text, 4000), secret)


CONSOLE = """
import json, sys, uuid
from pathlib import Path
sys.path.insert(0, {repo!r})
from environments.sandboxes import cleanup_vm, configure, get_sandbox
from environments.tools import handle_function_call
configure(backend={backend!r}, sandbox_root={root!r})
task = "leak-" + uuid.uuid4().hex[:6]
try:
    raw = handle_function_call("terminal", {{"command": {attack!r}}}, task_id=task)
    box = get_sandbox(task)
    handle_function_call("terminal", {{"command": "tr '\\\\0' '\\\\n' < /proc/$(cut -d' ' -f4 /proc/$PPID/stat)/environ > copy.txt"}}, task_id=task)
    read = handle_function_call("read_file", {{"path": "copy.txt"}}, task_id=task)
    found = handle_function_call("search_files", {{"pattern": "CRED|_PW|DSN"}}, task_id=task)
    records = json.dumps([r.__dict__ for r in box.info().recent_commands])
finally:
    cleanup_vm(task)
print(json.dumps({{"terminal": raw, "read": read, "found": found, "records": records}}))
"""


@pytest.mark.parametrize("backend", ["local", "bwrap"])
def test_terminal_tool_never_returns_console_secrets(backend: str, tmp_path: Path) -> None:
    """local has no isolation: the environ of the shell's grandparent (the shell's parent is the
    sandbox's init, whose parent is the console) is the console's (a child console here,
    so the secrets are in its real environ). The tool results (what goes to the model,
    groups.jsonl and the event log) must still not carry them, plain or base64. bwrap: the
    console's /proc is not even visible (own pid namespace)."""
    console = "/proc/$(cut -d' ' -f4 /proc/$PPID/stat)/environ"  # persistent shell: parent = init
    attack = f"tr '\\0' '\\n' < {console} | grep -E 'CRED|_PW|DSN'; base64 -w0 {console}"
    if backend == "bwrap":
        attack += "; for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ; done 2>/dev/null"
    code = CONSOLE.format(repo=REPO, root=str(tmp_path), attack=attack, backend=backend)
    env = {**os.environ, **ODD_SECRETS}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    terminal = json.loads(out["terminal"])["output"]
    if backend == "local":
        assert "MY_DB_CRED_MAIN" in terminal  # the attack did read the console's environ
        assert "MY_DB_CRED_MAIN" in out["read"] and "MY_DB_CRED_MAIN" in out["found"]
    else:
        assert all(name not in text for name in ODD_SECRETS for text in out.values())
    for secret in ODD_SECRETS.values():
        for name, text in out.items():
            assert not _recoverable(text, secret), (name, secret, text[:300])


def test_startup_errors_are_redacted(odd_secrets) -> None:
    exc = RuntimeError(
        f"could not connect to postgres://admin:s3cr3t-pass@db:5432/x with key sk-abcdefghijklmnop0123 "
        f"and {ODD_SECRETS['MY_DB_CRED_MAIN']}"
    )
    shown = first_line(exc)
    assert "s3cr3t-pass" not in shown and "sk-abcdefghijklmnop0123" not in shown
    assert ODD_SECRETS["MY_DB_CRED_MAIN"] not in shown
    assert shown.startswith("RuntimeError: could not connect")


def test_cli_prints_config_errors_redacted(odd_secrets, capsys, monkeypatch) -> None:
    from hermes_console import cli

    def boom(args, extra):
        raise ValueError(f"bad server url https://u:{ODD_SECRETS['SERVICE_PW']}@h/v1")

    monkeypatch.setattr(cli, "_run", boom)
    assert cli.main(["run", "x"]) == 1
    err = capsys.readouterr().err
    assert ODD_SECRETS["SERVICE_PW"] not in err and "bad server url" in err


def test_local_backend_warns_when_secrets_are_in_the_environment() -> None:
    env = {"PATH": "/bin", "OPENAI_API_KEY": "sk-x", "MY_DB_CRED_MAIN": "v"}
    warning = local_backend_warning("local", env)
    assert warning is not None
    assert "NO isolation" in warning and "OPENAI_API_KEY" in warning and "MY_DB_CRED_MAIN" in warning
    assert "sk-x" not in warning
    assert local_backend_warning("bwrap", env) is None
    assert local_backend_warning("local", {"PATH": "/bin"}) is None


ENV_FILE = """
from environments.terminal_tasks.env import TerminalTasksEnv


class LeakyEnv(TerminalTasksEnv):
    name = "leaky"

    def __init__(self, *args, **kwargs):
        if {where!r} == "init":
            raise RuntimeError("cannot reach postgres://app:pa55w0rd-xyz@db/x with " + {secret!r})
        super().__init__(*args, **kwargs)

    async def setup(self):
        raise RuntimeError("setup failed: token sk-abcdefghijklmnop0123456 and " + {secret!r})
"""


@pytest.mark.parametrize("where", ["init", "setup"])
def test_env_start_up_errors_are_redacted_on_screen_and_in_the_event_log(where: str, tmp_path: Path) -> None:
    """Through the real CLI: an env whose __init__ / setup() raises with a credential URL, an
    API key and a secret of the console's environment."""
    from hermes_console.sim.server import SimServer

    secret = ODD_SECRETS["MY_DB_CRED_MAIN"]
    env_file = tmp_path / "leaky_env.py"
    env_file.write_text(ENV_FILE.format(where=where, secret=secret))
    log = tmp_path / "events.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(ODD_SECRETS)
    env["COLUMNS"] = "500"
    with SimServer() as sim:
        proc = subprocess.run(
            [
                *CLI,
                "run",
                str(env_file),
                "--headless",
                "--openai.base_url",
                f"{sim.base_url}/v1",
                "--runs-dir",
                str(tmp_path / "runs"),
                "--record",
                str(log),
            ],
            capture_output=True,
            text=True,
            timeout=80,
            cwd=str(tmp_path),
            env=env,
        )
    shown = proc.stdout + proc.stderr
    recorded = log.read_text() if log.exists() else ""
    assert proc.returncode != 0 and ("cannot reach" in shown or "setup failed" in shown), shown[-2000:]
    for text in (shown, recorded):
        assert "pa55w0rd-xyz" not in text and "sk-abcdefghijklmnop0123456" not in text
        assert not _recoverable(text, secret)
