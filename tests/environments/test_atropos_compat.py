"""One test per atroposlib trap fix in environments.atropos_compat."""

from __future__ import annotations

import asyncio
import io
import logging
import warnings

import pytest
from atroposlib.envs.server_handling.server_baseline import APIServerConfig, ServerBaseline
from atroposlib.envs.server_handling.server_manager import ServerManager

from environments import atropos_compat as compat


def test_single_config_wrapped_keeping_base_url():
    single = APIServerConfig(base_url="http://127.0.0.1:5555/v1", model_name="m", api_key="k", health_check=False)
    with pytest.warns(UserWarning, match="should be a list"):
        fixed = compat.fix_server_configs(single)
    assert isinstance(fixed, list) and fixed[0].base_url == "http://127.0.0.1:5555/v1"
    # The point of the fix: atroposlib now really talks to that URL.
    manager = ServerManager(fixed)
    assert [str(s.config.base_url) for s in manager.servers] == ["http://127.0.0.1:5555/v1"]
    # Unfixed, atroposlib would have fanned out to localhost:9004..9007.
    assert [s.config.base_url for s in ServerManager(single).servers][0] == "http://localhost:9004/v1"


def test_server_baseline_converted_to_default_url():
    with pytest.warns(UserWarning, match="ServerBaseline"):
        fixed = compat.fix_server_configs(ServerBaseline(model_name="mm"))
    assert fixed[0].base_url == compat.DEFAULT_BASE_URL and fixed[0].model_name == "mm"


def test_empty_api_key_becomes_placeholder():
    fixed = compat.fix_server_configs([APIServerConfig(base_url="http://127.0.0.1:1/v1", api_key="")])
    assert fixed[0].api_key == "x"
    ServerManager(fixed)  # openai would raise "Missing credentials" with ""


def test_default_timeout_shortened_user_timeout_kept():
    fixed = compat.fix_server_configs(
        [
            APIServerConfig(base_url="http://h/v1", api_key="k"),
            APIServerConfig(base_url="http://h/v1", api_key="k", timeout=77),
        ]
    )
    assert [c.timeout for c in fixed] == [compat.DEFAULT_TIMEOUT_S, 77]


def test_vllm_config_gets_local_tokenizer(tokenizer_path):
    fixed = compat.fix_server_configs(
        [APIServerConfig(base_url="http://h/v1", server_type="vllm", model_name="hub/x")], tokenizer_name=tokenizer_path
    )
    assert fixed[0].tokenizer_name == tokenizer_path


@pytest.mark.parametrize(
    "bad, message",
    [
        ("http://x", "expected a list"),
        ([], "at least one"),
        ([APIServerConfig(base_url="")], "base_url is empty"),
        ([42], r"server_configs\[0\] is a int"),
    ],
)
def test_bad_server_configs_have_clear_errors(bad, message):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises((TypeError, ValueError), match=message):
            compat.fix_server_configs(bad)


def test_default_server_configs(tokenizer_path):
    cfgs = compat.default_server_configs("http://127.0.0.1:9/v1", "sim", "vllm", tokenizer_path)
    (cfg,) = cfgs
    assert (cfg.base_url, cfg.model_name, cfg.server_type, cfg.tokenizer_name) == (
        "http://127.0.0.1:9/v1",
        "sim",
        "vllm",
        tokenizer_path,
    )
    assert cfg.health_check is False and cfg.api_key == "x" and cfg.timeout == 30
    assert compat.default_server_configs()[0].tokenizer_name == tokenizer_path
    with pytest.raises(ValueError, match="server_type"):
        compat.default_server_configs(server_type="tgi")


async def test_cancel_health_checks():
    manager = ServerManager(compat.default_server_configs())
    forever = asyncio.get_running_loop().create_task(asyncio.sleep(3600))
    manager.servers[0].check_task = forever
    assert await compat.cancel_health_checks(manager) == 1
    assert forever.cancelled() and manager.servers[0].check_task is None
    assert await compat.cancel_health_checks(manager) == 0


