"""Redis Cluster: how the drivers tell a cluster from a single node, build its clients,
and check that every process of a prefix uses one key layout.

A cluster client (redis-py's ``RedisCluster``) routes each script call to the primary that
owns the slot of its keys (all keys of one call share a hash tag, see `_core.keys`),
follows ``MOVED``/``ASK`` replies and refreshes the topology after a failover.
"""

from __future__ import annotations

import asyncio
import threading
from types import ModuleType
from typing import Any

import redis
import redis.asyncio.cluster
import redis.cluster
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from langgraph_durable._core.keys import Layout
from langgraph_durable._tiers.common import DRIVER, redis_retry
from langgraph_durable.config import SaverConfig, mask_url, seconds
from langgraph_durable.errors import ConfigurationError


def is_cluster(info: dict[str, Any]) -> bool:
    """Whether ``INFO cluster``'s reply comes from a node of a Redis Cluster."""
    return str(info.get("cluster_enabled", 0)) == "1"


def cluster_mode(config: SaverConfig, info: dict[str, Any] | None, *, passed_in: bool) -> bool:
    """Whether the saver talks to a Redis Cluster, from ``redis_cluster`` and the node's
    ``INFO cluster`` reply (``None``: the server refused ``INFO``).

    Raises:
        ConfigurationError: the setting contradicts the server, the server cannot tell and
            nothing is set, or a cluster is used with what only a single node supports (a
            client passed in, ``redis_replica_acks``).
    """
    found = None if info is None else is_cluster(info)
    cluster = config.redis_cluster if config.redis_cluster is not None else found
    where = mask_url(config.redis_url)
    if cluster is None:
        raise ConfigurationError(
            f"Redis at {where} refused INFO, so the saver cannot tell whether it is a node of "
            "a Redis Cluster: set redis_cluster=True or redis_cluster=False")
    if found is not None and found != cluster:
        raise ConfigurationError(
            f"redis_cluster={cluster} but Redis at {where} is "
            f"{'a node of a Redis Cluster' if found else 'not a node of a Redis Cluster'} "
            f"(INFO cluster: cluster_enabled:{int(found)}): leave redis_cluster unset to detect it")
    if cluster and config.redis_replica_acks:
        raise ConfigurationError(
            "redis_replica_acks is not supported on a Redis Cluster (WAIT would ask the "
            "replicas of one node for another node's writes): leave it at 0")
    if cluster and passed_in:
        raise ConfigurationError(
            "a Redis client was passed in, but Redis is a cluster: the saver routes a "
            "cluster's calls with cluster clients it builds from redis_url; pass redis_url "
            "(with redis_credential_provider if the credentials rotate) instead")
    return cluster


def _options(config: SaverConfig, lib: ModuleType = redis) -> dict[str, Any]:
    """Options of a cluster client: per-node pools of ``redis_max_connections``, the
    single node's timeouts and credentials (TLS comes with a ``rediss://`` URL), and
    retries that outlast a failover's election (a few seconds with ``cluster-node-timeout``
    2 s; longer ones trip the hot tier's breaker)."""
    options: dict[str, Any] = {
        "max_connections": config.redis_max_connections,
        "socket_connect_timeout": min(1.0, seconds(config.tier_timeout)),
        "socket_timeout": seconds(config.tier_timeout),
        "retry": redis_retry(lib, ExponentialBackoff(cap=0.5, base=0.05), retries=6),
        **DRIVER,
    }
    if config.redis_credential_provider is not None:
        options["credential_provider"] = config.redis_credential_provider
    return options


def cluster_client(config: SaverConfig) -> redis.cluster.RedisCluster:
    """A blocking cluster client from ``redis_url`` (any node of the cluster)."""
    return redis.cluster.RedisCluster.from_url(config.redis_url, **_options(config))


def async_cluster_client(config: SaverConfig) -> redis.asyncio.cluster.RedisCluster:
    """An asyncio cluster client from ``redis_url`` (any node of the cluster)."""
    return redis.asyncio.cluster.RedisCluster.from_url(config.redis_url,
                                                       **_options(config, redis.asyncio))


_BUSY = ("no Redis Cluster connection was free within {} s (redis_max_connections calls "
         "in flight; raise it or pool_timeout)")


class Slots:
    """The ``redis_max_connections`` cluster calls allowed in flight at once: redis-py's
    per-node cluster pools refuse a connection past their bound rather than wait for
    one, so callers wait here (up to ``pool_timeout``), as they do for a single node's pool."""

    def __init__(self, config: SaverConfig) -> None:
        self._free = threading.BoundedSemaphore(config.redis_max_connections)
        self._wait = seconds(config.pool_timeout)

    def acquire(self) -> None:
        """Wait for a free call.

        Raises:
            redis.exceptions.ConnectionError: none was free within ``pool_timeout``.
        """
        if not self._free.acquire(timeout=self._wait):
            raise RedisConnectionError(_BUSY.format(self._wait))

    def release(self) -> None:
        self._free.release()


class AsyncSlots:
    """`Slots` for the calls of one event loop."""

    def __init__(self, config: SaverConfig) -> None:
        self._free = asyncio.BoundedSemaphore(config.redis_max_connections)
        self._wait = seconds(config.pool_timeout)

    async def acquire(self) -> None:
        """Wait for a free call.

        Raises:
            redis.exceptions.ConnectionError: none was free within ``pool_timeout``.
        """
        try:
            await asyncio.wait_for(self._free.acquire(), self._wait)
        except TimeoutError:
            raise RedisConnectionError(_BUSY.format(self._wait)) from None

    def release(self) -> None:
        self._free.release()


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
