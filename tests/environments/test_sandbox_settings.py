"""Sandbox settings: env vars, explicit overrides, clear errors (behaviour 32)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from environments.sandboxes.settings import (
    DEFAULT_DOCKER_IMAGE,
    SandboxSettings,
    configure,
    current_settings,
    default_sandbox_root,
    reset_configuration,
)

pytestmark = pytest.mark.timeout(10)

_VARS = ("TERMINAL_ENV", "TERMINAL_TIMEOUT", "TERMINAL_LIFETIME_SECONDS", "TERMINAL_NETWORK", "TERMINAL_DOCKER_IMAGE")


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in _VARS:
        monkeypatch.delenv(var, raising=False)
    reset_configuration()
    yield
    reset_configuration()


def test_defaults() -> None:
    s = current_settings()
    assert (s.backend, s.timeout, s.lifetime, s.network) == ("local", 180.0, 300.0, False)
    assert s.docker_image == DEFAULT_DOCKER_IMAGE
    assert s.root == default_sandbox_root()
    assert s.effective_reaper_interval == 5.0
    assert SandboxSettings(lifetime=2).effective_reaper_interval == 0.5


def test_env_vars_are_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERMINAL_ENV", "BWRAP")
    monkeypatch.setenv("TERMINAL_TIMEOUT", "120")
    monkeypatch.setenv("TERMINAL_LIFETIME_SECONDS", "3600.5")
    monkeypatch.setenv("TERMINAL_NETWORK", "yes")
    monkeypatch.setenv("TERMINAL_DOCKER_IMAGE", "python:3.11-slim")
    s = current_settings()
    assert (s.backend, s.timeout, s.lifetime, s.network, s.docker_image) == (
        "bwrap",
        120.0,
        3600.5,
        True,
        "python:3.11-slim",
    )


def test_env_is_reread_each_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERMINAL_TIMEOUT", "10")
    assert current_settings().timeout == 10
    monkeypatch.setenv("TERMINAL_TIMEOUT", "20")
    assert current_settings().timeout == 20


@pytest.mark.parametrize(
    "var,value,expected",
    [
        ("TERMINAL_TIMEOUT", "abc", "a positive number of seconds"),
        ("TERMINAL_TIMEOUT", "-5", "a positive number of seconds"),
        ("TERMINAL_LIFETIME_SECONDS", "nan", "a positive number of seconds"),
        ("TERMINAL_LIFETIME_SECONDS", "5m", "a positive number of seconds"),
        ("TERMINAL_NETWORK", "maybe", "a boolean"),
        ("TERMINAL_ENV", "kubernetes", "one of local, bwrap, docker"),
        ("TERMINAL_DOCKER_IMAGE", "bad image", "a docker image reference"),
    ],
)
def test_malformed_env_value_names_var_value_and_expectation(
    monkeypatch: pytest.MonkeyPatch, var: str, value: str, expected: str
) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(ValueError) as info:
        current_settings()
    message = str(info.value)
    assert var in message and repr(value) in message and expected in message


def test_configure_wins_over_env_and_none_drops(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TERMINAL_TIMEOUT", "120")
    assert configure(timeout=7, sandbox_root=tmp_path).timeout == 7
    assert current_settings().root == tmp_path
    configure(timeout=None)
    assert current_settings().timeout == 120
    assert current_settings().root == tmp_path  # other overrides stay


def test_configure_rejects_unknown_and_invalid() -> None:
    with pytest.raises(ValueError, match="unknown sandbox setting.*bogus.*expected any of.*backend"):
        configure(bogus=1)
    with pytest.raises(ValueError, match="lifetime"):
        configure(lifetime=-1)
    assert current_settings().lifetime == 300  # nothing stored after a failure


def test_settings_model_is_strict() -> None:
    with pytest.raises(ValueError):
        SandboxSettings(unknown=True)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="unknown terminal backend"):
        SandboxSettings(backend="lxc")
