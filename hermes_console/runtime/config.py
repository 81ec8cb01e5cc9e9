"""Run configuration: what to run, and the env/server configs it runs with.

Precedence is atropos's: the env's ``config_init()``, then the YAML file
(``--config``; keys ``env:``, ``openai:`` dict or list, ``phase2:``), then flags
(``--env.group_size 8``, ``--openai.base_url ...``, ``--phase2.server_type sglang``).
Every value is validated by the config's own pydantic class; any problem is a
:class:`ConfigError` naming the source, the field, the value and what was expected.

Two server lists come out: phase 1 (OpenAI-compatible chat) and phase 2 (the same
base URLs as ``vllm``/``sglang`` servers with the local tokenizer), so the console
can switch between them at run time.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hermes_console.runtime.errors import ConfigError, close_matches, describe_value
from hermes_console.runtime.flags import is_http_url, parse_flags
from hermes_console.runtime.shard import resolve_shard

Mode = Literal["process", "serve", "evaluate"]
YAML_KEYS = ("env", "openai", "phase2", "slurm", "testing")
# atroposlib's Hub default: unusable offline (trap 5), replaced by our local tokenizer.
_HUB_DEFAULT_TOKENIZER = "NousResearch/DeepHermes-3-Llama-3-3B-Preview"
_PHASE2_TYPES = ("vllm", "sglang", "trl")


class RunSpec(BaseModel):
    """What the operator asked for. Cheap to build: nothing is imported or checked yet."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    env: Any  # "path/to/env.py[:Class]", "package.module[:Class]" or a BaseEnv subclass
    mode: Mode = "process"
    config_path: str | None = None
    flags: list[str] = Field(default_factory=list)  # atropos-style --env.x / --openai.x / --phase2.x
    env_overrides: dict[str, Any] = Field(default_factory=dict)  # programmatic, applied after flags
    openai_overrides: dict[str, Any] = Field(default_factory=dict)
    # None: the phase the env's servers make (token-level server_type, e.g. vllm, is phase 2).
    phase: Literal[1, 2] | None = None
    max_in_flight: int | None = Field(None, ge=1)
    runs_dir: str = "runs"
    record_path: str | None = None
    check_server: bool = True  # quick loopback request before starting
    server_wait_s: float = Field(0.0, ge=0)  # keep probing this long (a server starting beside us)
    heartbeat_s: float = Field(0.25, gt=0)
    stats_interval_s: float = Field(1.0, gt=0)
    idle_poll_s: float = Field(0.1, gt=0)  # serve mode: get_next_item returned None
    shard: str | None = None  # "i/n": this host's share of the items (default: from Slurm/K8s/RANK env vars)


@dataclass
class ResolvedRun:
    env_cls: type
    env_config: Any  # the env's BaseEnvConfig subclass instance
    phase1_servers: list[Any]  # APIServerConfig, server_type openai
    phase2_servers: list[Any]  # APIServerConfig, server_type vllm/sglang/trl
    run_dir: Path
    spec: RunSpec
    slurm: bool = False
    testing: bool = False
    notes: list[str] = field(default_factory=list)
    phase: int = 1  # the phase that runs first: spec.phase, else derived from the server types
    shard: Any | None = None  # runtime.shard.Shard, or None: every item is this host's
    # "env.group_size" -> where its value came from (flags, config file, mode default...);
    # values not listed come from the env's config_init() (the config view shows both).
    sources: dict[str, str] = field(default_factory=dict)

    def servers_for(self, phase: int) -> list[Any]:
        return self.phase1_servers if phase == 1 else self.phase2_servers


# --------------------------------------------------------------------------- flags


def _wants_string(annotation: Any) -> bool:
    """True when a field is a plain (optional) string: keep the flag text as is."""
    if annotation is str:
        return True
    if get_origin(annotation) is Union:
        args = [a for a in get_args(annotation) if a is not type(None)]
        return len(args) == 1 and args[0] is str
    return False


def _coerce_flag(model: type[BaseModel], key: str, text: str) -> Any:
    """Flags arrive as text; parse structured values (lists, dicts, null) with YAML
    and leave the rest to pydantic's coercion."""
    info = model.model_fields[key]
    if _wants_string(info.annotation):
        return text
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _check_values(env_config: Any, servers: list[Any], prefix: str) -> None:
    """The same rules on the resolved configs (YAML and programmatic overrides too)."""
    group_size = getattr(env_config, "group_size", 1)
    if not isinstance(group_size, int) or group_size < 1:
        raise ConfigError(f"env.group_size = {describe_value(group_size)}: expected a whole number >= 1")
    for i, cfg in enumerate(servers):
        url = getattr(cfg, "base_url", None)
        if url and not is_http_url(url):
            raise ConfigError(
                f"{prefix}[{i}].base_url = {describe_value(url)}: expected an http(s) URL such as "
                "http://127.0.0.1:9001/v1"
            )


