"""Where every client of the saver is made: one description of each tier, built for the
blocking driver (redis-py, a psycopg pool) or for one event loop (redis.asyncio, `LoopPool`).

A Redis URL is either one redis-py reads itself (``redis://``, ``rediss://`` with its
``ssl_*`` query settings, ``unix://``) or a Sentinel URL,
``redis+sentinel://[user:password@]host:26379,host2:26379/service[/db]`` (``rediss+sentinel``
for TLS), whose client asks the sentinels for the service's primary and follows it after a
failover. A credential provider (``redis_credential_provider``) replaces the URL's password
for every new Redis connection; ``postgres_credentials`` is called for every new Postgres
connection and its keys (``password``, ``user``, ...) override the URL's.

Clients passed in (`Provided`) are used as they are and never closed by the saver.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any, Generic, TypeVar

import psycopg_pool
import redis
import redis.asyncio
import redis.asyncio.sentinel
import redis.sentinel
from redis.connection import URL_QUERY_ARGUMENT_PARSERS

from langgraph_durable._tiers.common import postgres_options, redis_options
from langgraph_durable._tiers.loop_pool import LoopPool
from langgraph_durable.config import SENTINEL_SCHEMES, SaverConfig, parse_sentinel
from langgraph_durable.errors import ConfigurationError

R = TypeVar("R")
P = TypeVar("P")

SyncRedis = redis.Redis
AsyncRedis = redis.asyncio.Redis


@dataclass(frozen=True, slots=True)
class Provided:
    """Clients the application passed in instead of URLs (each one optional).

    Attributes:
        redis: a `redis.Redis` for blocking callers.
        aredis: a `redis.asyncio.Redis` for async callers, on the event loop that first uses it.
        postgres: an open `psycopg_pool.ConnectionPool` for blocking callers.
        apostgres: an open `psycopg_pool.AsyncConnectionPool` for async callers, on its loop.
        redis_url: a Redis URL was given too: the flavour without a client is built from it.
        postgres_url: the same for Postgres.
        forked_from: the pid of the process that passed the clients in, once this process
            is a child made by ``fork()``: its Postgres pools (their sessions and threads)
            belong to that parent and are never used here.
    """

    redis: SyncRedis | None = None
    aredis: AsyncRedis | None = None
    postgres: psycopg_pool.ConnectionPool[Any] | None = None
    apostgres: psycopg_pool.AsyncConnectionPool[Any] | None = None
    redis_url: bool = True
    postgres_url: bool = True
    forked_from: int | None = None

    def __post_init__(self) -> None:
        for name, kind in (("redis", SyncRedis), ("aredis", AsyncRedis),
                           ("postgres", psycopg_pool.ConnectionPool),
                           ("apostgres", psycopg_pool.AsyncConnectionPool)):
            value = getattr(self, name)
            if value is not None and not isinstance(value, kind):
                raise ConfigurationError(
                    f"{name}_{'pool' if 'postgres' in name else 'client'} must be a "
                    f"{kind.__module__}.{kind.__qualname__}, not {type(value).__name__}")
        for name in ("redis", "aredis"):
            client = getattr(self, name)
            if client is not None and client.connection_pool.connection_kwargs.get(
                    "decode_responses"):
                raise ConfigurationError(
                    f"{name}_client decodes responses; the saver reads bytes: pass a client "
                    "made without decode_responses=True")

    @property
    def any(self) -> bool:
        """Whether any client was passed in."""
        return any(c is not None for c in (self.redis, self.aredis, self.postgres, self.apostgres))

    def forked(self) -> Provided:
        """The same clients, known to be inherited by a child made by ``fork()``: redis-py's
        pools notice the new pid and reconnect; psycopg's pools are the parent's."""
        if not self.any:
            return self
        return replace(self, forked_from=self.forked_from or os.getppid())


@dataclass(slots=True)
class Clients(Generic[R, P]):
    """One flavour's two clients, and which of them the saver made (and so closes)."""

    redis: R
    postgres: P
    owns_redis: bool
    owns_postgres: bool


def blocking(config: SaverConfig,
             provided: Provided) -> Clients[redis.Redis, psycopg_pool.ConnectionPool[Any]]:
    """The blocking driver's clients: the ones passed in, else built from the URLs.

    Raises:
        ConfigurationError: a client was passed in for the other flavour only, without a
            URL to build this one from, or the Postgres pool was passed in to the parent of
            this forked process.
    """
    _check(provided, "redis", provided.aredis is not None and not provided.redis_url)
    _check(provided, "postgres", provided.apostgres is not None and not provided.postgres_url)
    pool = provided.postgres
    _check_open(pool, "postgres_pool")
    if pool is None:
        pool = psycopg_pool.ConnectionPool(config.postgres_url, open=False,
                                           name="langgraph_durable", **_postgres(config))
    client = provided.redis if provided.redis is not None else redis_client(config, redis)
    return Clients(client, pool,
                   owns_redis=provided.redis is None, owns_postgres=provided.postgres is None)


