"""The resolved run config as rows for the console's config view (`d`), each value with its source.

Sources come from :func:`hermes_console.runtime.config.resolve` (flags, config file,
mode defaults...); a value nobody set comes from the env's ``config_init()``.
Secrets (api keys, tokens) are never shown, only whether they are set.
"""

from __future__ import annotations

from typing import Any

from environments.redact import is_secret_env_name, safe_head
from hermes_console.runtime.events import ConfigRow

VALUE_LIMIT = 200


def shown_value(key: str, value: Any) -> str:
    if is_secret_env_name(key):
        return "(set, hidden)" if value else "–"
    if value is None:
        return "None"
    return safe_head(value if isinstance(value, str) else repr(value), VALUE_LIMIT)


def config_rows(resolved: Any) -> list[ConfigRow]:
    """Rows {section, key, value, source} for the env, each phase 1 and phase 2 server, and the run."""
    sources: dict[str, str] = dict(getattr(resolved, "sources", {}) or {})
    rows: list[ConfigRow] = []

    def add(section: str, prefix: str, model: Any, default: str) -> None:
        try:
            values = model.model_dump()
        except Exception:  # noqa: BLE001 - a config that cannot dump is shown as its repr
            values = {"(config)": model}
        for key, value in values.items():
            name = prefix + key
            rows.append(
                {
                    "section": section,
                    "key": name,
                    "value": shown_value(key, value),
                    "source": sources.get(name, default),
                }
            )

    add("env", "env.", resolved.env_config, "config_init()")
    for i, cfg in enumerate(resolved.phase1_servers):
        add("openai", f"openai[{i}].", cfg, "config_init()")
    for i, cfg in enumerate(resolved.phase2_servers):
        add("phase2", f"phase2[{i}].", cfg, f"openai[{i}]")
    spec = resolved.spec
    run = [
        ("mode", spec.mode, "command line"),
        ("phase", resolved.phase, "--phase" if spec.phase is not None else "derived from the server types"),
        ("max_in_flight", spec.max_in_flight, "--max-in-flight" if spec.max_in_flight else "default"),
        ("run_dir", str(resolved.run_dir), sources.get("env.data_path_to_save_groups", "env.data_path_to_save_groups")),
        ("config_path", spec.config_path, "--config" if spec.config_path else "none"),
    ]
    for key, value, source in run:
        rows.append({"section": "run", "key": f"run.{key}", "value": shown_value(key, value), "source": source})
    return rows