def test_offline_defaults_respect_user_choices():
    env = {"WANDB_MODE": "online"}
    applied = compat.apply_offline_defaults(env)
    assert env["WANDB_MODE"] == "online" and "WANDB_MODE" not in applied
    assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_VERBOSITY"] == "error"
    env = {}
    compat.apply_offline_defaults(env)
    assert env["WANDB_MODE"] == "offline"
    env = {"HERMES_WANDB_ONLINE": "1", "HF_HUB_OFFLINE": "0"}
    compat.apply_offline_defaults(env)
    assert "WANDB_MODE" not in env and env["HF_HUB_OFFLINE"] == "0"


def test_tame_atroposlib_logging():
    child = logging.getLogger("atroposlib.envs.base")
    child.setLevel(logging.DEBUG)  # what atroposlib does at import
    stream = io.StringIO()
    root = compat.tame_atroposlib_logging(stream=stream)
    compat.tame_atroposlib_logging(stream=stream)  # idempotent: still one handler
    assert root.propagate is False and sum(getattr(h, "_hermes_tamed", False) for h in root.handlers) == 1
    child.debug("noise")
    child.warning("signal")
    assert "noise" not in stream.getvalue() and "signal" in stream.getvalue()


def test_vllm_missing_warning_shown_once():
    import warnings

    compat.tame_atroposlib_logging(stream=io.StringIO())
    with warnings.catch_warnings(record=True) as caught:
        compat.tame_atroposlib_logging(stream=io.StringIO())  # installs the filter inside this context
        for _ in range(3):
            warnings.warn("vLLM is not installed — tool call parsing is disabled.", UserWarning, stacklevel=1)
    assert len([w for w in caught if "vLLM is not installed" in str(w.message)]) == 1


def test_drop_reason_codes_and_details():
    from types import SimpleNamespace

    cfg = SimpleNamespace(group_size=2, ensure_scores_are_not_same=True)
    assert compat.drop_reason(None, cfg)[0] == "empty_group"
    assert compat.drop_reason([1], cfg)[0] == "invalid_group"
    assert compat.drop_reason({"tokens": [[1]], "scores": [1.0]}, cfg) == ("wrong_group_size", "1 rollouts, expected 2")
    assert compat.drop_reason({"tokens": [[1], [2]], "scores": [1.0, 1.0]}, cfg)[0] == "identical_scores"
    long = {"tokens": [[1] * 9, [2]], "scores": [1.0, 0.0]}
    assert compat.drop_reason(long, cfg, max_token_len=5)[0] == "too_long"
    assert compat.drop_reason(long, cfg, max_token_len=5, abort_on_any_max_length_exceeded=False) is None
    assert compat.drop_reason({"tokens": [[1], [2]], "scores": [1.0, 0.0]}, cfg) is None


def test_sensible_max_token_len():
    assert compat.sensible_max_token_len(4096, 8) == 4096 * 8
    assert compat.sensible_max_token_len(100, 0) == 100
    with pytest.raises(ValueError, match="positive"):
        compat.sensible_max_token_len(0)


def test_tokenize_conversation_masks_prompt(tokenizer):
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello there"},
    ]
    tokens, masks = compat.tokenize_conversation(tokenizer, messages)
    assert isinstance(tokens, list) and all(isinstance(t, int) for t in tokens)
    assert len(tokens) == len(masks)
    n_prompt = masks.count(-100)
    prompt_text = tokenizer.apply_chat_template(messages[:2], tokenize=False, add_generation_prompt=True)
    assert tokenizer.decode(tokens[:n_prompt]) == prompt_text
    assert "hello there" in tokenizer.decode(tokens[n_prompt:])
    assert masks[n_prompt:] == tokens[n_prompt:]
    # every assistant turn is trained, nothing after it (tool output, headers): tests/data/test_phase1_masks.py