def for_loop(config: SaverConfig, provided: Provided) -> Clients[
        redis.asyncio.Redis, LoopPool | psycopg_pool.AsyncConnectionPool[Any]]:
    """The running event loop's clients: the ones passed in, else built from the URLs.

    Raises:
        ConfigurationError: as `blocking`.
    """
    _check(provided, "aredis", provided.redis is not None and not provided.redis_url)
    _check(provided, "apostgres", provided.postgres is not None and not provided.postgres_url)
    pool: LoopPool | psycopg_pool.AsyncConnectionPool[Any] | None = provided.apostgres
    _check_open(provided.apostgres, "apostgres_pool")
    if pool is None:
        options = _postgres(config)  # its min_size is the blocking pool's alone
        pool = LoopPool(config.postgres_url, name="langgraph_durable",
                        max_size=options["max_size"], timeout=options["timeout"],
                        kwargs=options["kwargs"])
    aclient = (provided.aredis if provided.aredis is not None
               else redis_client(config, redis.asyncio))
    return Clients(aclient, pool,
                   owns_redis=provided.aredis is None, owns_postgres=provided.apostgres is None)


def _check_open(pool: psycopg_pool.ConnectionPool[Any] | psycopg_pool.AsyncConnectionPool[Any]
                | None, name: str) -> None:
    if pool is not None and pool.closed:
        raise ConfigurationError(
            f"{name} {pool.name!r} is not open: open it (pool.open() / await pool.open()) "
            "before the saver uses it; the saver never opens or closes a pool passed in")


def _check(provided: Provided, name: str, missing: bool) -> None:
    kind = "pool" if "postgres" in name else "client"
    if provided.forked_from is not None and getattr(provided, name) is not None and (
            "postgres" in name):
        raise ConfigurationError(
            f"this process was forked from pid {provided.forked_from}, whose {name}_{kind} it "
            "cannot use (its connections and threads are the parent's): create the saver in "
            "the child, with pools of its own")
    if missing:
        other = {"redis": "aredis", "aredis": "redis",
                 "postgres": "apostgres", "apostgres": "postgres"}[name]
        url = "redis_url" if "redis" in name else "postgres_url"
        flavour = "async" if name.startswith("a") else "blocking"
        raise ConfigurationError(
            f"{flavour} callers need {name}_{kind}: only {other}_{kind} was passed in; pass "
            f"{name}_{kind} too, or {url} to build it from")


def _postgres(config: SaverConfig) -> dict[str, Any]:
    """The pool options, with the connection settings computed for each new connection
    when ``postgres_credentials`` is set."""
    options = postgres_options(config)
    if config.postgres_credentials is not None:
        options["kwargs"] = with_credentials(options["kwargs"], config.postgres_credentials)
    return options


def with_credentials(kwargs: dict[str, Any], credentials: Callable[[], Mapping[str, Any]]
                     ) -> Callable[[], dict[str, Any]]:
    """Connection settings that ask ``credentials`` each time a connection is made."""
    def settings() -> dict[str, Any]:
        return {**kwargs, **credentials()}
    return settings


# ------------------------------------------------------------------------ Redis


def redis_client(config: SaverConfig, lib: ModuleType) -> Any:
    """A client of ``lib`` (``redis`` or ``redis.asyncio``) for the saver's Redis URL, with
    the saver's pool and retry options."""
    options = redis_options(config, lib)
    if config.redis_credential_provider is not None:
        options["credential_provider"] = config.redis_credential_provider
    return client_for_url(config.redis_url, lib, **options)


def client_for_url(url: str, lib: ModuleType, **options: Any) -> Any:
    """A client of ``lib`` for ``url`` (a plain or a Sentinel URL); ``options`` are
    connection settings plus the pool's ``max_connections`` and ``timeout``.

    Raises:
        ConfigurationError: a Sentinel URL without sentinels or service name.
    """
    sentinel = parse_sentinel(url) if url.startswith(SENTINEL_SCHEMES) else None
    if sentinel is None:
        pool = lib.BlockingConnectionPool.from_url(url, **options)
        return lib.Redis(connection_pool=pool)
    # the query's settings, read as redis-py reads a plain URL's (``?socket_timeout=2``)
    parsers: dict[str, Any] = dict(URL_QUERY_ARGUMENT_PARSERS)
    settings = {**options, **{key: parsers.get(key, str)(value)
                              for key, value in sentinel.extra.items()}}
    pool = {k: settings.pop(k) for k in ("timeout", "max_connections") if k in settings}
    account = {k: v for k, v in (("username", sentinel.username),
                                 ("password", sentinel.password)) if v is not None}
    tls = {"ssl": True, **{k: v for k, v in settings.items() if k.startswith("ssl_")}
           } if sentinel.tls else {}
    sentinels = lib.sentinel.Sentinel(
        sentinel.hosts,
        sentinel_kwargs={"socket_connect_timeout": settings.get("socket_connect_timeout"),
                         "socket_timeout": settings.get("socket_timeout"),
                         **sentinel.sentinel_account, **tls},
        **{**settings, **account, **tls})
    return sentinels.master_for(sentinel.service, redis_class=lib.Redis, db=sentinel.db,
                                connection_pool_class=_BLOCKING_SENTINEL[lib], **pool)


class _SentinelBlockingPool(redis.sentinel.SentinelConnectionPool, redis.BlockingConnectionPool):
    """redis-py's Sentinel pool (connections to the current primary) that, like the
    saver's other pools, makes a caller wait for a free connection at ``max_connections``."""


class _AsyncSentinelBlockingPool(redis.asyncio.sentinel.SentinelConnectionPool,
                                 redis.asyncio.BlockingConnectionPool):
    """Async twin of `_SentinelBlockingPool`."""


_BLOCKING_SENTINEL: dict[ModuleType, type] = {
    redis: _SentinelBlockingPool, redis.asyncio: _AsyncSentinelBlockingPool}
