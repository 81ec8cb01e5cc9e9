"""ToolContext: what ``compute_reward`` uses to inspect a rollout's sandbox.

The seed API is synchronous. Sync methods run directly on the calling thread
(blocking it) and never start a nested event loop, so they work with or
without a running loop. From async code prefer the ``a_*`` twins: they run the
same method on a dedicated thread pool, so a slow verifier never stalls the
event loop that drives every other rollout.

Everything here is reward code, and the model it scores has had a persistent shell
in the same sandbox: every command (``terminal``, transfers, and the file tools where
files are reached by commands) runs in the sandbox's verifier runner, never in the
agent's shell with the model's functions, aliases, PATH and exports; and the first access
after agent commands stops what the agent left running (``sandbox_access.reward_side``).

File transfer goes through the sandbox's shell (base64 over stdin/stdout), so
it works on every backend, is binary-exact, and is chunked to stay under the
sandbox's output capture.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import logging
import shlex
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from environments.tools import handle_function_call, sandbox_access
from environments.tools.file_access import (
    MAX_READ_BYTES,
    FileToolError,
    OutsideWorkspaceError,
    open_fs,
    shell_read_bytes,
)
from environments.tools.files import forget_task

logger = logging.getLogger(__name__)

UPLOAD_CHUNK_CHARS = 60_000  # base64 characters per command
TRANSFER_TIMEOUT = 60.0

T = TypeVar("T")

# Reward code of many rollouts may verify at once; keep it off the default
# executor (shared with DNS lookups and whatever else uses to_thread).
_executor = ThreadPoolExecutor(max_workers=32, thread_name_prefix="hermes-toolctx")
_executor_lock = threading.Lock()


def shutdown_executor(wait: bool = True) -> None:
    """Stop the reward-side tool threads (end of a run); a fresh, idle pool takes over."""
    global _executor
    with _executor_lock:
        old = _executor
        _executor = ThreadPoolExecutor(max_workers=old._max_workers, thread_name_prefix="hermes-toolctx")
    old.shutdown(wait=wait, cancel_futures=True)


def _parse(raw: str, on_error: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        return on_error(raw)
    return value if isinstance(value, dict) else on_error(raw)


def _call_tool_args(
    tool_name: str | None, arguments: dict[str, Any] | None, name: str | None, args: dict[str, Any] | None
) -> tuple[str, dict[str, Any]]:
    """One (tool_name, arguments) from either spelling; both spellings at once is a mistake."""
    if name is not None:
        if tool_name is not None:
            raise TypeError("call_tool() got both 'tool_name' and 'name'; pass the tool name once")
        tool_name = name
    if args is not None:
        if arguments is not None:
            raise TypeError("call_tool() got both 'arguments' and 'args'; pass the arguments once")
        arguments = args
    if tool_name is None:
        raise TypeError("call_tool() missing the tool name: call_tool(tool_name, arguments)")
    return tool_name, ({} if arguments is None else arguments)


class ToolContext:
    """Tool access scoped to one rollout (its ``task_id`` and sandbox)."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        # compute_reward may explain its score here ({"tests passed": "3/4", ...}); the console
        # shows it beside the reward. The float compute_reward returns stays the contract.
        self.reward_details: dict[str, Any] = {}

    # ------------------------------------------------------------ tools

    def call_tool(
        self,
        tool_name: str | None = None,
        arguments: dict[str, Any] | None = None,
        *,
        name: str | None = None,
        args: dict[str, Any] | None = None,
    ) -> str:
        """Any registered tool in this rollout's sandbox; the raw JSON string.

        ``tool_name``/``arguments`` are the upstream keywords; ``name``/``args`` (this
        layer's earlier spelling) are accepted as keywords too."""
        tool_name, arguments = _call_tool_args(tool_name, arguments, name, args)
        return self._call(tool_name, arguments)

    def _call(self, tool_name: str, arguments: dict[str, Any], **kwargs: Any) -> str:
        """A tool call as reward code: commands in the verifier runner (none of the model's shell
        functions, PATH or exports), after the agent's leftover processes are stopped."""
        with sandbox_access.reward_side():
            return handle_function_call(tool_name, arguments, task_id=self.task_id, **kwargs)

    def terminal(self, command: str, timeout: int = 180) -> dict[str, Any]:
        # The verifier runner, not the agent's shell: the model's functions/PATH/exports cannot
        # change what the reward code runs (see environments/sandboxes/shell.py).
        raw = self._call("terminal", {"command": command, "timeout": timeout}, isolated=True)
        return _parse(raw, lambda text: {"exit_code": -1, "output": text})

    def read_file(self, path: str) -> dict[str, Any]:
        # dedup=False: the reward must see the content even if the agent just read it
        raw = self._call("read_file", {"path": path}, dedup=False)
        return _parse(raw, lambda text: {"error": text})

    def read_text(self, path: str, limit: int = MAX_READ_BYTES) -> dict[str, Any]:
        """A file's whole text as stored (UTF-8, undecodable bytes replaced): ``{"content",
        "bytes"}`` or ``{"error"}``. Unlike ``terminal("cat ...")`` and ``read_file`` (what the
        model's tools show) nothing is numbered, truncated, stripped of escape codes or redacted
        (a secret-looking answer compares as written). Where the workspace is a host directory
        (local, bwrap) a workspace file is read from the host without a process (no symlink out
        of the workspace followed, regular files only, size-capped); any other path, and every
        path on docker, is read by the verifier runner's commands. Relative paths are the
        agent's last cwd's, as for the verifier's commands."""
        try:
            with sandbox_access.reward_side():
                fs = open_fs(self.task_id)
                try:
                    view = fs.resolve(path)
                except OutsideWorkspaceError:  # e.g. /tests on a machine: the verifier reads it as cat would
                    data = shell_read_bytes(
                        sandbox_access.get_sandbox(self.task_id), path, TRANSFER_TIMEOUT, limit=limit, isolated=True
                    )
                else:
                    data = fs.read(view, limit)
        except FileNotFoundError:
            return {"error": f"no such file: {path}"}
        except (FileToolError, OSError) as exc:
            return {"error": str(exc)}
        except Exception as exc:  # noqa: BLE001 - reward code wants a result, not a crash
            return {"error": f"reading {path} failed: {type(exc).__name__}: {exc}"}
        return {"content": data.decode("utf-8", errors="replace"), "bytes": len(data)}

    def write_file(self, path: str, content: str) -> dict[str, Any]:
        raw = self._call("write_file", {"path": path, "content": content})
        return _parse(raw, lambda text: {"error": text})

    def search(self, query: str, path: str = ".") -> dict[str, Any]:
        raw = self._call("search_files", {"pattern": query, "path": path})
        return _parse(raw, lambda text: {"error": text})

    def web_search(self, query: str) -> dict[str, Any]:
        return _parse(handle_function_call("web_search", {"query": query}), lambda t: {"error": t})

    def web_extract(self, urls: list[str]) -> dict[str, Any]:
        return _parse(handle_function_call("web_extract", {"urls": urls}), lambda t: {"error": t})

    def browser_navigate(self, url: str) -> dict[str, Any]:
        raw = self._call("browser_navigate", {"url": url})
        return _parse(raw, lambda t: {"error": t})

    def browser_snapshot(self) -> dict[str, Any]:
        raw = self._call("browser_snapshot", {})
        return _parse(raw, lambda t: {"error": t})

    # ------------------------------------------------------------ transfer

    def _execute(self, command: str, stdin_data: str | None = None, timeout: float = TRANSFER_TIMEOUT) -> Any:
        sandbox = sandbox_access.get_sandbox(self.task_id)
        return sandbox.execute(command, timeout, stdin_data=stdin_data, isolated=True)

    def upload_file(self, local_path: str, remote_path: str) -> dict[str, Any]:
        """Copy a host file into the sandbox byte for byte."""
        local = Path(local_path)
        if not local.is_file():
            return {"exit_code": -1, "output": f"Local file not found: {local_path}"}
        try:
            data = local.read_bytes()
        except OSError as exc:
            return {"exit_code": -1, "output": f"Cannot read local file {local_path}: {exc}"}
        encoded = base64.b64encode(data).decode("ascii")
        remote = shlex.quote(remote_path)
        parent = f'mkdir -p -- "$(dirname -- {remote})"'
        try:
            if len(encoded) <= UPLOAD_CHUNK_CHARS:
                result = self._execute(f"{parent} && base64 -d > {remote}", stdin_data=encoded)
            else:
                # staged in $HOME (the workspace): bwrap gives every command a fresh /tmp
                staging = f'"$HOME"/.hermes-upload-{uuid.uuid4().hex}.b64'
                result = self._execute(f": > {staging}")
                for start in range(0, len(encoded), UPLOAD_CHUNK_CHARS):
                    if result.exit_code != 0:
                        break
                    result = self._execute(f"cat >> {staging}", stdin_data=encoded[start : start + UPLOAD_CHUNK_CHARS])
                if result.exit_code == 0:
                    result = self._execute(
                        f"{parent} && base64 -d {staging} > {remote}; rc=$?; rm -f {staging}; exit $rc"
                    )
                else:
                    self._execute(f"rm -f {staging}")
        except Exception as exc:  # noqa: BLE001 - reward code wants a result, not a crash
            return {"exit_code": -1, "output": f"Upload to {remote_path} failed: {type(exc).__name__}: {exc}"}
        out = {"exit_code": result.exit_code, "output": (result.output or "").strip()}
        if result.exit_code == 0:
            out["bytes"] = len(data)
        return out

    def upload_dir(self, local_dir: str, remote_dir: str) -> list[dict[str, Any]]:
        root = Path(local_dir)
        if not root.is_dir():
            return [{"exit_code": -1, "output": f"Local directory not found: {local_dir}"}]
        results = []
        for path in sorted(root.rglob("*")):
            if path.is_file():
                rel = path.relative_to(root).as_posix()
                results.append(self.upload_file(str(path), f"{remote_dir.rstrip('/')}/{rel}"))
        return results

    def download_file(self, remote_path: str, local_path: str) -> dict[str, Any]:
        """Copy a sandbox file to the host byte for byte: ``{success, bytes}`` or ``{success: False, error}``."""
        try:
            # the verifier runner: this is reward code, and the agent's shell runs the model's functions
            data = shell_read_bytes(
                sandbox_access.get_sandbox(self.task_id), remote_path, TRANSFER_TIMEOUT, isolated=True
            )
        except FileNotFoundError:
            return {"success": False, "error": f"Remote file not found: {remote_path}"}
        except Exception as exc:  # noqa: BLE001
            return {"success": False, "error": f"Download of {remote_path} failed: {type(exc).__name__}: {exc}"}
        if not data:
            return {"success": False, "error": f"Remote file is empty: {remote_path}"}
        try:
            local = Path(local_path)
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_bytes(data)
        except OSError as exc:
            return {"success": False, "error": f"Cannot write local file {local_path}: {exc}"}
        return {"success": True, "bytes": len(data)}

    def download_dir(self, remote_dir: str, local_dir: str) -> list[dict[str, Any]]:
        q = shlex.quote(remote_dir.rstrip("/") or "/")
        try:
            # a subshell: the agent's session cwd must not move
            result = self._execute(f"( cd -- {q} && find . -type f -print0 )")
        except Exception as exc:  # noqa: BLE001
            return [{"success": False, "error": f"Listing {remote_dir} failed: {type(exc).__name__}: {exc}"}]
        if result.exit_code != 0:
            return [{"success": False, "error": f"Remote directory not found or unreadable: {remote_dir}"}]
        results = []
        for rel in sorted(p for p in (result.output or "").split("\0") if p.startswith("./")):
            rel = rel[2:]
            results.append(self.download_file(f"{remote_dir.rstrip('/')}/{rel}", str(Path(local_dir) / rel)))
        return results

    # ------------------------------------------------------------ lifecycle

    def cleanup(self) -> None:
        """Kill the rollout's processes and close its sandbox. Idempotent; never raises.
        (Using the context again afterwards gets a fresh sandbox; clean that up too.)"""
        self._forget_reads()
        self._finish_cleanup(functools.partial(sandbox_access.cleanup_vm, self.task_id))

    def begin_cleanup(self) -> Callable[[], None]:
        """The part of :meth:`cleanup` that cannot wait: the sandbox is detached and its
        processes get SIGKILL now, without blocking. Returns the rest (wait for them to go,
        remove the dirs) to run where waiting is fine. Never raises."""
        self._forget_reads()
        try:
            rest = sandbox_access.stop_vm(self.task_id)
        except Exception:  # the rest then does all of it, as cleanup() would
            logger.warning("stopping sandbox %s early failed", self.task_id, exc_info=True)
            rest = functools.partial(sandbox_access.cleanup_vm, self.task_id)
        return functools.partial(self._finish_cleanup, rest)

    def _forget_reads(self) -> None:
        try:
            forget_task(self.task_id)
        except Exception:  # cleanup runs in finally blocks; it must not mask the real error
            logger.debug("forget_task(%s) failed", self.task_id, exc_info=True)

    def _finish_cleanup(self, rest: Callable[[], None]) -> None:
        try:
            rest()  # the sandbox's cleanup kills every process it started (background jobs included)
        except Exception:
            logger.warning("cleanup of sandbox %s failed", self.task_id, exc_info=True)

    # ------------------------------------------------------------ async twins

    async def _off_loop(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(_executor, functools.partial(fn, *args))

    async def a_call_tool(
        self,
        tool_name: str | None = None,
        arguments: dict[str, Any] | None = None,
        *,
        name: str | None = None,
        args: dict[str, Any] | None = None,
    ) -> str:
        tool_name, arguments = _call_tool_args(tool_name, arguments, name, args)
        return await self._off_loop(self.call_tool, tool_name, arguments)

    async def a_terminal(self, command: str, timeout: int = 180) -> dict[str, Any]:
        return await self._off_loop(self.terminal, command, timeout)

    async def a_read_file(self, path: str) -> dict[str, Any]:
        return await self._off_loop(self.read_file, path)

    async def a_read_text(self, path: str, limit: int = MAX_READ_BYTES) -> dict[str, Any]:
        return await self._off_loop(self.read_text, path, limit)

    async def a_write_file(self, path: str, content: str) -> dict[str, Any]:
        return await self._off_loop(self.write_file, path, content)

    async def a_search(self, query: str, path: str = ".") -> dict[str, Any]:
        return await self._off_loop(self.search, query, path)

    async def a_upload_file(self, local_path: str, remote_path: str) -> dict[str, Any]:
        return await self._off_loop(self.upload_file, local_path, remote_path)

    async def a_upload_dir(self, local_dir: str, remote_dir: str) -> list[dict[str, Any]]:
        return await self._off_loop(self.upload_dir, local_dir, remote_dir)

    async def a_download_file(self, remote_path: str, local_path: str) -> dict[str, Any]:
        return await self._off_loop(self.download_file, remote_path, local_path)

    async def a_download_dir(self, remote_dir: str, local_dir: str) -> list[dict[str, Any]]:
        return await self._off_loop(self.download_dir, remote_dir, local_dir)

    async def a_cleanup(self) -> None:
        await self._off_loop(self.cleanup)
