"""The task file: one JSON object per line, validated with a clear message per problem.

Fields: ``task_id``, ``split`` (train|eval), ``prompt``, ``setup`` (shell
commands run in the rollout's sandbox before the agent starts), ``check``
(how the result is verified) and ``solution`` (shell commands that solve the
task; read by the simulator's scripted policy, never shown to the model).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

DEFAULT_TASKS_PATH = Path(__file__).with_name("tasks.jsonl")
CheckType = Literal["file_equals", "file_contains", "command_exit_zero", "command_output_equals"]
_REQUIRED = ("task_id", "split", "prompt", "setup", "check")


class TaskCheck(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: CheckType
    path: str | None = None
    command: str | None = None
    expected: str | None = None

    @model_validator(mode="after")
    def _fields_for_type(self) -> TaskCheck:
        if self.type in ("file_equals", "file_contains"):
            if not self.path:
                raise ValueError(f"check.type {self.type!r} needs check.path (the file to verify)")
            if self.expected is None:
                raise ValueError(f"check.type {self.type!r} needs check.expected (the text to compare)")
        else:
            if not self.command:
                raise ValueError(f"check.type {self.type!r} needs check.command (the shell command to run)")
            if self.type == "command_output_equals" and self.expected is None:
                raise ValueError("check.type 'command_output_equals' needs check.expected (the output to compare)")
        return self


class TerminalTask(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task_id: str
    split: Literal["train", "eval"]
    prompt: str
    setup: list[str]
    check: TaskCheck
    solution: list[str] = []


def _validate_lines(path: Path) -> None:
    """Line-level checks datasets would report poorly (bad JSON, missing fields)."""
    seen: set[str] = set()
    for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"{path}:{line_no}: not valid JSON ({exc.msg}); expected one JSON object per line"
            ) from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{line_no}: expected a JSON object, got {type(row).__name__}")
        for name in _REQUIRED:
            if name not in row:
                raise ValueError(f"{path}:{line_no}: missing field {name!r}; every task needs {list(_REQUIRED)}")
        try:
            task = TerminalTask(**row)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "row"
            raise ValueError(f"{path}:{line_no}: field {where!r}: {first['msg']}") from None
        if task.task_id in seen:
            raise ValueError(f"{path}:{line_no}: duplicate task_id {task.task_id!r}")
        seen.add(task.task_id)


def load_tasks(path: str | Path = DEFAULT_TASKS_PATH, split: str | None = None) -> list[TerminalTask]:
    """Tasks from ``path`` (a local JSONL read through ``datasets``), optionally one split."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"terminal tasks file not found: {path} (expected a JSONL file of tasks)")
    if split is not None and split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    _validate_lines(path)
    import datasets
    from datasets import load_dataset

    datasets.disable_progress_bars()  # keep stderr clean inside the console
    dataset = load_dataset("json", data_files=str(path), split="train")
    if split is not None:
        dataset = dataset.filter(lambda row: row["split"] == split)
    tasks = []
    for index, row in enumerate(dataset):
        check = {k: v for k, v in dict(row["check"]).items() if v is not None}
        try:
            tasks.append(TerminalTask(**{**row, "check": check, "solution": row.get("solution") or []}))
        except ValidationError as exc:  # pragma: no cover - _validate_lines catches these first
            raise ValueError(f"{path}: row {index}: {exc.errors()[0]['msg']}") from None
    if not tasks:
        raise ValueError(f"{path}: no tasks{f' in split {split!r}' if split else ''}")
    return tasks
