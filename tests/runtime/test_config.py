"""Loading an env and its config: precedence, both phases' server lists, and a
clear message (field/file, value, expectation) for every kind of bad input."""

from __future__ import annotations

import textwrap

import pytest

from environments.terminal_tasks.env import TerminalTasksEnv
from hermes_console.runtime.config import RunSpec, parse_flags, resolve
from hermes_console.runtime.errors import ConfigError
from hermes_console.runtime.loader import load_env_class


def _resolve(tmp_path, *flags, yaml_text=None, mode="process"):
    cfg = None
    if yaml_text is not None:
        cfg = tmp_path / "cfg.yaml"
        cfg.write_text(textwrap.dedent(yaml_text))
    spec = RunSpec(
        env=TerminalTasksEnv,
        mode=mode,
        flags=list(flags),
        config_path=str(cfg) if cfg else None,
        runs_dir=str(tmp_path / "runs"),
    )
    return resolve(spec, TerminalTasksEnv)


def test_precedence_config_init_then_yaml_then_flags(tmp_path, tokenizer_path):
    r = _resolve(
        tmp_path,
        "--env.group_size",
        "3",
        "--openai.model_name=flag-model",
        "--env.enabled_toolsets",
        "[terminal]",
        yaml_text="""
            env:
              group_size: 6
              max_agent_turns: 5
            openai:
              base_url: http://127.0.0.1:9999/v1
              model_name: yaml-model
        """,
    )
    env = r.env_config
    assert env.group_size == 3  # flag beats YAML
    assert env.max_agent_turns == 5  # YAML beats config_init (8)
    assert env.enabled_toolsets == ["terminal"]  # structured flag values are parsed
    assert env.use_wandb is False and env.include_messages is True and env.ensure_scores_are_not_same is False
    assert env.data_path_to_save_groups.startswith(str(tmp_path / "runs" / "terminal-tasks-"))
    assert env.data_path_to_save_groups.endswith("/groups.jsonl")
    [s1] = r.phase1_servers
    assert (s1.base_url, s1.model_name, s1.server_type, s1.api_key) == (
        "http://127.0.0.1:9999/v1",
        "flag-model",
        "openai",
        "x",
    )
    [s2] = r.phase2_servers
    assert (s2.base_url, s2.server_type, s2.tokenizer_name) == (s1.base_url, "vllm", tokenizer_path)


def test_openai_list_and_phase2_overrides(tmp_path):
    r = _resolve(
        tmp_path,
        "--phase2.server_type",
        "sglang",
        yaml_text="""
            openai:
              - {base_url: "http://127.0.0.1:9001/v1"}
              - {base_url: "http://127.0.0.1:9002/v1", model_name: other}
            phase2:
              timeout: 7
        """,
    )
    assert [s.base_url for s in r.phase1_servers] == ["http://127.0.0.1:9001/v1", "http://127.0.0.1:9002/v1"]
    assert [s.server_type for s in r.phase2_servers] == ["sglang", "sglang"]
    assert [s.timeout for s in r.phase2_servers] == [7, 7]
    assert r.phase2_servers[1].model_name == "other"


@pytest.mark.parametrize(
    "flags, expected",
    [
        (["--env.group_sise", "8"], r"--env\.group_sise: unknown field 'group_sise'.*Did you mean: group_size\?"),
        (["--env.group_size", "many"], r"env\.group_size = 'many' \(from flags\): Input should be a valid integer"),
        (["--openai.timeout", "soon"], r"openai\[0\]\.timeout = 'soon' \(from flags\)"),
        (["--phase2.server_type", "openai"], r"phase2\[0\]\.server_type = 'openai'.*expected one of vllm, sglang, trl"),
        (["--foo.bar", "1"], r"unknown namespace 'foo'"),
        (["--group_size", "1"], r"not namespaced"),
    ],
)
def test_bad_flags_name_field_value_and_expectation(tmp_path, flags, expected):
    with pytest.raises(ConfigError, match=expected):
        _resolve(tmp_path, *flags)


