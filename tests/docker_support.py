"""What the docker tests need from the engine `make test` prepares (hermes_console/docker_engine.py).

``ENGINE_REASON`` is "" when an engine answers, else why not (the reason the private
engine could not be had, e.g. "not root"); tests skip with it. ``sandbox_image()`` is the
base sandbox image (built and cached by the engine wrapper), or a skip naming why not.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import List

import pytest


def _engine_reason() -> str:
    docker = shutil.which("docker")
    if docker is None:
        return os.environ.get("HERMES_DOCKER_UNAVAILABLE") or "the docker CLI is not installed"
    try:
        proc = subprocess.run([docker, "info"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`docker info` failed: {exc}"
    if proc.returncode == 0:
        return ""
    given = os.environ.get("HERMES_DOCKER_UNAVAILABLE")
    return given or "no Docker engine answered `docker info` (run the tests via `make test` to start one)"


ENGINE_REASON = _engine_reason()
needs_engine = pytest.mark.skipif(bool(ENGINE_REASON), reason=ENGINE_REASON or "engine present")


def sandbox_image() -> str:
    """The base sandbox image (bash, coreutils, python3), or skip saying why there is none."""
    if ENGINE_REASON:
        pytest.skip(ENGINE_REASON)
    tag = os.environ.get("HERMES_SANDBOX_IMAGE")
    if tag:
        return tag
    from hermes_console import images

    tag = images.base_tag()
    if images.image_exists(tag):
        return tag
    pytest.skip(os.environ.get("HERMES_SANDBOX_IMAGE_ERROR")
                or "the sandbox base image is not built (`hermes-console images build base`, or run via `make test`)")
    return ""


def docker(*args: str, timeout: float = 60.0, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=check)


def managed_containers() -> List[str]:
    """Every container this tool labelled, running or not."""
    out = docker("ps", "-aq", "--filter", "label=hermes-console.managed=1").stdout
    return out.split()
