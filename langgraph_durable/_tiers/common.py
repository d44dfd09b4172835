"""What both drivers share: script sources, client options, error translation, and the
signature of the callback that answers requests that are not storage requests."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import psycopg_pool
import redis.exceptions
from psycopg.rows import dict_row
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from langgraph_durable._core import lua
from langgraph_durable.config import SaverConfig, seconds
from langgraph_durable.errors import SchemaVersionError, TierUnavailableError

# Answers a request that is not `Hot`, `Cold` or `Pause` (a tool effect); its return value
# (awaited by the asyncio driver) is sent back into the operation, its error thrown in.
Effects = Callable[[Any], Any]
AsyncEffects = Callable[[Any], Awaitable[Any]]

SCRIPTS = {
    "get": lua.GET_SCRIPT,
    "intent": lua.INTENT_SCRIPT,
    "put": lua.PUT_SCRIPT,
    "put_writes": lua.PUT_WRITES_SCRIPT,
    "warm": lua.WARM_SCRIPT,
    "drop_thread": lua.DROP_THREAD_SCRIPT,
    "put_behind": lua.PUT_BEHIND_SCRIPT,
    "put_writes_behind": lua.PUT_WRITES_BEHIND_SCRIPT,
    "flush_read": lua.FLUSH_READ_SCRIPT,
    "flush_ack": lua.FLUSH_ACK_SCRIPT,
    "journal_state": lua.JOURNAL_STATE_SCRIPT,
    "list_unflushed": lua.LIST_UNFLUSHED_SCRIPT,
    "marks": lua.MARKS_SCRIPT,
    "release": lua.RELEASE_SCRIPT,
}

# Server replies that mean "the hot tier cannot take this now", not "the request is wrong".
_UNAVAILABLE_REPLIES = ("OOM", "READONLY", "LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN")

HOT_ERRORS: tuple[type[Exception], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.ResponseError,
)
COLD_ERRORS: tuple[type[Exception], ...] = (psycopg.OperationalError, psycopg_pool.PoolTimeout)


def redis_options(config: SaverConfig) -> dict[str, Any]:
    """Options for a redis-py client: bounded pool that waits, retries with backoff."""
    return {
        "max_connections": config.redis_max_connections,
        "timeout": seconds(config.pool_timeout),
        "socket_connect_timeout": 1.0,
        "socket_timeout": 5.0,
        "retry": Retry(ExponentialBackoff(cap=0.25, base=0.01), retries=2),
        "retry_on_error": [redis.exceptions.ConnectionError, redis.exceptions.TimeoutError],
        "health_check_interval": 30,
    }


def postgres_options(config: SaverConfig) -> dict[str, Any]:
    """Options for a psycopg pool: autocommit connections, waiting callers."""
    return {
        "min_size": 1,
        "max_size": config.postgres_max_connections,
        "timeout": seconds(config.pool_timeout),
        "kwargs": {
            "connect_timeout": 5,
            "autocommit": True,
            "prepare_threshold": config.prepare_threshold,
            "row_factory": dict_row,
        },
    }


def hot_unavailable(exc: Exception) -> TierUnavailableError | None:
    """The public error for a Redis failure, or ``None`` if it is a bug to re-raise."""
    if isinstance(exc, redis.exceptions.ResponseError) and str(exc).startswith("BACKLOG"):
        error = TierUnavailableError(
            f"Postgres (cold tier) is not taking writes and {str(exc)[8:]}; "
            "writes resume once it is back", tier="cold")
        error.__cause__ = exc
        return error
    if isinstance(exc, redis.exceptions.ResponseError) and not str(exc).startswith(
        _UNAVAILABLE_REPLIES
    ):
        return None
    error = TierUnavailableError(f"Redis (hot tier) is unavailable: {exc}", tier="hot")
    error.__cause__ = exc
    return error


def cold_unavailable(exc: Exception) -> TierUnavailableError:
    """The public error for a Postgres failure."""
    error = TierUnavailableError(f"Postgres (cold tier) is unavailable: {exc}", tier="cold")
    error.__cause__ = exc
    return error


def not_set_up(exc: Exception) -> SchemaVersionError:
    """The public error for a table that does not exist yet."""
    return SchemaVersionError(
        f"the saver's tables are missing ({exc}): call saver.setup() once, or run "
        "`langgraph-durable migrate`"
    )
