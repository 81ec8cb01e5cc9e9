"""TerminalBench-style task items: loading, archive unpacking, reward parsing.

An item has ``task_name``, ``instruction``, ``docker_image``, ``environment_tar`` (base64
tar.gz unpacked into the task's cwd), ``tests_tar`` (base64 tar.gz of the tests dir),
``test_sh`` (the verifier script) and ``category``. No atroposlib import here.
"""

from __future__ import annotations

import base64
import binascii
import io
import tarfile
from pathlib import Path
from typing import Any

FIXTURE_PATH = Path(__file__).with_name("fixture_tasks.jsonl")
REQUIRED_FIELDS = ("task_name", "instruction", "test_sh")


def load_items(name_or_path: str, split: str = "train") -> list[dict[str, Any]]:
    """Rows of a local JSONL file / dataset dir, or a Hub dataset by name (needs network)."""
    import datasets
    from datasets import load_dataset

    datasets.disable_progress_bars()  # keep stderr clean inside the console
    path = Path(name_or_path).expanduser()
    if path.is_file():
        dataset = load_dataset("json", data_files=str(path), split="train")
    elif path.is_dir():
        dataset = load_dataset(str(path), split=split)
    else:
        dataset = load_dataset(name_or_path, split=split)
    items = [dict(row) for row in dataset]
    for index, item in enumerate(items):
        missing = [f for f in REQUIRED_FIELDS if not item.get(f)]
        if missing:
            raise ValueError(f"{name_or_path}: row {index} lacks {missing}; every task needs {list(REQUIRED_FIELDS)}")
    return items


def split_names(value: str | None) -> list[str]:
    """A comma-separated config value (``task_filter``, ``skip_tasks``) as a list."""
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def unpack_b64_tar(data: str | None, dest: Path, what: str) -> bool:
    """Unpack a base64 tar(.gz) into ``dest``; False when there is none.

    The ``data`` filter refuses absolute paths, ``..``, links out of the tree and devices."""
    if not data:
        return False
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"{what}: not valid base64 ({exc}); expected a base64-encoded tar.gz") from None
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:*") as tar:
            tar.extractall(dest, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise ValueError(f"{what}: cannot unpack the archive ({type(exc).__name__}: {exc})") from None
    return True


def parse_reward(text: str | None, exit_code: int | None) -> float:
    """``reward.txt``: "1" / "0" / a float; anything else falls back to the exit code (0 -> 1.0)."""
    value = (text or "").strip()
    if value:
        try:
            return float(value)
        except ValueError:
            pass
    return 1.0 if exit_code == 0 else 0.0