# --------------------------------------------------------------------------- yaml


def load_yaml(path: str) -> dict[str, Any]:
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"config file {path!r} does not exist; expected a YAML file with 'env:' and 'openai:' keys")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        # The context mark is where the broken construct starts (an unclosed '['),
        # the problem mark where the parser gave up (often the end of the file).
        mark = getattr(exc, "context_mark", None) or getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = " ".join(x for x in (getattr(exc, "context", None), getattr(exc, "problem", None)) if x)
        raise ConfigError(
            f"config file {path!r} is not valid YAML at{where}: {problem or str(exc).splitlines()[0]}"
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"config file {path!r}: top level is a {type(data).__name__}; expected a mapping with 'env:' / 'openai:' keys"
        )
    for key in data:
        if key not in YAML_KEYS:
            raise ConfigError(
                f"config file {path!r}: unknown top-level key {key!r}; expected one of {', '.join(YAML_KEYS)}.{close_matches(str(key), YAML_KEYS)}"
            )
    for key in ("env", "phase2"):
        if (
            key in data
            and data[key] is not None
            and not isinstance(data[key], (dict, list) if key == "phase2" else dict)
        ):
            raise ConfigError(
                f"config file {path!r}: '{key}:' is a {type(data[key]).__name__}; expected a mapping of fields"
            )
    oai = data.get("openai")
    if oai is not None and not isinstance(oai, (dict, list)):
        raise ConfigError(
            f"config file {path!r}: 'openai:' is a {type(oai).__name__}; expected a mapping or a list of mappings"
        )
    if isinstance(oai, list) and not all(isinstance(x, dict) for x in oai):
        raise ConfigError(f"config file {path!r}: every entry of 'openai:' must be a mapping of server fields")
    return data


# --------------------------------------------------------------------------- validation


def _check_known(model: type[BaseModel], values: dict[str, Any], source: str, flag_ns: str | None = None) -> None:
    known = list(model.model_fields)
    for key in values:
        if key not in model.model_fields:
            where = f"flag --{flag_ns}.{key}" if flag_ns else source
            raise ConfigError(f"{where}: unknown field {key!r} for {model.__name__}.{close_matches(key, known)}")


def _friendly(exc: ValidationError, model: type, source_of: dict[str, str], prefix: str) -> ConfigError:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err.get("loc", ()))
        top = str(err["loc"][0]) if err.get("loc") else ""
        src = source_of.get(top, "default")
        value = describe_value(err.get("input"))
        lines.append(f"{prefix}{loc} = {value} (from {src}): {err.get('msg', 'invalid')}")
    head = (
        f"invalid {model.__name__}: " if len(lines) == 1 else f"invalid {model.__name__} ({len(lines)} problems):\n  "
    )
    return ConfigError(head + "\n  ".join(lines))


def _build(
    model: type,
    base: dict[str, Any],
    layers: list[tuple[str, dict[str, Any]]],
    prefix: str,
    sources: dict[str, str] | None = None,
) -> Any:
    """Merge ``layers`` (source name, values) over ``base`` and validate with ``model``.
    ``sources`` (if given) learns which layer set each value, keyed ``prefix + field``."""
    merged = dict(base)
    source_of: dict[str, str] = {}
    for source, values in layers:
        _check_known(model, values, source)
        for k, v in values.items():
            merged[k] = v
            source_of[k] = source
    if sources is not None:
        sources.update({prefix + k: v for k, v in source_of.items()})
    try:
        return model(**merged)
    except ValidationError as exc:
        raise _friendly(exc, model, source_of, prefix) from None


def _flag_layer(model: type, raw: dict[str, str], ns: str) -> dict[str, Any]:
    _check_known(model, raw, "flags", flag_ns=ns)
    return {k: _coerce_flag(model, k, v) for k, v in raw.items()}


# --------------------------------------------------------------------------- resolve


def _check_writable(path: str, field_name: str) -> None:
    """Fail before anything runs when the jsonl cannot be created: otherwise atroposlib
    raises from deep inside the env constructor with a message that names neither."""
    target = Path(path).expanduser()
    if target.is_dir():
        raise ConfigError(
            f"{field_name} = {path!r} is a directory; expected a file path such as {path.rstrip('/')}/groups.jsonl"
        )
    ancestor = target.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ConfigError(
            f"{field_name} = {path!r} cannot be created: {str(ancestor)!r} is a file, not a directory; "
            "expected a path in a writable directory"
        )
    if not os.access(ancestor, os.W_OK | os.X_OK) or (target.exists() and not os.access(target, os.W_OK)):
        where = target if target.exists() else ancestor
        raise ConfigError(
            f"{field_name} = {path!r} is not writable ({str(where)!r} is read-only or not ours); "
            "expected a path in a writable directory"
        )


