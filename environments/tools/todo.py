"""The ``todo`` tool: an ordered task list owned by one agent loop.

The agent loop creates one TodoStore per rollout and calls ``todo_tool``
itself, so the list lives exactly as long as the loop and never leaks
between rollouts. The registry entry exists only to provide the schema.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from environments.tools.registry import register

STATUSES = ("pending", "in_progress", "completed", "cancelled")


class TodoStore:
    """Ordered ``{id, content, status}`` items."""

    def __init__(self) -> None:
        self._items: list[dict[str, str]] = []
        self._lock = threading.Lock()

    def read(self) -> list[dict[str, str]]:
        with self._lock:
            return [dict(item) for item in self._items]

    def replace(self, items: list[dict[str, str]]) -> None:
        with self._lock:
            self._items = [dict(item) for item in items]

    def merge(self, updates: list[dict[str, Any]]) -> None:
        """Update items by id (only the given fields); unknown ids are appended."""
        with self._lock:
            index = {item["id"]: item for item in self._items}
            for update in updates:
                current = index.get(update["id"])
                if current is None:
                    new = {
                        "id": update["id"],
                        "content": update.get("content", ""),
                        "status": update.get("status", "pending"),
                    }
                    self._items.append(new)
                    index[new["id"]] = new
                else:
                    for key in ("content", "status"):
                        if key in update:
                            current[key] = update[key]

    def summary(self) -> dict[str, int]:
        items = self.read()
        counts = {status: 0 for status in STATUSES}
        for item in items:
            counts[item["status"]] = counts.get(item["status"], 0) + 1
        return {"total": len(items), **counts}


def _validate(todos: Any, merge: bool) -> tuple[list[dict[str, Any]], str | None]:
    if isinstance(todos, str):
        try:
            todos = json.loads(todos)
        except ValueError:
            return (
                [],
                f"'todos' must be an array of {{id, content, status}} objects, got a string that is not JSON: {todos[:80]!r}",
            )
    if not isinstance(todos, list):
        return [], f"'todos' must be an array of {{id, content, status}} objects, got {type(todos).__name__}"
    clean: list[dict[str, Any]] = []
    seen: set[Any] = set()
    for i, item in enumerate(todos):
        if not isinstance(item, dict):
            return [], f"todos[{i}] must be an object with id, content, status; got {type(item).__name__} {item!r:.80}"
        raw_id = item.get("id")
        if (
            raw_id is None
            or isinstance(raw_id, bool)
            or not isinstance(raw_id, (str, int))
            or str(raw_id).strip() == ""
        ):
            return [], f"todos[{i}].id is required (a non-empty string), got {raw_id!r}"
        todo_id = str(raw_id).strip()
        if todo_id in seen:
            return [], f"todos[{i}].id {todo_id!r} appears more than once; ids must be unique"
        seen.add(todo_id)
        out: dict[str, Any] = {"id": todo_id}
        if "content" in item or not merge:
            content = item.get("content")
            if not isinstance(content, str) or not content.strip():
                return [], f"todos[{i}].content is required (a non-empty string), got {content!r:.80}"
            out["content"] = content.strip()
        if "status" in item or not merge:
            status = item.get("status", "pending")
            if status not in STATUSES:
                return [], f"todos[{i}].status must be one of {', '.join(STATUSES)}; got {status!r}"
            out["status"] = status
        clean.append(out)
    return clean, None


def todo_tool(todos: list[dict[str, Any]] | None = None, merge: bool = False, store: TodoStore | None = None) -> str:
    """Read (todos=None), replace (merge=False) or merge by id (merge=True).

    Always returns JSON ``{todos, summary}`` or ``{error}``."""
    if store is None:
        return json.dumps(
            {"error": "todo needs a TodoStore: it is handled by the agent loop, which owns one per rollout"}
        )
    if todos is not None:
        clean, error = _validate(todos, bool(merge))
        if error:
            return json.dumps({"error": error})
        if merge:
            store.merge(clean)
        else:
            store.replace(clean)
    return json.dumps({"todos": store.read(), "summary": store.summary()})


TODO_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "todos": {
            "type": "array",
            "description": "Items to write. Omit to read the current list.",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string", "description": "Stable id of the item"},
                    "content": {"type": "string", "description": "What to do"},
                    "status": {"type": "string", "enum": list(STATUSES)},
                },
                "required": ["id"],
            },
        },
        "merge": {
            "type": "boolean",
            "description": "true: update the given items by id and keep the rest; false (default): replace the whole list",
        },
    },
    "required": [],
    "additionalProperties": False,
}


def _loop_only(args: dict[str, Any], task_id: str | None, **_: Any) -> dict[str, Any]:
    return {"error": "todo must be handled by the agent loop"}


register(
    "todo",
    "todo",
    "Manage your task list for this task. Call with no arguments to read it; pass 'todos' to replace it, "
    "or with merge=true to update items by id. Statuses: pending, in_progress, completed, cancelled.",
    TODO_PARAMETERS,
    _loop_only,
)
