"""Helpers shared by the simulator tests (import as tests.sim.sim_helpers)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

TOOL_NAMES = ("terminal", "read_file", "write_file", "patch")


def tool_schema(name: str) -> dict[str, Any]:
    props = {
        "terminal": {"command": {"type": "string"}},
        "read_file": {"path": {"type": "string"}},
        "write_file": {"path": {"type": "string"}, "content": {"type": "string"}},
        "patch": {"path": {"type": "string"}, "old_string": {"type": "string"}, "new_string": {"type": "string"}},
    }.get(name, {})
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"The {name} tool.",
            "parameters": {"type": "object", "properties": props},
        },
    }


ERROR_TASK = (
    "The file log.txt holds a service log. Count the lines that contain the word ERROR and write just "
    "that number to error_count.txt."
)


def first_turn(task: str = ERROR_TASK) -> list[dict[str, Any]]:
    return [{"role": "system", "content": "You are a careful agent."}, {"role": "user", "content": task}]


# --------------------------------------------------------------------------- playing episodes


def run_tool(ws: Path, name: str, args: dict[str, Any]) -> str:
    """A minimal stand-in for the real tools (real bash in ``ws``), results shaped like Hermes'."""
    if name == "terminal":
        p = subprocess.run(["bash", "-c", args["command"]], cwd=ws, capture_output=True, text=True, timeout=10)
        return json.dumps({"output": p.stdout + p.stderr, "exit_code": p.returncode, "error": None})
    if name == "read_file":
        try:
            lines = (ws / args["path"]).read_text().splitlines()
        except OSError as exc:
            return json.dumps({"error": str(exc)})
        return json.dumps({"content": "\n".join(f"{i + 1:6d}|{line}" for i, line in enumerate(lines))})
    if name == "write_file":
        (ws / args["path"]).parent.mkdir(parents=True, exist_ok=True)
        (ws / args["path"]).write_text(args["content"])
        return json.dumps({"bytes_written": len(args["content"])})
    if name == "patch":
        f = ws / args["path"]
        f.write_text(f.read_text().replace(args["old_string"], args["new_string"]))
        return json.dumps({"success": True})
    return json.dumps({"error": f"unknown tool {name}"})


def check_task(ws: Path, spec: dict[str, Any]) -> bool:
    kind = spec["type"]
    if kind in ("file_equals", "file_contains"):
        try:
            text = (ws / spec["path"]).read_text()
        except OSError:
            return False
        return text.strip() == spec["expected"].strip() if kind == "file_equals" else spec["expected"] in text
    p = subprocess.run(["bash", "-c", spec["command"]], cwd=ws, capture_output=True, text=True, timeout=10)
    if kind == "command_exit_zero":
        return p.returncode == 0
    return p.stdout.strip() == spec["expected"].strip()


def play(
    policy: Any, task: dict[str, Any], ws: Path, tools: list[dict[str, Any]], sample: int = 0, max_turns: int = 12
) -> tuple[bool, list[dict[str, Any]]]:
    """Play one episode of a terminal task with real bash; returns (solved, messages)."""
    for cmd in task.get("setup", []):
        subprocess.run(["bash", "-c", cmd], cwd=ws, check=True, timeout=10)
    msgs = first_turn(task["prompt"])
    for turn in range(max_turns):
        action = policy.respond(msgs, tools, sample=sample)
        calls = [
            {
                "id": f"call_{turn}_{i}",
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
            }
            for i, c in enumerate(action.tool_calls)
        ]
        msgs.append({"role": "assistant", "content": action.content, **({"tool_calls": calls} if calls else {})})
        if action.final:
            break
        for c, tc in zip(action.tool_calls, calls):
            msgs.append({"role": "tool", "tool_call_id": tc["id"], "content": run_tool(ws, c.name, c.arguments)})
    return check_task(ws, task["check"]), msgs
