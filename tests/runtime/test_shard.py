"""Sharding: hosts of one run take disjoint items. Oracle for the end-to-end test: the
unsharded item sequence of the same env, against what each sharded host received."""

from __future__ import annotations

import pytest

from hermes_console.runtime.errors import ConfigError
from hermes_console.runtime.shard import Shard, parse_shard, resolve_shard, shard_from_environ
from tests.runtime.runtime_helpers import make_spec

pytestmark = pytest.mark.timeout(180)


def test_parse_and_validate():
    assert parse_shard("1/4") == Shard(1, 4) and str(parse_shard(" 0 / 2 ")) == "0/2"
    for bad in ("4/4", "x", "1/0", "-1/2", "1-4"):
        with pytest.raises(ConfigError, match="expected"):
            parse_shard(bad)


@pytest.mark.parametrize(
    "env,expected",
    [
        # a Slurm array task: SLURM_PROCID stays 0 and must not win
        ({"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"}, "3/4"),
        ({"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "4"}, "1/4"),
        ({"SLURM_PROCID": "1", "SLURM_NTASKS": "2"}, "1/2"),
        ({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}, None),  # a plain sbatch job: no sharding
        ({"JOB_COMPLETION_INDEX": "5", "HERMES_SHARD_COUNT": "8"}, "5/8"),
        ({"RANK": "2", "WORLD_SIZE": "3"}, "2/3"),
        ({}, None),
    ],
)
def test_shard_from_the_schedulers_environment(env, expected):
    got = shard_from_environ(env)
    assert (str(got) if got else None) == expected


def test_explicit_shard_wins_and_bad_env_is_named():
    assert str(resolve_shard("1/2", {"RANK": "0", "WORLD_SIZE": "4"})) == "1/2"
    with pytest.raises(ConfigError, match="RANK='two'"):
        shard_from_environ({"RANK": "two", "WORLD_SIZE": "4"})


def _received(p) -> list:
    return [e.item_summary for e in p.of("item_received")]


def test_two_sharded_hosts_take_disjoint_items_that_cover_the_sequence(sim, tmp_path, live):
    whole = live(
        make_spec(sim, tmp_path / "all", "--env.total_steps", "6", "--env.group_size", "2", max_in_flight=1),
        exit_when_finished=True,
    )
    whole.until(lambda s: s.status == "finished", 120, "unsharded run")
    sequence = _received(whole)
    assert len(sequence) == 6
    received = []
    for i in range(2):  # one at a time: hosts in one process share the event bus
        p = live(
            make_spec(
                sim,
                tmp_path / f"h{i}",
                "--env.total_steps",
                "3",
                "--env.group_size",
                "2",
                max_in_flight=1,
                shard=f"{i}/2",
            ),
            exit_when_finished=True,
        )
        p.until(lambda s: s.status == "finished", 120, "sharded run")
        p.stop(1.0)
        assert p.state.run.shard == f"{i}/2 (--shard)"
        received.append(_received(p))
    first, second = received
    assert first == sequence[0::2] and second == sequence[1::2]  # disjoint, and together the whole