def default_run_dir(runs_dir: str, env_name: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", env_name).strip("-") or "env"
    base = Path(runs_dir) / f"{safe}-{stamp}"
    candidate, n = base, 1
    while candidate.exists():
        candidate = base.with_name(f"{base.name}-{n}")
        n += 1
    return candidate


def resolve(spec: RunSpec, env_cls: type[Any]) -> ResolvedRun:
    """Build validated env + server configs for ``env_cls`` from ``spec``."""
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig

    from environments.atropos_compat import fix_server_configs
    from environments.tokenizer import local_tokenizer_path

    yaml_cfg = load_yaml(spec.config_path) if spec.config_path else {}
    yaml_src = f"config file {spec.config_path!r}"
    flags = parse_flags(spec.flags)
    notes: list[str] = []
    sources: dict[str, str] = {}

    try:
        init_env, init_servers = env_cls.config_init()
    except Exception as exc:  # the env author's code
        raise ConfigError(f"{env_cls.__name__}.config_init() raised {type(exc).__name__}: {exc}") from exc
    env_model = type(init_env)

    # ---- env config: config_init -> mode defaults -> YAML -> flags -> programmatic
    base = init_env.model_dump()
    explicit = set(yaml_cfg.get("env") or {}) | set(flags["env"]) | set(spec.env_overrides)
    if spec.mode in ("process", "evaluate"):
        # atropos's process CLI defaults, except wandb: off unless asked (no key, no network).
        if spec.mode == "process":
            base["ensure_scores_are_not_same"] = False
            base["include_messages"] = True
            sources.update(
                {
                    "env.ensure_scores_are_not_same": "process mode default",
                    "env.include_messages": "process mode default",
                }
            )
        base["use_wandb"] = False
        sources["env.use_wandb"] = f"{spec.mode} mode default (offline)"
    if base.get("tokenizer_name") in (None, "", _HUB_DEFAULT_TOKENIZER) and "tokenizer_name" not in explicit:
        base["tokenizer_name"] = local_tokenizer_path()
        sources["env.tokenizer_name"] = "local tokenizer (the Hub default needs the network)"
        notes.append("tokenizer_name: using the local tokenizer (the Hub default needs the network)")
    env_config = _build(
        env_model,
        base,
        [
            (yaml_src, dict(yaml_cfg.get("env") or {})),
            ("flags", _flag_layer(env_model, flags["env"], "env")),
            ("overrides", dict(spec.env_overrides)),
        ],
        "env.",
        sources,
    )

    env_name = getattr(env_cls, "name", None) or env_cls.__name__
    # serve mode keeps a jsonl too: what was sent to the trainer stays inspectable.
    if spec.mode in ("process", "serve") and getattr(env_config, "data_path_to_save_groups", None) is None:
        run_dir = default_run_dir(spec.runs_dir, env_name)
        env_config.data_path_to_save_groups = str(run_dir / "groups.jsonl")
        sources["env.data_path_to_save_groups"] = "run dir default"
    elif getattr(env_config, "data_path_to_save_groups", None):
        run_dir = Path(env_config.data_path_to_save_groups).parent
    else:
        run_dir = default_run_dir(spec.runs_dir, env_name)
    if getattr(env_config, "data_path_to_save_groups", None):
        _check_writable(env_config.data_path_to_save_groups, "env.data_path_to_save_groups")

    # ---- phase 1 servers: config_init -> YAML openai (dict or list) -> flags -> programmatic
    try:
        templates = fix_server_configs(init_servers, tokenizer_name=env_config.tokenizer_name)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{env_cls.__name__}.config_init() server configs: {exc}") from exc
    server_model = type(templates[0]) if isinstance(templates[0], APIServerConfig) else APIServerConfig
    yaml_oai = yaml_cfg.get("openai")
    if isinstance(yaml_oai, dict):
        yaml_oai = [yaml_oai]
    if yaml_oai:
        pairs = [(templates[min(i, len(templates) - 1)], entry) for i, entry in enumerate(yaml_oai)]
    else:
        pairs = [(t, {}) for t in templates]
    oai_flags = _flag_layer(server_model, flags["openai"], "openai")
    phase1 = []
    for i, (template, entry) in enumerate(pairs):
        phase1.append(
            _build(
                server_model,
                template.model_dump(),
                [
                    (f"{yaml_src} openai[{i}]", dict(entry)),
                    ("flags", oai_flags),
                    ("overrides", dict(spec.openai_overrides)),
                ],
                f"openai[{i}].",
                sources,
            )
        )
    try:
        phase1 = fix_server_configs(phase1, tokenizer_name=env_config.tokenizer_name)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"openai servers: {exc}") from exc
    token_level = _token_level(phase1, f"{env_cls.__name__}.config_init() / openai")

    _check_values(env_config, phase1, "openai")

    # ---- phase 2 servers: phase 1 URLs as vllm (or YAML phase2 / --phase2.*), local tokenizer
    yaml_p2 = yaml_cfg.get("phase2") or {}
    p2_flags = _flag_layer(server_model, flags["phase2"], "phase2")
    phase2 = []
    if isinstance(yaml_p2, list):
        p2_pairs = [(phase1[min(i, len(phase1) - 1)], entry) for i, entry in enumerate(yaml_p2)]
        common: dict[str, Any] = {}
    else:
        p2_pairs = [(cfg, {}) for cfg in phase1]
        common = dict(yaml_p2)
    for i, (template, entry) in enumerate(p2_pairs):
        base2 = template.model_dump()
        base2["server_type"] = template.server_type if template.server_type in _PHASE2_TYPES else "vllm"
        base2["tokenizer_name"] = env_config.tokenizer_name
        cfg = _build(
            server_model,
            base2,
            [(f"{yaml_src} phase2", common), (f"{yaml_src} phase2[{i}]", dict(entry)), ("flags", p2_flags)],
            f"phase2[{i}].",
            sources,
        )
        sources.setdefault(f"phase2[{i}].server_type", "phase 1 server as token-level (vllm)")
        sources.setdefault(f"phase2[{i}].tokenizer_name", "env.tokenizer_name")
        if cfg.server_type not in _PHASE2_TYPES:
            raise ConfigError(
                f"phase2[{i}].server_type = {cfg.server_type!r}: phase 2 needs a token-level server; expected one of {', '.join(_PHASE2_TYPES)}"
            )
        phase2.append(cfg)
    try:
        phase2 = fix_server_configs(phase2, tokenizer_name=env_config.tokenizer_name)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"phase2 servers: {exc}") from exc

    for i, cfg in enumerate(phase2):
        if not Path(cfg.tokenizer_name).expanduser().is_dir():
            # Not fatal (phase 1 does not need it), but say so before anything starts.
            notes.append(
                f"phase2[{i}].tokenizer_name = {cfg.tokenizer_name!r} is not a local directory; "
                "switching to phase 2 will fail offline"
            )
    if token_level:
        # The env asked for token-level servers: that is phase 2 (ManagedServer). Phase 1 is
        # the same servers' OpenAI-compatible chat endpoint.
        phase1 = [cfg.model_copy(update={"server_type": "openai"}) for cfg in phase1]
    phase = spec.phase if spec.phase is not None else (2 if token_level else 1)
    if token_level and spec.phase is None:
        notes.append(
            f"server_type {phase2[0].server_type!r} (token-level) runs through ManagedServer: starting in phase 2 "
            "(--phase 1 uses the same servers' chat endpoint)"
        )
    if yaml_cfg.get("slurm"):
        raise ConfigError(
            f"{yaml_src}: slurm: {yaml_cfg.get('slurm')!r} is not supported by hermes-console (the server list is "
            "not built from the Slurm node list); list the inference servers under openai: instead, or run the env "
            "with atroposlib's own CLI (python env.py serve --slurm true)"
        )
    _check_values(env_config, phase2, "phase2")
    slurm = False
    testing = bool(yaml_cfg.get("testing", False))
    return ResolvedRun(
        env_cls=env_cls,
        env_config=env_config,
        phase1_servers=phase1,
        phase2_servers=phase2,
        run_dir=run_dir,
        spec=spec,
        slurm=slurm,
        testing=testing,
        notes=notes,
        phase=phase,
        shard=resolve_shard(spec.shard),
        sources=sources,
    )


def _token_level(servers: list[Any], where: str) -> bool:
    """True when every server is token-level (vllm/sglang/trl); a mix is refused."""
    kinds = [cfg.server_type in _PHASE2_TYPES for cfg in servers]
    if any(kinds) and not all(kinds):
        listing = ", ".join(f"[{i}] {cfg.server_type}" for i, cfg in enumerate(servers))
        raise ConfigError(
            f"{where}: server types are mixed ({listing}); atroposlib decides the phase from the first server only, "
            f"so use either all 'openai' (phase 1) or all of {', '.join(_PHASE2_TYPES)} (phase 2)"
        )
    return bool(kinds) and all(kinds)
