"""The unsent-group spool is appended in whole lines: one write per spooled group set, so a
reader (an operator's ``tail``, a re-send script, a test) never meets half a line."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from hermes_console.runtime import trainer as trainer_mod


def test_a_spooled_group_longer_than_a_file_buffer_is_written_in_one_piece(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    link = SimpleNamespace(spool_path=tmp_path / "run" / "unsent.jsonl")
    writes: list[bytes] = []
    real_write = os.write

    def recorded(fd: int, data: bytes) -> int:
        writes.append(bytes(data))
        return real_write(fd, data)

    monkeypatch.setattr(trainer_mod.os, "write", recorded)
    groups = [{"tokens": [list(range(3_000))], "scores": [1.0]}, {"tokens": [[1, 2]], "scores": [0.0]}]
    trainer_mod.TrainerLink._spool(link, "g7", groups, "not_sent", "trainer API unreachable")  # type: ignore[arg-type]
    trainer_mod.TrainerLink._spool(link, "g8", groups[1:], "unknown", "cut by the kill")  # type: ignore[arg-type]
    # A buffered file wrote the 15 KB line in 8 KB pieces (a reader in between saw half of it).
    assert len(writes) == 2 and all(w.endswith(b"\n") for w in writes)
    assert len(writes[0]) > 8_192
    lines = link.spool_path.read_text().split("\n")
    assert lines[-1] == ""
    records = [json.loads(line) for line in lines[:-1]]
    assert [(r["group_id"], r["outcome"]) for r in records] == [
        ("g7", "not_sent"),
        ("g7", "not_sent"),
        ("g8", "unknown"),
    ]
    assert records[0]["group"] == groups[0]
