"""hermes-agent's top-level modules, served by ``environments`` through an import hook.

Each check runs in a fresh interpreter (cwd a temp dir, only the repo on PYTHONPATH) so
the top-level names it creates (``tools``, ``toolsets``, ...) never leak into this one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_python(code: str, cwd: Path, extra_path: Path | None = None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in ([extra_path] if extra_path else []) + [REPO])
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_upstream_module_names_import_after_environments(tmp_path):
    out = run_python(
        """
        import inspect, json
        import environments
        from tools.terminal_tool import (register_task_env_overrides, clear_task_env_overrides, cleanup_vm,
                                         cleanup_all_environments, get_active_env)
        from model_tools import get_tool_definitions, handle_function_call
        import toolsets, toolset_distributions
        from tools.budget_config import BudgetConfig
        from tools.tool_result_storage import maybe_persist_tool_result, enforce_turn_budget
        from tools.todo_tool import TodoStore, todo_tool
        import environments.toolsets, environments.task_overrides, environments.sandboxes

        register_task_env_overrides("t1", {"docker_image": "img:1", "cwd": "/app"})
        seen = environments.task_overrides.get_task_env_overrides("t1")
        clear_task_env_overrides("t1")
        after = environments.task_overrides.get_task_env_overrides("t1")

        raw = handle_function_call("terminal", {"command": "echo served"}, task_id="t2")
        active = get_active_env("t2") is not None
        cleanup_vm("t2")
        gone = get_active_env("t2") is None

        schemas = get_tool_definitions(enabled_toolsets=["terminal"], quiet_mode=True)
        print(json.dumps({
            "seen": seen, "after": after, "raw": json.loads(raw), "active": active, "gone": gone,
            "names": sorted(s["function"]["name"] for s in schemas),
            "same_table": toolsets.TOOLSETS is environments.toolsets.TOOLSETS,
            "resolve": toolsets.resolve_toolset("terminal") == environments.toolsets.resolve_toolset("terminal"),
            "dist": toolset_distributions.get_distribution("terminal_only") is not None,
            "budget": BudgetConfig().turn_budget,
            "todo": json.loads(todo_tool(todos=[{"id": "1", "content": "x", "status": "pending"}],
                                         store=TodoStore()))["summary"]["total"],
            "cleaned": cleanup_all_environments(),
        }))
        """,
        tmp_path,
    )
    assert out["seen"] == {"docker_image": "img:1", "cwd": "/app"} and out["after"] == {}
    assert out["raw"]["output"] == "served\n" and out["active"] and out["gone"]
    assert "terminal" in out["names"]
    assert out["same_table"] and out["resolve"] and out["dist"]
    assert out["budget"] == 200_000 and out["todo"] == 1 and out["cleaned"] == 0


def test_served_names_are_not_importable_without_environments(tmp_path):
    # The hook is installed by importing environments, and by nothing else.
    out = run_python(
        """
        import json
        try:
            import model_tools
            print(json.dumps({"imported": True}))
        except ModuleNotFoundError:
            print(json.dumps({"imported": False}))
        """,
        tmp_path,
    )
    assert out == {"imported": False}


def test_a_real_module_of_the_same_name_wins(tmp_path):
    own = tmp_path / "own"
    (own / "tools").mkdir(parents=True)
    (own / "tools" / "__init__.py").write_text("MINE = True\n")
    (own / "toolsets.py").write_text("MINE = True\n")
    out = run_python(
        """
        import json
        import environments
        import toolsets, tools
        try:
            import tools.terminal_tool
            sub = "served"
        except ModuleNotFoundError:
            sub = "missing"
        print(json.dumps({"toolsets": getattr(toolsets, "MINE", False), "tools": getattr(tools, "MINE", False),
                          "sub": sub, "model_tools": __import__("model_tools").__name__}))
        """,
        tmp_path,
        extra_path=own,
    )
    # the project's own modules win, and the hook does not reach into the project's package
    assert out == {"toolsets": True, "tools": True, "sub": "missing", "model_tools": "model_tools"}


def test_a_missing_name_on_a_served_module_says_what_it_provides(tmp_path):
    out = run_python(
        """
        import json
        import environments
        import model_tools
        try:
            model_tools.no_such_function
        except AttributeError as exc:
            print(json.dumps({"error": str(exc)}))
        """,
        tmp_path,
    )
    assert "no_such_function" in out["error"] and "get_tool_definitions" in out["error"]


def test_task_overrides_registry_validates_its_input():
    from environments.task_overrides import (
        clear_task_env_overrides,
        get_task_env_overrides,
        register_task_env_overrides,
    )

    with pytest.raises(ValueError, match="task_id must be a non-empty string"):
        register_task_env_overrides("", {"cwd": "/app"})
    with pytest.raises(TypeError, match="overrides must be a mapping"):
        register_task_env_overrides("t", ["cwd"])  # type: ignore[arg-type]
    given = {"cwd": "/app"}
    register_task_env_overrides("compat-t", given)
    given["cwd"] = "/elsewhere"  # stored as a copy
    try:
        assert get_task_env_overrides("compat-t") == {"cwd": "/app"}
        assert get_task_env_overrides(None) == {} and get_task_env_overrides("other") == {}
    finally:
        clear_task_env_overrides("compat-t")
    assert get_task_env_overrides("compat-t") == {}
