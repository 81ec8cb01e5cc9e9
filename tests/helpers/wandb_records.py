"""Reads an offline wandb run (``run-*.wandb``) back with wandb's own protobuf records.

Written apart from the code under test: the file format is wandb's (a LevelDB-style
log: a 7-byte ``:W&B`` header, then 32 KiB blocks of checksummed chunks), and each
record is decoded with ``wandb.proto.wandb_internal_pb2.Record``.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_HEADER = b":W&B\xe1\xbe\x00"
_BLOCK = 32768
_CHUNK_HEADER = 7
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def _chunks(data: bytes) -> Iterator[bytes]:
    if not data.startswith(_HEADER):
        raise ValueError(f"not a wandb transaction log: header {data[:7]!r}")
    pos, pending = len(_HEADER), b""
    while pos + _CHUNK_HEADER <= len(data):
        left_in_block = _BLOCK - pos % _BLOCK
        if left_in_block < _CHUNK_HEADER:  # block trailer padding
            pos += left_in_block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + _CHUNK_HEADER])
        body = data[pos + _CHUNK_HEADER : pos + _CHUNK_HEADER + length]
        pos += _CHUNK_HEADER + length
        if kind == 0 and length == 0:  # zero padding at a block's end
            continue
        if kind == _FULL:
            yield body
        elif kind == _FIRST:
            pending = body
        elif kind == _MIDDLE:
            pending += body
        elif kind == _LAST:
            yield pending + body
            pending = b""


@dataclass
class OfflineRun:
    directory: Path
    config: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)  # one dict per logged step
    run_name: str = ""
    project: str = ""
    group: str = ""
    exit_code: int | None = None

    def keys(self) -> set[str]:
        return {k for row in self.history for k in row}


def read_offline_run(run_dir: Path) -> OfflineRun:
    from wandb.proto import wandb_internal_pb2 as pb

    (log,) = sorted(Path(run_dir).glob("run-*.wandb"))
    run = OfflineRun(directory=Path(run_dir))
    for raw in _chunks(log.read_bytes()):
        record = pb.Record()
        record.ParseFromString(raw)
        which = record.WhichOneof("record_type")
        if which == "run":
            run.run_name = record.run.display_name
            run.project = record.run.project
            run.group = record.run.run_group
            for item in record.run.config.update:
                run.config[item.key] = json.loads(item.value_json)
        elif which == "config":
            for item in record.config.update:
                run.config[item.key] = json.loads(item.value_json)
        elif which == "history":
            row = {}
            for item in record.history.item:
                key = item.key or "/".join(item.nested_key)
                row[key] = json.loads(item.value_json)
            run.history.append(row)
        elif which == "exit":
            run.exit_code = record.exit.exit_code
    return run


def offline_runs(wandb_root: Path) -> list[Path]:
    """Every offline run directory under a ``WANDB_DIR`` (``<dir>/wandb/offline-run-*``)."""
    return sorted(Path(wandb_root).glob("**/offline-run-*"))
