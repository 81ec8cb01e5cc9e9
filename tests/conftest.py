"""Shared test setup: everything offline, everything local, bounded in time."""

from __future__ import annotations

import os

# Before anything imports transformers / wandb / huggingface_hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def tokenizer_path() -> str:
    """Local tiny tokenizer directory (built once per machine and cached)."""
    from environments.tokenizer import local_tokenizer_path

    return local_tokenizer_path()


@pytest.fixture(scope="session")
def tokenizer(tokenizer_path):
    from environments.tokenizer import load_tokenizer

    return load_tokenizer(tokenizer_path)


# --------------------------------------------------------------------------- xdist groups
# `make test` runs the suite on several workers with `--dist loadgroup`: every test of one
# xdist group runs on the same worker, one after the other. Two resources need that:
# - "slurm": the session-scoped single-node cluster (tests/slurm/conftest.py) starts once, on
#   the one worker that runs the group, not once per worker;
# - "docker": the tests that drive the shared engine compare `docker ps` before and after
#   (tests/docker_support.py: managed_containers), which another worker's containers would spoil.
# Without xdist the marks do nothing.


def _xdist_group(item: pytest.Item) -> str | None:
    path = item.path.as_posix()
    if "/tests/slurm/" in path:
        return "slurm"
    module = getattr(item, "module", None)
    uses_engine = module is not None and any(
        getattr(value, "__module__", None) == "tests.docker_support" for value in vars(module).values()
    )
    if uses_engine and "docker" in item.nodeid.lower():  # a docker file, or the [docker] case of a backend matrix
        return "docker"
    return None


def _start_rank(item: pytest.Item, group: str | None) -> int:
    """Long chains first, so no worker is left with one at the end while the others idle: the
    groups (run one test after another), then tests whose own timeout says they take minutes."""
    if group is not None:
        return 0
    timeout = item.get_closest_marker("timeout")
    return 1 if timeout is not None and timeout.args and float(timeout.args[0]) >= 150 else 2


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ranks: dict[str, int] = {}
    for item in items:
        group = _xdist_group(item)
        if group is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))
        ranks[item.nodeid] = _start_rank(item, group)
    # a stable sort: the same order on every xdist worker (they must agree), files stay together
    items.sort(key=lambda item: ranks[item.nodeid])


# --------------------------------------------------------------------------- isolation
# What an env built in-process exports for upstream code that reads them (hermes_base_env).
_EXPORTED_SANDBOX_VARS = ("TERMINAL_ENV", "TERMINAL_TIMEOUT", "TERMINAL_LIFETIME_SECONDS")


@pytest.fixture(autouse=True)
def _sandbox_overrides_do_not_leak() -> Iterator[None]:
    """An env built in-process calls ``sandboxes.configure(...)`` (its backend, root, limits)
    and exports its backend as ``TERMINAL_ENV``; without this the next test on the same xdist
    worker would inherit that backend (a TerminalBench env's docker, for a test that just
    wants a sandbox)."""
    from environments.sandboxes import settings

    with settings._overrides_lock:
        saved = dict(settings._overrides)
    saved_vars = {name: os.environ.get(name) for name in _EXPORTED_SANDBOX_VARS}
    yield
    with settings._overrides_lock:
        settings._overrides.clear()
        settings._overrides.update(saved)
    for name, value in saved_vars.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
