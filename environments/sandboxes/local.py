"""Local backend: bash on the host, in a private workspace dir, with an allow-list env.

NO ISOLATION: commands run as the console's user on the host, in one persistent shell
per sandbox (shell.py). What local cannot do: give the sandbox its own root, /tmp,
network or pid namespace; hide host files; stop a command from writing anywhere the
user can (so it cannot protect the verifier's binaries either: use bwrap or docker for
reward code that must not be tampered with). ``/workspace`` paths map into the workspace
for the file tools and a task ``cwd`` lives under the workspace, but a shell command
that names ``/workspace`` literally sees the host's (usually absent) ``/workspace``.
Commands run as the console's user on the host. They can read the
console's own /proc/<pid>/environ and cmdline, any file the user can, and the
network. Use it for trusted code only (bwrap or docker for a model under training).
What it does guarantee: a per-task workspace, an allow-listed child environment,
resource limits (cgroup/rlimits, see base.py) and that cleanup kills every process
the sandbox started (its cgroup, where cgroups are writable).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from environments.redact import is_secret_env_name
from environments.sandboxes.base import MARKER_VAR, BashSessionSandbox, SandboxUnavailable, _slug
from environments.sandboxes.settings import SandboxSettings

VIEW_WORKSPACE = "/workspace"  # what bwrap and docker call the workspace

# Allow-list: only these host variables reach a local sandbox (plus settings.env_passthrough).
# A name-pattern scrub misses secrets named *_CRED_*, *_PW, DSN...; an allow-list cannot.
ENV_ALLOW = (
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "LC_NUMERIC",
    "LC_TIME",
    "LC_COLLATE",
    "TZ",
    "USER",
    "LOGNAME",
    "SHELL",
    "TMPDIR",
)


def sandbox_child_env(
    base: Mapping[str, str], *, home: str, sandbox_id: str, passthrough: Iterable[str] = ()
) -> dict[str, str]:
    """The environment a local sandbox command starts with: allow-listed names only.
    A passthrough name that looks like a secret is still dropped."""
    # Looked up by name: iterating os.environ decodes every host variable, per sandbox.
    wanted = dict.fromkeys([*ENV_ALLOW, *(n for n in passthrough if not is_secret_env_name(n))])
    env = {name: base[name] for name in wanted if name in base}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.setdefault("LANG", "C.UTF-8")
    env.update(
        {
            "HOME": home,
            "PWD": home,
            "TERM": "dumb",
            "PAGER": "cat",
            "GIT_PAGER": "cat",
            "GIT_TERMINAL_PROMPT": "0",
            MARKER_VAR: sandbox_id,
        }
    )
    return env


class LocalSandbox(BashSessionSandbox):
    backend = "local"

    def __init__(self, task_id: str, settings: SandboxSettings | None = None, *, cwd: str | None = None) -> None:
        settings = settings or SandboxSettings()
        root = Path(settings.root)
        try:
            root.mkdir(parents=True, exist_ok=True)
            workspace = Path(os.path.realpath(tempfile.mkdtemp(prefix=f"{_slug(task_id)}-", dir=root)))
            state = Path(tempfile.mkdtemp(prefix=f".state-{workspace.name}-", dir=root))
        except OSError as exc:
            raise SandboxUnavailable(
                f"local backend: cannot create a workspace under {root} ({exc}); "
                "set sandbox_root / TERMINAL_SANDBOX_ROOT to a writable directory"
            ) from exc
        super().__init__(
            task_id,
            workspace=str(workspace),
            host_workspace=workspace,
            state_host_dir=state,
            state_view_dir=str(state),
            kill_grace=settings.kill_grace,
            output_limit=settings.output_limit_bytes,
            limits=settings,
        )
        self._child_env = sandbox_child_env(
            os.environ, home=str(workspace), sandbox_id=self.sandbox_id, passthrough=settings.env_passthrough
        )
        self.start()
        if cwd:
            self.set_initial_cwd(self.map_view_path(cwd))

    def map_view_path(self, path: str) -> str:
        """Where a path other backends would see maps here: ``/workspace[/x]`` is the
        workspace; any other absolute path (a task ``cwd`` like ``/app``) lives under the
        workspace, since local cannot create or hide host directories."""
        if path == VIEW_WORKSPACE or path.startswith(VIEW_WORKSPACE + "/"):
            return self.workspace + path[len(VIEW_WORKSPACE) :]
        if path.startswith("/") and not (path == self.workspace or path.startswith(self.workspace + "/")):
            return self.workspace + path
        return path

    def to_host_path(self, path: str) -> Path:
        if isinstance(path, str) and (path == VIEW_WORKSPACE or path.startswith(VIEW_WORKSPACE + "/")):
            path = self.map_view_path(path)
        return super().to_host_path(path)

    def _argv(self, script: str) -> list[str]:
        return ["bash", "--noprofile", "--norc", "-c", script, "hermes-init"]

    def _env(self) -> dict[str, str]:
        return self._child_env

    def _popen_cwd(self) -> str | None:
        return self.workspace if os.path.isdir(self.workspace) else None
