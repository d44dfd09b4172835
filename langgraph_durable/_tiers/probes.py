"""What the operator's tools (the CLI) ask the servers directly: connectivity, versions,
settings, and a key prefix's threads in Redis.

The saver's own operations go through its drivers; these probes open a short-lived
client of their own (short timeouts, no retries) so that a wrong URL is reported at once,
with the driver's own reason in one line, instead of after a connection pool's timeout.
Key names come from `_core.keys`, as everywhere else.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
import redis
import redis.exceptions
from redis.backoff import NoBackoff
from redis.retry import Retry

from langgraph_durable._core.keys import Layout
from langgraph_durable._tiers.clients import client_for_url
from langgraph_durable._tiers.cluster import is_cluster
from langgraph_durable._tiers.common import refused_for_good
from langgraph_durable.config import SaverConfig, mask_url, seconds
from langgraph_durable.errors import ConfigurationError, TierUnavailableError

_HOT_HINT = "check --redis-url or LGD_REDIS_URL"
_COLD_HINT = "check --postgres-url or LGD_POSTGRES_URL"


def one_line(exc: BaseException) -> str:
    """A driver error's message on one line (psycopg's span several and add hints)."""
    parts = [p.strip() for p in str(exc).splitlines() if p.strip()]
    parts = [p for p in parts if not p.startswith(("Is the server running", "HINT:"))]
    text = "; ".join(parts)
    text = re.sub(r"^connection failed: ", "", text)
    text = re.sub(r"\b(FATAL|ERROR):\s+", "", text)
    return text.rstrip(".") or type(exc).__name__


def probe_postgres(url: str, *, timeout: float = 3.0) -> str:
    """Connect once and return the server's version.

    Raises:
        ConfigurationError: the server refuses the connection for good (a wrong password,
            no such database or role).
        TierUnavailableError: the server cannot be reached.
        Either message is one line naming the URL, the reason and what to check.
    """
    try:
        with psycopg.connect(url, connect_timeout=max(1, round(timeout))) as conn:
            row = conn.execute("SELECT current_setting('server_version')").fetchone()
    except psycopg.Error as exc:
        if refused_for_good(exc):
            raise ConfigurationError(
                f"Postgres at {mask_url(url)} refused the connection: {one_line(exc)} "
                f"({_COLD_HINT})") from exc
        raise TierUnavailableError(
            f"cannot connect to Postgres at {mask_url(url)}: {one_line(exc)} ({_COLD_HINT})",
            tier="cold",
        ) from exc
    return str(row[0]) if row else "unknown"


# The Redis URLs that did not answer during this command, with the error that said so:
# its later steps fail at once instead of waiting as long again (`forget_unanswered`).
_UNANSWERED: dict[str, TierUnavailableError] = {}


def forget_unanswered() -> None:
    """Start a command afresh: ask every Redis again."""
    _UNANSWERED.clear()


def unanswered(url: str) -> TierUnavailableError | None:
    """The error of the Redis at ``url`` if it did not answer during this command."""
    return _UNANSWERED.get(url)


def _hot_error(url: str, exc: redis.exceptions.RedisError) -> TierUnavailableError:
    error = TierUnavailableError(
        f"cannot connect to Redis at {mask_url(url)}: {one_line(exc)} ({_HOT_HINT})",
        tier="hot")
    if isinstance(exc, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)):
        _UNANSWERED[url] = error
    return error


def _redis_client(url: str, *, timeout: float = 2.0) -> Any:
    """A client for probes (short timeouts, no retries): a cluster client when ``url``
    names a node of a Redis Cluster (its SCANs and pipelines then reach every primary),
    else a plain one; a Sentinel URL's reaches the current primary.

    Raises:
        redis.exceptions.ConnectionError: that Redis did not answer earlier in this command.
    """
    if (known := unanswered(url)) is not None:
        raise redis.exceptions.ConnectionError(str(known))
    plain: redis.Redis = client_for_url(url, redis, socket_connect_timeout=timeout,
                                        socket_timeout=timeout, retry=Retry(NoBackoff(), 0))
    try:
        cluster = is_cluster(plain.info("cluster"))
    except redis.exceptions.RedisError as exc:
        _hot_error(url, exc)
        return plain  # the caller's first command reports what is wrong
    if not cluster:
        return plain
    plain.close()
    return redis.RedisCluster.from_url(
        url, socket_connect_timeout=timeout, socket_timeout=timeout)


def _recorded_layout(client: Any, prefix: str) -> Layout | None:
    """The key layout ``prefix`` recorded in Redis (`Layout.layout_key`, set by the first
    saver on it), or ``None`` if none did."""
    recorded = client.get(Layout(prefix).layout_key())
    if recorded is None:
        return None
    return Layout.from_description(prefix, recorded,
                                   cluster=isinstance(client, redis.RedisCluster))


def _hot_layout(client: Any, prefix: str, journal_shards: int | None) -> Layout:
    """The key layout of ``prefix`` as seen through ``client`` (see `_redis_client`): with
    ``journal_shards`` when set, else with the shards the prefix recorded, so a command
    reads a prefix written with any ``journal_shards`` without being told."""
    recorded = None if journal_shards is not None else _recorded_layout(client, prefix)
    return recorded or Layout(prefix, shards=journal_shards,
                              cluster=isinstance(client, redis.RedisCluster))


def recorded_shards(config: SaverConfig) -> int | None:
    """The journal shards of a command's saver: ``journal_shards`` when set, else those
    ``key_prefix`` recorded (`_hot_layout`); ``None`` (the default) when neither is known or
    Redis does not answer (the saver reports that)."""
    if config.journal_shards is not None:
        return config.journal_shards
    try:
        client = _redis_client(config.redis_url, timeout=seconds(config.tier_timeout))
    except redis.exceptions.RedisError:
        return None
    try:
        recorded = _recorded_layout(client, config.key_prefix)
    except redis.exceptions.RedisError as exc:
        _hot_error(config.redis_url, exc)
        return None
    finally:
        client.close()
    return None if recorded is None else recorded.shards


@dataclass(frozen=True, slots=True)
class RedisFacts:
    """What `probe_redis` found out about a Redis or Valkey server.

    Attributes:
        server: ``"Redis 7.2.4"`` or ``"Valkey 9.1.2"``.
        mode: ``"standalone"``, ``"cluster"`` or ``"sentinel"``.
        appendonly: whether the append-only file is on (``None``: could not tell).
        appendfsync: the AOF fsync policy, when readable.
        save: the RDB snapshot schedule (``""``: none), when readable.
        maxmemory_policy: the eviction policy, when readable.
    """

    server: str
    mode: str
    appendonly: bool | None
    appendfsync: str | None
    save: str | None
    maxmemory_policy: str | None


def probe_redis(url: str, *, timeout: float = 2.0) -> RedisFacts:
    """Ping the hot tier and read its version and persistence settings.

    ``CONFIG GET`` is often disabled on managed servers; then ``INFO persistence`` tells
    whether the AOF is on and the other settings are reported as unknown.

    Raises:
        TierUnavailableError: the server cannot be reached; one line naming URL and reason.
    """
    if (known := unanswered(url)) is not None:  # silent earlier in this command
        raise known
    client = _redis_client(url, timeout=timeout)
    if (known := unanswered(url)) is not None:  # silent just now: not asked again
        client.close()
        raise known
    try:
        client.ping()
        info: dict[str, Any] = client.info("server")
        persistence: dict[str, Any] = client.info("persistence")
        config = _config_get(client, "appendonly", "appendfsync", "save", "maxmemory-policy")
        if isinstance(client, redis.RedisCluster):  # (`_redis_client` found a cluster)
            config.update(_cluster_config(client))
    except redis.exceptions.RedisError as exc:
        raise _hot_error(url, exc) from exc
    finally:
        client.close()
    if "valkey_version" in info:
        server = f"Valkey {info['valkey_version']}"
    else:
        server = f"Redis {info.get('redis_version', 'unknown')}"
    appendonly = config.get("appendonly")
    return RedisFacts(
        server=server,
        mode=str(info.get("redis_mode", "standalone")),
        appendonly=(appendonly == "yes") if appendonly is not None
        else bool(persistence.get("aof_enabled")) if "aof_enabled" in persistence else None,
        appendfsync=config.get("appendfsync"),
        save=config.get("save"),
        maxmemory_policy=config.get("maxmemory-policy"),
    )


def _cluster_config(client: Any) -> dict[str, str]:
    """The persistence settings that hold on every primary of a cluster (``client``, a
    `redis.RedisCluster`, whose API is untyped): the append-only file only if every primary
    has it on, the eviction policy if all agree."""
    seen: dict[str, set[str]] = {}
    try:
        for node in client.get_primaries():
            for key, value in _config_get(client.get_redis_connection(node),
                                          "appendonly", "maxmemory-policy").items():
                seen.setdefault(key, set()).add(value)
    except redis.exceptions.RedisError:
        return {}
    out = {"appendonly": "no" if seen.get("appendonly", {"no"}) != {"yes"} else "yes"}
    policies = seen.get("maxmemory-policy", set())
    if len(policies) == 1:
        out["maxmemory-policy"] = policies.pop()
    return out


def _config_get(client: redis.Redis, *names: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for name in names:
        try:
            reply = client.config_get(name)
        except redis.exceptions.ResponseError:  # CONFIG disabled or renamed
            continue
        for key, value in reply.items():
            key_text = key.decode() if isinstance(key, bytes) else str(key)
            values[key_text] = value.decode() if isinstance(value, bytes) else str(value)
    return values


# ------------------------------------------------------------------------ hot tier keys


@dataclass(slots=True)
class HotThread:
    """One thread's keys in the hot tier.

    Attributes:
        thread_id: the thread.
        keys: how many keys its registry lists.
        unflushed: write-behind: checkpoints with entries not yet in Postgres.
        checkpoints: checkpoint ids per namespace found in its indexes.
    """

    thread_id: str
    keys: int = 0
    unflushed: int = 0
    checkpoints: dict[str, list[str]] = field(default_factory=dict)

    def checkpoint_keys(self) -> list[tuple[str, str, str]]:
        """``(thread_id, checkpoint_ns, checkpoint_id)`` of every hot checkpoint."""
        return [(self.thread_id, ns, cid) for ns, ids in self.checkpoints.items() for cid in ids]


class HotView:
    """Read-only look at a key prefix's threads in Redis (``SCAN``, never ``KEYS``; on a
    cluster, every primary); `hot_view` makes one."""

    def __init__(self, client: Any, layout: Layout) -> None:
        self.client = client
        self.layout = layout

    def thread_ids(self, *, limit: int = 100_000) -> list[str]:
        """Every thread with a registry key under the prefix (at most ``limit``)."""
        found: list[str] = []
        for key in self.client.scan_iter(match=self.layout.registry_pattern(), count=1000):
            thread_id = self.layout.registry_thread(key)
            if thread_id is None:  # not one of our keys after all
                continue
            found.append(thread_id)
            if len(found) >= limit:
                break
        return found

    def threads(self, thread_ids: Iterable[str]) -> dict[str, HotThread]:
        """The hot keys of the given threads (absent threads are left out)."""
        ids = list(thread_ids)
        pipe = self.client.pipeline(transaction=False)
        keyed = [self.layout.thread(t) for t in ids]
        for keys in keyed:
            pipe.smembers(keys.registry)
            pipe.hlen(keys.unflushed)
        replies = pipe.execute()
        result: dict[str, HotThread] = {}
        index_keys: list[tuple[str, str, str]] = []
        for thread_id, keys, members, unflushed in zip(
                ids, keyed, replies[0::2], replies[1::2], strict=True):
            if not members and not unflushed:
                continue
            result[thread_id] = HotThread(thread_id, keys=len(members), unflushed=int(unflushed))
            for member in members:
                name = member.decode() if isinstance(member, bytes) else str(member)
                namespace = keys.index_namespace(name)
                if namespace is not None:
                    index_keys.append((thread_id, namespace, name))
        for _, _, name in index_keys:
            pipe.zrange(name, 0, -1)
        for (thread_id, namespace, _), ids_in_index in zip(index_keys, pipe.execute(),
                                                           strict=True):
            if ids_in_index:
                result[thread_id].checkpoints[namespace] = [
                    i.decode() if isinstance(i, bytes) else str(i) for i in ids_in_index
                ]
        return result

    def journal_present(self) -> bool:
        """Whether the prefix has a write-behind journal (behind mode ran on it)."""
        layout = self.layout
        return bool(self.client.exists(*(layout.journal(k) for k in range(layout.shards))))


@contextmanager
def hot_view(config: SaverConfig) -> Iterator[HotView]:
    """A view of ``config.key_prefix`` in Redis (its key layout as `_hot_layout` finds
    it), on a client of its own that is closed on exit.

    Raises:
        redis.exceptions.RedisError: Redis did not answer.
    """
    client = _redis_client(config.redis_url, timeout=seconds(config.tier_timeout))
    try:
        yield HotView(client, _hot_layout(client, config.key_prefix, config.journal_shards))
    finally:
        client.close()
