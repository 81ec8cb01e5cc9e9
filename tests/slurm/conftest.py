"""A real single-node Slurm cluster for the session (skipped, with the reason, when it cannot run)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.slurm.slurm_cluster import ClusterUnavailable, SlurmCluster

# The hosts' drain deadline is then 23 s, and 7 s are left for the exit
# (deploy/slurm/hermes-hosts.sbatch). Teardown waits this long only for a job that hangs.
KILL_WAIT_S = 30


# Module scope: one module uses it, so it still starts once (on the one xdist worker running the
# "slurm" group, tests/conftest.py); its daemons are this process's children and must be gone
# before that worker's later tests check that no child process is left behind.
@pytest.fixture(scope="module")
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
