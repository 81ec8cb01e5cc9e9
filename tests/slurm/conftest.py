"""A real single-node Slurm cluster for the session (skipped, with the reason, when it cannot run)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.slurm.slurm_cluster import ClusterUnavailable, SlurmCluster

# The hosts' drain deadline is then 23 s, and 7 s are left for the exit
# (deploy/slurm/hermes-hosts.sbatch). Teardown waits this long only for a job that hangs.
KILL_WAIT_S = 30


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    cluster = SlurmCluster(kill_wait_s=KILL_WAIT_S)
    try:
        cluster.start()
    except ClusterUnavailable as exc:
        pytest.skip(f"no single-node Slurm cluster here: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()
