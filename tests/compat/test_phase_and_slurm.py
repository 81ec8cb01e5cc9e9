"""The phase shown is the phase that runs; ``slurm`` is refused with the reason."""

from __future__ import annotations

import textwrap

import pytest

from hermes_console.runtime.config import RunSpec, resolve
from hermes_console.runtime.errors import ConfigError
from hermes_console.runtime.loader import load_env_class
from tests.compat.conftest import SEED_ENV


def _resolve(tmp_path, server_type, phase=None, yaml_text=None, monkeypatch=None):
    monkeypatch.setenv("SEED_SERVER_TYPE", server_type)
    cls = load_env_class(str(SEED_ENV))
    cfg = None
    if yaml_text is not None:
        cfg = tmp_path / "cfg.yaml"
        cfg.write_text(textwrap.dedent(yaml_text))
    spec = RunSpec(
        env=cls, mode="process", phase=phase, runs_dir=str(tmp_path / "runs"), config_path=str(cfg) if cfg else None
    )
    return resolve(spec, cls)


@pytest.mark.parametrize("server_type", ["vllm", "sglang"])
def test_token_level_config_init_runs_phase_2(tmp_path, monkeypatch, server_type):
    r = _resolve(tmp_path, server_type, monkeypatch=monkeypatch)
    assert r.phase == 2
    assert [s.server_type for s in r.servers_for(2)] == [server_type]  # kept, not rewritten to vllm
    # phase 1 (a switch, or --phase 1) is the same server's chat endpoint
    assert [(s.server_type, s.base_url) for s in r.servers_for(1)] == [("openai", r.servers_for(2)[0].base_url)]
    assert any("phase 2" in note for note in r.notes)


def test_openai_config_init_runs_phase_1(tmp_path, monkeypatch):
    r = _resolve(tmp_path, "openai", monkeypatch=monkeypatch)
    assert r.phase == 1 and [s.server_type for s in r.servers_for(1)] == ["openai"]


def test_an_explicit_phase_wins_and_its_servers_match_it(tmp_path, monkeypatch):
    r = _resolve(tmp_path, "vllm", phase=1, monkeypatch=monkeypatch)
    assert r.phase == 1 and [s.server_type for s in r.servers_for(r.phase)] == ["openai"]


def test_mixed_server_types_are_refused(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match=r"server types are mixed \(\[0\] vllm, \[1\] openai\)"):
        _resolve(
            tmp_path,
            "vllm",
            monkeypatch=monkeypatch,
            yaml_text="""
            openai:
              - {base_url: "http://127.0.0.1:9001/v1"}
              - {base_url: "http://127.0.0.1:9002/v1", server_type: openai}
        """,
        )


def test_slurm_is_refused_at_config_time_with_the_reason(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match=r"slurm: True is not supported by hermes-console.*openai:"):
        _resolve(tmp_path, "openai", monkeypatch=monkeypatch, yaml_text="slurm: true\n")
