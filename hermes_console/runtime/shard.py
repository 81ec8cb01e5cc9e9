"""Which share of the items this host takes, when several hosts run one env.

Every host walks the env's item sequence (``get_next_item``) and keeps item ``k`` when
``k % count == index``. Hosts of one run therefore take disjoint items as long as the
env yields the same sequence on each host (the same dataset and seed — true for
``terminal_tasks`` and any env that does not draw from an unseeded RNG).

The shard comes from ``--shard i/n`` when given, else from the scheduler's
environment, checked in this order:

- Slurm job array: ``SLURM_ARRAY_TASK_ID`` (minus ``SLURM_ARRAY_TASK_MIN``) of
  ``SLURM_ARRAY_TASK_COUNT`` — array tasks see ``SLURM_PROCID=0``, so the array wins;
- Slurm ``srun`` steps: ``SLURM_PROCID`` of ``SLURM_NTASKS``;
- Kubernetes indexed Job: ``JOB_COMPLETION_INDEX`` of ``HERMES_SHARD_COUNT`` (Kubernetes
  does not export the completion count; set it from the Job's ``completions``);
- torchrun-style ``RANK`` of ``WORLD_SIZE``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from hermes_console.runtime.errors import ConfigError

_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


@dataclass(frozen=True)
class Shard:
    index: int
    count: int
    source: str = "--shard"

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def takes(self, k: int) -> bool:
        """Is the k-th item of the env's sequence (0-based) this host's?"""
        return k % self.count == self.index


def parse_shard(text: str, source: str = "--shard") -> Shard:
    match = _SHARD.match(str(text))
    if match is None:
        raise ConfigError(f"{source} {text!r}: expected INDEX/COUNT, e.g. 0/4 (this host's index, 0-based, of 4)")
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1 or index >= count:
        raise ConfigError(f"{source} {text!r}: expected 0 <= INDEX < COUNT and COUNT >= 1")
    return Shard(index, count, source)


def _int(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name)
    if value is None or value.strip() == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"environment variable {name}={value!r}: expected an integer") from None


def shard_from_environ(env: Mapping[str, str] | None = None) -> Shard | None:
    """The scheduler's idea of this host's shard, or None when nothing says so (module doc)."""
    env = os.environ if env is None else env
    pairs = (
        ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT"),
        ("SLURM_PROCID", "SLURM_NTASKS"),
        ("JOB_COMPLETION_INDEX", "HERMES_SHARD_COUNT"),
        ("RANK", "WORLD_SIZE"),
    )
    for index_name, count_name in pairs:
        index, count = _int(env, index_name), _int(env, count_name)
        if index is None or count is None:
            continue
        if index_name == "SLURM_ARRAY_TASK_ID":
            index -= _int(env, "SLURM_ARRAY_TASK_MIN") or 0  # --array=1-4 numbers tasks from 1
        if count <= 1:
            continue  # one task: no sharding (e.g. SLURM_NTASKS=1 in every plain sbatch job)
        return parse_shard(f"{index}/{count}", f"{index_name}/{count_name}")
    return None


def resolve_shard(explicit: str | None, env: Mapping[str, str] | None = None) -> Shard | None:
    """``--shard`` wins; else the environment; None means "every item is this host's"."""
    if explicit:
        shard = parse_shard(explicit)
        return shard if shard.count > 1 else None
    return shard_from_environ(env)
