"""Helpers for the scale-out tests: a real `run-api` subprocess on a loopback
port, a host driven like the UI drives it, small polling utilities."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermes_console.runtime.config import RunSpec
from hermes_console.runtime.state import ConsoleState
from tests.runtime.runtime_helpers import Pump as RuntimePump
from tests.runtime.runtime_helpers import identity

VENV_BIN = Path(sys.executable).parent


_UVICORN_PORT = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")


def get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def call_json(url: str, body: dict[str, Any] | None = None, method: str = "GET", timeout: float = 10.0) -> Any:
    """One JSON request (run-api also reads bodies on GET, e.g. /status-env) and its JSON reply."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


class RunAPI:
    """atroposlib's `run-api` console script, as an operator starts it.

    It binds port 0 and the test reads the port uvicorn reports: a port picked free beforehand
    can be taken by another xdist worker's server before run-api binds it, and then /status is
    answered by that server while ours exits with "address in use" (a trainer of this test then
    talked to another test's run-api)."""

    _names = itertools.count()

    def __init__(self, log_dir: Path) -> None:
        self.port = 0
        self.url = ""
        self.log_path = log_dir / f"run-api-{os.getpid()}-{next(self._names)}.log"
        self.log = open(self.log_path, "w")
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> RunAPI:
        self.proc = subprocess.Popen(
            [str(VENV_BIN / "run-api"), "--host", "127.0.0.1", "--port", "0"],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            assert self.proc.poll() is None, f"run-api exited with {self.proc.returncode}; see {self.log.name}"
            if not self.port:
                found = _UVICORN_PORT.search(self.log_path.read_text(errors="replace"))
                if found is None:
                    time.sleep(0.05)
                    continue
                self.port = int(found.group(1))
                self.url = f"http://127.0.0.1:{self.port}"
            try:
                get_json(f"{self.url}/status", timeout=1.0)
                return self
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"run-api did not answer within {timeout}s (port {self.port or '?'}); see {self.log.name}")

    def env_weight(self, env_id: int) -> float:
        """The weight run-api computes for ``env_id`` now (its share among the connected envs)."""
        return float(call_json(f"{self.url}/status-env", {"env_id": env_id})["env_weight"])

    def register_env(self, name: str = "watcher", max_token_length: int = 4096) -> int:
        """Register one more env, as a host does (the trainer must have registered); its id."""
        body = {"max_token_length": max_token_length, "desired_name": name, "weight": 1.0, "group_size": 1}
        reply = call_json(f"{self.url}/register-env", body, method="POST")
        assert reply.get("status") == "success", reply
        return int(reply["env_id"])

    def current_step(self) -> int:
        return int(get_json(f"{self.url}/status")["current_step"])

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


class Pump(RuntimePump):
    """The runtime tests' pump; on timeout it also shows the trainer status."""

    def until(self, pred: Callable[[ConsoleState], bool], timeout: float = 30.0, what: str = "") -> None:
        try:
            super().until(pred, timeout, what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; trainer={self.state.trainer}") from None


def spec_for(tmp_path: Path, *flags: str, config_path: str | None = None, **kw: Any) -> RunSpec:
    base = ["--env.data_path_to_save_groups", str(tmp_path / "run" / "groups.jsonl")]
    return RunSpec(
        env=kw.pop("env", "environments.terminal_tasks"),
        flags=[*base, *flags],
        runs_dir=str(tmp_path),
        config_path=config_path,
        **kw,
    )


def link_env_config(**overrides: Any) -> Any:
    """The env config fields ``TrainerLink`` reads, for tests that build a link without an env."""
    from types import SimpleNamespace

    fields: dict[str, Any] = dict(
        group_size=4,
        batch_size=8,
        max_batches_offpolicy=3,
        total_steps=5,
        min_batch_allocation=None,
        rollout_server_url="http://127.0.0.1:9",
        max_token_length=10,
        wandb_name="x",
        inference_weight=1.0,
    )
    return SimpleNamespace(**{**fields, **overrides})


def identity_holds(p: RuntimePump) -> bool:
    """The console's accounting agrees with an item-by-item count of the events (see identity)."""
    problem = identity(p.state, p.events)
    assert problem is None, problem
    return True


def read_events(path: Path) -> list[dict]:
    import gzip

    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as fp:
        return [json.loads(line) for line in fp if line.strip()]


def child_env() -> dict:
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.setdefault("WANDB_MODE", "offline")
    return env
