"""Configuration: one frozen dataclass with defaults in code and validation at construction."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, fields
from datetime import timedelta
from typing import Literal
from urllib.parse import unquote, urlsplit, urlunsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from langgraph_durable.errors import ConfigurationError

WriteMode = Literal["through", "behind"]
FlushPolicy = Literal["all", "latest"]

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"

_PREFIX_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_SCHEMA_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


_SECRET_PARAMS = frozenset({"password", "sslpassword"})
_MASK = "***"


def mask_url(url: str) -> str:
    """``url`` as it may be shown: every password replaced by ``***``.

    Masks the password of a URL's user info (``redis://user:secret@host``,
    ``postgresql://user:secret@host/db``), ``password=`` / ``sslpassword=`` in its query
    (``?password=secret``) and in libpq key/value conninfo (``host=h password=secret``).
    A string that parses as neither is not shown at all.
    """
    if "://" in url:
        masked = _mask_uri(url)
        if url.startswith(("postgresql://", "postgres://")):
            return _mask_conninfo(url, masked)
        return masked
    return _mask_conninfo(url, url)


def _mask_uri(url: str) -> str:
    """``url`` with the password of its user info and its secret query values masked."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(a URL that does not parse)"
    netloc = parts.netloc
    userinfo, at, hosts = netloc.rpartition("@")
    if at and ":" in userinfo:
        netloc = f"{userinfo.partition(':')[0]}:{_MASK}@{hosts}"
    query = "&".join(
        f"{key}={_MASK}" if unquote(key).lower() in _SECRET_PARAMS else f"{key}{eq}{value}"
        for key, eq, value in (pair.partition("=") for pair in parts.query.split("&"))
    )
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def _mask_conninfo(conninfo: str, shown: str) -> str:
    """``shown`` (``conninfo`` or its masked URI form) if it reveals none of the libpq
    secrets ``conninfo`` holds, else ``conninfo`` as key/value pairs with them masked."""
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return shown if "://" in conninfo else "(a connection string that does not parse)"
    secrets = [str(v) for k, v in params.items() if k in _SECRET_PARAMS and v]
    if not any(secret in unquote(shown) or secret in shown for secret in secrets):
        return shown
    return make_conninfo(
        "", **{k: _MASK if k in _SECRET_PARAMS else v for k, v in params.items()}
    )