def test_bad_yaml_values_and_keys(tmp_path):
    with pytest.raises(
        ConfigError,
        match=r"env\.max_agent_turns = 'lots' \(from config file '.*cfg\.yaml'\): Input should be a valid integer",
    ):
        _resolve(tmp_path, yaml_text="env:\n  max_agent_turns: lots\n")
    with pytest.raises(ConfigError, match=r"unknown top-level key 'evn'.*Did you mean: env\?"):
        _resolve(tmp_path, yaml_text="evn:\n  group_size: 2\n")
    with pytest.raises(ConfigError, match=r"unknown field 'totl_steps'.*Did you mean: total_steps\?"):
        _resolve(tmp_path, yaml_text="env:\n  totl_steps: 2\n")


def test_malformed_yaml_names_file_and_line(tmp_path):
    with pytest.raises(ConfigError, match=r"cfg\.yaml' is not valid YAML at line 3"):
        _resolve(tmp_path, yaml_text="env:\n  group_size: 2\n  bad: [unclosed\n")
    with pytest.raises(ConfigError, match=r"does not exist"):
        resolve(RunSpec(env=TerminalTasksEnv, config_path=str(tmp_path / "missing.yaml")), TerminalTasksEnv)


def test_parse_flags_forms():
    out = parse_flags(["--env.use_wandb", "--env.group_size=4", "--openai.base_url", "http://x/v1"])
    assert out["env"] == {"use_wandb": "true", "group_size": "4"}
    assert out["openai"] == {"base_url": "http://x/v1"}


# --------------------------------------------------------------------------- env references


def test_env_refs_resolve(tmp_path):
    assert load_env_class("environments.terminal_tasks") is TerminalTasksEnv  # package: looks one level down
    assert load_env_class("environments.terminal_tasks.env:TerminalTasksEnv") is TerminalTasksEnv
    f = tmp_path / "my_env.py"
    f.write_text(
        "from environments.terminal_tasks.env import TerminalTasksEnv\n\nclass Mine(TerminalTasksEnv):\n    name = 'mine'\n"
    )
    assert load_env_class(str(f)).__name__ == "Mine"
    assert load_env_class(f"{f}:Mine").__name__ == "Mine"


def test_env_ref_errors_are_clear(tmp_path):
    empty = tmp_path / "empty_env.py"
    empty.write_text("X = 1\n")
    with pytest.raises(ConfigError, match=r"empty_env\.py' defines no env class; expected a concrete subclass"):
        load_env_class(str(empty))
    with pytest.raises(ConfigError, match=r"has no class 'TerminalTaskEnv'\. Did you mean: TerminalTasksEnv\?"):
        load_env_class("environments.terminal_tasks.env:TerminalTaskEnv")
    broken = tmp_path / "broken_env.py"
    broken.write_text("def f(:\n    pass\n")
    with pytest.raises(ConfigError, match=r"broken_env\.py' has a syntax error at line 1"):
        load_env_class(str(broken))
    with pytest.raises(ConfigError, match=r"does not exist"):
        load_env_class(str(tmp_path / "nope.py"))
    with pytest.raises(ConfigError, match=r"env module 'no_such_pkg.envs' was not found"):
        load_env_class("no_such_pkg.envs:Env")
    with pytest.raises(ConfigError, match=r"'load_tasks' is not a subclass of atroposlib BaseEnv"):
        load_env_class("environments.terminal_tasks:load_tasks")
    two = tmp_path / "two_env.py"
    two.write_text(
        "from environments.terminal_tasks.env import TerminalTasksEnv\n"
        "class A(TerminalTasksEnv): pass\nclass B(TerminalTasksEnv): pass\n"
    )
    with pytest.raises(ConfigError, match=r"several env classes \(A, B\); pick one"):
        load_env_class(str(two))


def test_setup_alongside_the_first_call_is_on_unless_turned_off(tmp_path):
    assert _resolve(tmp_path).env_config.overlap_setup is True
    assert _resolve(tmp_path, "--env.overlap_setup", "false").env_config.overlap_setup is False
