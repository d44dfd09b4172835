"""Redis Cluster: how the drivers tell a cluster from a single node, build its clients,
and check that every process of a prefix uses one key layout.

A cluster client (redis-py's ``RedisCluster``) routes each script call to the primary that
owns the slot of its keys (all keys of one call share a hash tag, see `_core.keys`),
follows ``MOVED``/``ASK`` replies and refreshes the topology after a failover.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio.cluster
import redis.cluster
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from langgraph_durable._core.keys import Layout
from langgraph_durable._tiers.common import DRIVER
from langgraph_durable.config import SaverConfig
from langgraph_durable.errors import ConfigurationError


def is_cluster(info: dict[str, Any]) -> bool:
    """Whether ``INFO cluster``'s reply comes from a node of a Redis Cluster."""
    return str(info.get("cluster_enabled", 0)) == "1"


def _options(config: SaverConfig) -> dict[str, Any]:
    """Options of a cluster client: per-node pools of ``redis_max_connections``, the
    single node's timeouts, and retries that outlast a failover's election (a few seconds
    with ``cluster-node-timeout`` 2 s; longer ones trip the hot tier's breaker)."""
    return {
        "max_connections": config.redis_max_connections,
        "socket_connect_timeout": 1.0,
        "socket_timeout": 5.0,
        "retry": Retry(ExponentialBackoff(cap=0.5, base=0.05), retries=6),
        **DRIVER,
    }


def cluster_client(config: SaverConfig) -> redis.cluster.RedisCluster:
    """A blocking cluster client from ``redis_url`` (any node of the cluster)."""
    return redis.cluster.RedisCluster.from_url(config.redis_url, **_options(config))


def async_cluster_client(config: SaverConfig) -> redis.asyncio.cluster.RedisCluster:
    """An asyncio cluster client from ``redis_url`` (any node of the cluster)."""
    return redis.asyncio.cluster.RedisCluster.from_url(config.redis_url, **_options(config))


def check_layout(layout: Layout, recorded: Any) -> None:
    """Compare the layout a prefix recorded (``<prefix>:layout``) with this saver's.

    Raises:
        ConfigurationError: another process uses the prefix with another shard count: the
            two would keep a thread's keys in different places.
    """
    if recorded is None or bytes(recorded).decode() == layout.describe():
        return
    raise ConfigurationError(
        f"key prefix {layout.prefix!r} is in use with journal {bytes(recorded).decode()} and "
        f"this saver has {layout.describe()}: every process of a prefix needs the same "
        f"journal_shards (and Redis Cluster setting). To change it, stop every process, "
        f"drain the journal (`langgraph-durable flush`) and delete the key "
        f"{layout.layout_key()!r}"
    )
