"""The coherence simulation (`tests/faults/test_simulation.py`) against the private Redis Cluster
of `tests/support/cluster.py`: the same seeded interleavings and faults, with the cluster's
sharded key layout, scripts routed by slot, and batches split per node. Also the sharded
layout on the single node, where the seeds run faster.

    LGD_SIM_CLUSTER_SEEDS  seeds per write mode on each (default 40)
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support.cluster import TestCluster
from tests.support.servers import REDIS_URL
from tests.support.sim.scheduler import Env
from tests.support.sim.seeds import explain, run_seed, sim_env

SEEDS = int(os.environ.get("LGD_SIM_CLUSTER_SEEDS", "40"))


@pytest.fixture(scope="module", params=["cluster", "sharded"])
def env(request: pytest.FixtureRequest, namespace: tuple[str, str]) -> Iterator[Env]:
    """The simulation's tiers on the test cluster (16 shards over three primaries), or on
    the single node with 4 journal shards."""
    schema, prefix = namespace
    if request.param == "cluster":
        cluster: TestCluster = request.getfixturevalue("redis_cluster")
        with sim_env(cluster.url, schema, f"{prefix}-c", cluster=True) as shared:
            yield shared
    else:
        with sim_env(REDIS_URL, schema, f"{prefix}-s", journal_shards=4) as shared:
            yield shared


@pytest.mark.parametrize("mode", ["through", "behind"])
def test_invariants_hold_with_a_sharded_journal(env: Env, mode: str) -> None:
    """I1-I5 hold across seeded interleavings with faults when the threads' keys and
    journals are spread over shards (and, on the cluster, over nodes)."""
    assert env.layout.sharded
    for seed in range(SEEDS):
        sim, violations = run_seed(env, seed, mode)
        assert not violations, explain(seed, mode, sim, violations)
