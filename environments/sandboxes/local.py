"""Local backend: bash on the host, in a private workspace dir, with a scrubbed env.

No filesystem isolation (use bwrap for that); what it does guarantee is a per-task
workspace, no credentials in the child environment, and that cleanup kills every
process the sandbox started.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Dict, List, Mapping, Optional

from environments.redact import is_secret_env_name
from environments.sandboxes.base import MARKER_VAR, BashSessionSandbox, SandboxUnavailable, _slug
from environments.sandboxes.settings import SandboxSettings

# Provider / platform prefixes whose variables never reach a sandbox, secret-looking or not
# (e.g. OPENAI_BASE_URL, AWS_REGION would still tell the agent too much about the host).
_PROVIDER_PREFIXES = (
    "OPENAI_",
    "ANTHROPIC_",
    "HF_",
    "HUGGING_FACE_",
    "HUGGINGFACE_",
    "WANDB_",
    "AWS_",
    "AZURE_",
    "GOOGLE_",
    "GCLOUD_",
    "GEMINI_",
    "OPENROUTER_",
    "COHERE_",
    "MISTRAL_",
    "GROQ_",
    "TOGETHER_",
    "DEEPSEEK_",
    "XAI_",
    "NOUS_",
    "FIREWORKS_",
    "REPLICATE_",
    "MODAL_",
    "DAYTONA_",
    "VERCEL_",
    "TINKER_",
    "GH_",
    "GITHUB_",
    "ATROPOS_",
    "TERMINAL_",
)
_DROP_EXACT = {"SSH_AUTH_SOCK", "DATABASE_URL", "REDIS_URL", "PYTHONSTARTUP"}


def sandbox_child_env(base: Mapping[str, str], *, home: str, sandbox_id: str) -> Dict[str, str]:
    """The environment a local sandbox command starts with."""
    env = {
        name: value
        for name, value in base.items()
        if not is_secret_env_name(name) and not name.startswith(_PROVIDER_PREFIXES) and name not in _DROP_EXACT
    }
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

    def __init__(self, task_id: str, settings: Optional[SandboxSettings] = None) -> None:
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
        )
        self._child_env = sandbox_child_env(os.environ, home=str(workspace), sandbox_id=self.sandbox_id)

    def _argv(self, script: str) -> List[str]:
        return ["bash", "-c", script, "bash"]

    def _env(self) -> Dict[str, str]:
        return self._child_env

    def _popen_cwd(self) -> Optional[str]:
        return self.workspace if os.path.isdir(self.workspace) else None