def seconds(value: float | timedelta) -> float:
    """Return a duration given as seconds or a `timedelta` in seconds."""
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class SaverConfig:
    """Every setting of a `DurableSaver`.

    Attributes:
        redis_url: URL of the hot tier (Redis >= 6.2 or Valkey, no modules needed).
        postgres_url: libpq URL of the cold tier, the system of record.
        write_mode: ``"through"``: a write returns once Postgres committed it.
            ``"behind"``: a write returns once Redis holds it and its flush journal entry;
            a flusher moves it to Postgres.
        key_prefix: every Redis key starts with it; letters, digits, ``_.-`` only.
        schema: Postgres schema of every table (created by ``setup()``).
        hot_ttl: idle time after which a thread's hot keys expire (refreshed on access;
            never before the thread is flushed). ``0`` keeps them until deleted.
        hot_checkpoints: how many recent checkpoints of each thread and namespace Redis keeps
            (trimmed in batches once it holds twice as many; never one not yet flushed).
            Older ones are read from Postgres. ``0`` keeps every checkpoint until ``hot_ttl``.
        write_deadline: how long a write-through writer may take between announcing a
            write to Redis and finishing it; past it, readers treat the writer as dead.
        redis_max_connections: size of the Redis connection pool (callers wait, not fail).
        postgres_max_connections: size of the Postgres connection pool (callers wait).
        pool_timeout: how long a caller waits for a pooled connection before an error.
        breaker_cooldown: how long the hot tier is bypassed after it failed, before a probe.
        stale_poll_interval: how often this process looks for threads another process
            wrote while it could not reach Redis (their hot copies are dropped). It bounds
            how long such a write can stay unseen by readers of Redis.
        flush_interval: write-behind: the longest an acknowledged write waits for a flush.
        flush_batch: write-behind: the most journal entries one flush transaction carries.
        flush_batch_bytes: write-behind: the most payload bytes one flush batch carries
            (its first entry is taken whatever its size), so a backlog of large checkpoints
            drains in reads that finish well within the socket timeout.
        flush_policy: write-behind: ``"all"`` flushes every checkpoint; ``"latest"`` only the
            newest checkpoint of each thread and namespace in a batch (and the writes it needs).
        reclaim_after: write-behind: how long a batch another flusher took may sit
            unacknowledged before this one takes it over (that flusher is presumed dead).
        background_flush: write-behind: run a flusher thread inside this saver. Turn it
            off when standalone ``langgraph-durable flush --follow`` workers do all flushing.
        max_unflushed: write-behind: the most journal entries Redis may hold while Postgres
            is unreachable before writes raise `TierUnavailableError`.
        max_unflushed_bytes: write-behind: the same bound in payload bytes; once the
            journal holds more, writes raise `TierUnavailableError` (``tier="cold"``).
        prepare_threshold: psycopg's prepared-statement threshold (``None`` for poolers
            such as PgBouncer in transaction mode).
    """

    redis_url: str = DEFAULT_REDIS_URL
    postgres_url: str = DEFAULT_POSTGRES_URL
    write_mode: WriteMode = "through"
    key_prefix: str = "lgd"
    schema: str = "public"
    hot_ttl: float | timedelta = timedelta(days=1)
    hot_checkpoints: int = 20
    write_deadline: float | timedelta = 30.0
    redis_max_connections: int = 64
    postgres_max_connections: int = 10
    pool_timeout: float | timedelta = 30.0
    breaker_cooldown: float | timedelta = 1.0
    stale_poll_interval: float | timedelta = 1.0
    flush_interval: float | timedelta = 0.25
    flush_batch: int = 256
    flush_batch_bytes: int = 32 * 1024 * 1024
    flush_policy: FlushPolicy = "all"
    reclaim_after: float | timedelta = 10.0
    background_flush: bool = True
    max_unflushed: int = 100_000
    max_unflushed_bytes: int = 2 * 1024 * 1024 * 1024
    prepare_threshold: int | None = 5

    def __post_init__(self) -> None:
        if self.write_mode not in ("through", "behind"):
            raise ConfigurationError(
                f"write_mode must be 'through' or 'behind', not {self.write_mode!r}"
            )
        if self.flush_policy not in ("all", "latest"):
            raise ConfigurationError(
                f"flush_policy must be 'all' or 'latest', not {self.flush_policy!r}"
            )
        if not _PREFIX_RE.match(self.key_prefix):
            raise ConfigurationError(
                f"key_prefix must be 1-64 characters of letters, digits, '_', '.', '-'; "
                f"got {self.key_prefix!r}"
            )
        if not _SCHEMA_RE.match(self.schema):
            raise ConfigurationError(
                f"schema must be a plain SQL identifier (letters, digits, '_'); got {self.schema!r}"
            )
        if not self.redis_url.startswith(("redis://", "rediss://", "unix://", "valkey://")):
            raise ConfigurationError(
                f"redis_url must be a redis:// URL, got {mask_url(self.redis_url)!r}"
            )
        if not self.postgres_url.startswith(("postgresql://", "postgres://")) and "=" not in (
            self.postgres_url
        ):
            raise ConfigurationError(
                f"postgres_url must be a postgresql:// URL or libpq conninfo, "
                f"got {mask_url(self.postgres_url)!r}"
            )
        for name in (
            "hot_ttl",
            "write_deadline",
            "pool_timeout",
            "breaker_cooldown",
            "stale_poll_interval",
            "reclaim_after",
        ):
            if seconds(getattr(self, name)) < 0:
                raise ConfigurationError(f"{name} must not be negative")
        if seconds(self.flush_interval) <= 0:
            raise ConfigurationError("flush_interval must be positive")
        for name in (
            "redis_max_connections",
            "postgres_max_connections",
            "flush_batch",
            "flush_batch_bytes",
            "max_unflushed_bytes",
        ):
            if getattr(self, name) < 1:
                raise ConfigurationError(f"{name} must be at least 1")
        if self.hot_checkpoints < 0:
            raise ConfigurationError("hot_checkpoints must not be negative")
        if self.max_unflushed < 1:
            raise ConfigurationError("max_unflushed must be at least 1")

    def __repr__(self) -> str:
        shown = {f.name: getattr(self, f.name) for f in fields(self)}
        shown.update(redis_url=mask_url(self.redis_url), postgres_url=mask_url(self.postgres_url))
        return f"SaverConfig({', '.join(f'{name}={value!r}' for name, value in shown.items())})"

    @classmethod
    def from_env(cls, **overrides: object) -> SaverConfig:
        """Build a config from ``LGD_REDIS_URL`` / ``LGD_POSTGRES_URL`` plus overrides."""
        values: dict[str, object] = {}
        if url := os.environ.get("LGD_REDIS_URL"):
            values["redis_url"] = url
        if url := os.environ.get("LGD_POSTGRES_URL"):
            values["postgres_url"] = url
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]
