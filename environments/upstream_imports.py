"""The hermes-agent modules an env written for the original layer imports, served by ours.

Envs written for hermes-agent's ``environments/`` import a few top-level modules of
hermes-agent itself (``tools.terminal_tool``, ``model_tools``, ``toolsets``, ...). This
distribution ships no such top-level packages; instead, importing ``environments``
appends a finder to ``sys.meta_path`` that serves those names from our implementations.

It is consulted last, so it is only active for names that are not otherwise
importable: a real ``toolsets.py`` on ``sys.path``, an installed ``hermes-agent``, or a
project's own ``tools`` package always wins (and then ``tools.terminal_tool`` is looked
up in that package, not here). The served modules are thin: every name resolves to our
implementation at access time, so state (toolset tables, override registry) is shared.

Served names (upstream name -> ours):

* ``tools.terminal_tool``: ``register_task_env_overrides``, ``clear_task_env_overrides``
  (:mod:`environments.task_overrides`), ``cleanup_vm``, ``cleanup_all_environments``,
  ``get_active_env`` (the live sandbox of a task id, or None), ``terminal_tool``
  (returns the JSON string, as upstream did);
* ``model_tools``: ``get_tool_definitions``, ``handle_function_call``;
* ``toolsets``, ``toolset_distributions``: :mod:`environments.toolsets`,
  :mod:`environments.toolset_distributions`;
* ``tools.budget_config``: ``BudgetConfig``, ``DEFAULT_BUDGET``, ...;
* ``tools.tool_result_storage``: ``maybe_persist_tool_result``, ``enforce_turn_budget``
  (the upstream ``env`` argument may be a task id, a sandbox, or None);
* ``tools.todo_tool``: ``TodoStore``, ``todo_tool``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import json
import sys
import types
from collections.abc import Callable, Iterable, Sequence
from typing import Any

# --------------------------------------------------------------------------- adapters
# Where the upstream signature differs from ours, a small function keeps the upstream one.


def terminal_tool(
    command: Any,
    background: bool = False,
    timeout: float | None = None,
    task_id: str | None = None,
    force: bool = False,
    workdir: str | None = None,
    **_ignored: Any,
) -> str:
    """Upstream ``terminal_tool``: our terminal tool, answering with a JSON string.

    ``force`` and the background-notification options have no counterpart here and
    are ignored."""
    from environments.tools.terminal import terminal_tool as run

    result = run(command, timeout=timeout, background=background, workdir=workdir, task_id=task_id)
    return json.dumps(result, ensure_ascii=False)


def get_active_env(task_id: str | None) -> Any:
    """The live sandbox of ``task_id`` (never creates one), or None."""
    from environments.sandboxes import find_sandbox

    return find_sandbox(task_id)


def handle_function_call(
    function_name: str,
    function_args: dict[str, Any],
    task_id: str | None = None,
    tool_call_id: str | None = None,
    session_id: str | None = None,
    user_task: str | None = None,
    enabled_tools: Iterable[str] | None = None,
    skip_pre_tool_call_hook: bool = False,
) -> str:
    """Upstream ``model_tools.handle_function_call``; always a JSON string.

    ``tool_call_id``/``session_id`` and the plugin hook flag have no counterpart here."""
    from environments.tools import handle_function_call as dispatch

    if enabled_tools is not None and function_name not in set(enabled_tools):
        return json.dumps(
            {"error": f"Tool '{function_name}' is not enabled for this call; enabled tools: {sorted(enabled_tools)}"}
        )
    return dispatch(function_name, function_args, task_id=task_id, user_task=user_task)


def _task_id_of(env: Any) -> str | None:
    """Upstream passed the sandbox object; ours are addressed by task id."""
    if env is None or isinstance(env, str):
        return env
    task_id = getattr(env, "task_id", None)
    return task_id if isinstance(task_id, str) else None


def maybe_persist_tool_result(
    content: str, tool_name: str, tool_use_id: str, env: Any = None, config: Any = None, threshold: float | None = None
) -> str:
    from environments.tools.budget import DEFAULT_BUDGET
    from environments.tools.budget import maybe_persist_tool_result as persist

    return persist(
        content,
        tool_name,
        tool_use_id,
        _task_id_of(env),
        config=DEFAULT_BUDGET if config is None else config,
        threshold=threshold,
    )


def enforce_turn_budget(tool_msgs: list[dict[str, Any]], env: Any = None, config: Any = None) -> list[dict[str, Any]]:
    from environments.tools.budget import DEFAULT_BUDGET
    from environments.tools.budget import enforce_turn_budget as enforce

    return enforce(tool_msgs, _task_id_of(env), config=DEFAULT_BUDGET if config is None else config)


# --------------------------------------------------------------------------- the table

_HERE = __name__
# upstream module -> ordered sources: (our module, names or None for "everything public")
_Source = tuple[str, Sequence[str] | None]
SERVED: dict[str, list[_Source]] = {
    "tools": [],  # a namespace for the submodules below
    "tools.terminal_tool": [
        (
            "environments.task_overrides",
            ("register_task_env_overrides", "clear_task_env_overrides", "get_task_env_overrides"),
        ),
        ("environments.sandboxes", ("cleanup_vm", "cleanup_all_environments")),
        (_HERE, ("terminal_tool", "get_active_env")),
    ],
    "model_tools": [
        ("environments.tools", ("get_tool_definitions",)),
        (_HERE, ("handle_function_call",)),
    ],
    "toolsets": [("environments.toolsets", None)],
    "toolset_distributions": [("environments.toolset_distributions", None)],
    "tools.budget_config": [
        ("environments.tools.budget", ("BudgetConfig", "DEFAULT_BUDGET", "PINNED_THRESHOLDS", "resolve_threshold"))
    ],
    "tools.tool_result_storage": [(_HERE, ("maybe_persist_tool_result", "enforce_turn_budget"))],
    "tools.todo_tool": [("environments.tools.todo", ("TodoStore", "todo_tool"))],
}


def _public(module: types.ModuleType) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:
        # Public names defined there (not what it imported: typing names, modules).
        names = [
            n
            for n, v in vars(module).items()
            if not n.startswith("_")
            and n not in ("annotations", "logger")
            and not isinstance(v, types.ModuleType)
            and (not callable(v) or getattr(v, "__module__", module.__name__) == module.__name__)
        ]
    return list(names)


def _resolver(upstream: str) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    sources = SERVED[upstream]

    def lookup(name: str) -> Any:
        for module_name, names in sources:
            if names is None or name in names:
                module = importlib.import_module(module_name)
                if hasattr(module, name):
                    return getattr(module, name)
        raise AttributeError(
            f"module {upstream!r} (served by hermes-console's environments layer) has no attribute {name!r}; "
            f"it provides: {', '.join(listing()) or 'only submodules'}"
        )

    def listing() -> list[str]:
        out: list[str] = []
        for module_name, names in sources:
            out.extend(names if names is not None else _public(importlib.import_module(module_name)))
        return sorted(set(out))

    return lookup, listing


class _ServedLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None  # the default module object

    def exec_module(self, module: types.ModuleType) -> None:
        lookup, listing = _resolver(module.__name__)
        module.__dict__["__getattr__"] = lookup  # PEP 562: names resolve at access
        module.__dict__["__dir__"] = listing
        module.__doc__ = f"Served by environments.upstream_imports (hermes-agent's {module.__name__})."
        module.__hermes_console_served__ = True  # type: ignore[attr-defined]
        # Eager names as well, so `from X import *` and star-users see them.
        module.__all__ = listing()  # type: ignore[attr-defined]


class UpstreamModuleFinder(importlib.abc.MetaPathFinder):
    """Serves :data:`SERVED` names; sits last on ``sys.meta_path``."""

    _loader = _ServedLoader()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in SERVED:
            return None
        parent = fullname.rpartition(".")[0]
        if parent and not getattr(sys.modules.get(parent), "__hermes_console_served__", False):
            return None  # the parent is someone's real package: stay out of it
        is_package = any(other.startswith(fullname + ".") for other in SERVED)
        spec = importlib.machinery.ModuleSpec(fullname, self._loader, is_package=is_package)
        if is_package:
            spec.submodule_search_locations = []
        return spec


def install() -> UpstreamModuleFinder:
    """Append the finder to ``sys.meta_path`` once; returns the installed finder."""
    for finder in sys.meta_path:
        if isinstance(finder, UpstreamModuleFinder):
            return finder
    finder = UpstreamModuleFinder()
    sys.meta_path.append(finder)
    return finder


def uninstall() -> None:
    """Remove the finder (modules already imported stay in ``sys.modules``)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, UpstreamModuleFinder)]
