"""Configuration: one frozen dataclass with defaults in code and validation at construction."""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, fields
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from langgraph_durable.errors import ConfigurationError

if TYPE_CHECKING:
    from redis.credentials import CredentialProvider

WriteMode = Literal["through", "behind"]
FlushPolicy = Literal["all", "latest"]

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"

_PREFIX_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_SCHEMA_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


_SECRET_PARAMS = frozenset({"password", "sslpassword", "sentinel_password"})
_MASK = "***"


def mask_url(url: str) -> str:
    """``url`` as it may be shown: every password replaced by ``***``.

    Masks the password of a URL's user info (``redis://user:secret@host``,
    ``redis+sentinel://:secret@h1,h2/service``, ``postgresql://user:secret@host/db``),
    ``password=`` / ``sslpassword=`` / ``sentinel_password=`` in its query
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


SENTINEL_SCHEMES = ("redis+sentinel://", "rediss+sentinel://")


@dataclass(frozen=True, slots=True)
class SentinelUrl:
    """A parsed ``redis+sentinel://`` URL.

    Attributes:
        hosts: the sentinels' addresses.
        service: the monitored primary's name.
        db: the database number on the primary.
        username: user on the primary (and replicas).
        password: password on the primary (and replicas).
        sentinel_account: ``username``/``password`` for the sentinels themselves
            (``?sentinel_username=``, ``?sentinel_password=``).
        tls: ``rediss+sentinel``: TLS to the sentinels and the primary.
        extra: any other query setting, passed to the primary's connections as text.
    """

    hosts: list[tuple[str, int]]
    service: str
    db: int
    username: str | None
    password: str | None
    sentinel_account: dict[str, str]
    tls: bool
    extra: dict[str, str]


def parse_sentinel(url: str) -> SentinelUrl:
    """Parse ``redis+sentinel://[user:password@]host[:port][,host[:port]]/service[/db]``.

    Raises:
        ConfigurationError: no sentinel address or no service name.
    """
    parts = urlsplit(url)
    userinfo, _, hostlist = parts.netloc.rpartition("@")
    user, colon, password = userinfo.partition(":")
    hosts = []
    for item in filter(None, hostlist.split(",")):
        host, _, port = item.rpartition(":") if item.rpartition(":")[2].isdigit() else (
            item, "", "26379")
        hosts.append((host.strip("[]"), int(port)))
    path = [unquote(p) for p in parts.path.split("/") if p]
    if not hosts or not path or len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
        raise ConfigurationError(
            f"a Sentinel URL reads redis+sentinel://host:26379[,host:26379]/service[/db], "
            f"got {mask_url(url)!r}")
    query = dict(parse_qsl(parts.query))
    account = {key.removeprefix("sentinel_"): query.pop(key)
               for key in ("sentinel_username", "sentinel_password") if key in query}
    return SentinelUrl(hosts=hosts, service=path[0], db=int(path[1]) if len(path) == 2 else 0,
                       username=unquote(user) or None,
                       password=unquote(password) if colon else None,
                       sentinel_account=account, tls=url.startswith("rediss+"), extra=query)


def seconds(value: float | timedelta) -> float:
    """Return a duration given as seconds or a `timedelta` in seconds."""
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class Retention:
    """What a sweep deletes from both tiers (``DurableSaver(retention=...)``).

    Every policy keeps each namespace's latest checkpoint with what its `DeltaChannel`
    values need (the ancestors back to each channel's stored snapshot) and its pending
    writes (an unresolved interrupt among them). Unset policies delete nothing.

    Attributes:
        max_idle: delete whole threads (both tiers, and their tool ledger records unless
            ``keep_ledger``) not written for this long. ``None``: never.
        max_age: delete checkpoints older than this, keeping what is said above.
            ``None``: never.
        keep_last: keep the newest N checkpoints of each namespace (and what they need),
            delete the older ones. ``None``: keep all.
        keep_interrupted: ``max_idle`` spares a thread waiting at an ``interrupt()`` (its
            latest checkpoint holds an interrupt) so a human can still answer it. ``False``
            expires those too.
        keep_ledger: ``max_idle`` leaves the tool ledger records of deleted threads.
        interval: how often the flush worker (``langgraph-durable flush --follow``) sweeps.
        batch: threads examined per step; each step is a few short transactions.
    """

    max_idle: float | timedelta | None = None
    max_age: float | timedelta | None = None
    keep_last: int | None = None
    keep_interrupted: bool = True
    keep_ledger: bool = False
    interval: float | timedelta = 300.0
    batch: int = 100

    def __post_init__(self) -> None:
        for name in ("max_idle", "max_age"):
            value = getattr(self, name)
            if value is not None and (
                not isinstance(value, (int, float, timedelta)) or seconds(value) <= 0
            ):
                raise ConfigurationError(f"Retention.{name} must be a positive duration or None")
        if self.keep_last is not None and (
            not isinstance(self.keep_last, int) or self.keep_last < 1
        ):
            raise ConfigurationError("Retention.keep_last must be at least 1 (or None)")
        if seconds(self.interval) <= 0:
            raise ConfigurationError("Retention.interval must be positive")
        if not isinstance(self.batch, int) or not 1 <= self.batch <= 10_000:
            raise ConfigurationError("Retention.batch must be between 1 and 10000")

    @property
    def active(self) -> bool:
        """Whether any policy is set (a sweep without one deletes nothing)."""
        return self.max_idle is not None or self.max_age is not None or self.keep_last is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class SaverConfig:
    """Every setting of a `DurableSaver`.

    Attributes:
        redis_url: URL of the hot tier (Redis >= 6.2 or Valkey, no modules needed):
            ``redis://``, ``rediss://`` (TLS; ``?ssl_cert_reqs=``, ``?ssl_ca_certs=``),
            ``unix://``, or ``redis+sentinel://host:26379[,host:26379]/service[/db]``
            (``rediss+sentinel://`` for TLS).
        postgres_url: libpq URL of the cold tier, the system of record (``?sslmode=``,
            ``?sslrootcert=`` and the other libpq settings pass through).
        redis_credential_provider: a redis-py ``CredentialProvider`` asked for the user
            and password of every new Redis connection (rotating tokens: ElastiCache IAM,
            Entra ID); the URL then carries no password. Never shown by ``repr``.
        postgres_credentials: called for every new Postgres connection; the libpq
            settings it returns (``{"password": token}``) override the URL's. Never shown.
        redis_replica_acks: with replicas (Sentinel), how many must hold each write
            intent and write-behind journal entry before the write goes on (Redis
            ``WAIT``), so a failover to one of them loses none of it; fewer within
            ``redis_replica_timeout`` count as an unavailable hot tier. ``0``: no waiting.
        redis_replica_timeout: how long a write waits for ``redis_replica_acks``
            (under ``tier_timeout``).
        write_mode: ``"through"``: a write returns once Postgres committed it.
            ``"behind"``: a write returns once Redis holds it and its flush journal entry;
            a flusher moves it to Postgres.
        key_prefix: every Redis key starts with it; letters, digits, ``_.-`` only.
        redis_cluster: whether ``redis_url`` names a node of a Redis Cluster (the client
            then routes each call to the node owning its keys' slot and follows the
            cluster's topology). ``None`` (default): asked of the server when the clients
            open (``INFO cluster``). Set it when the server may be down at start.
        journal_shards: how many journals write-behind spreads the threads over (each
            thread's keys live beside its shard's journal, in one cluster slot). ``None``:
            1 on a single node (one journal, ``<prefix>:journal``), 16 on a cluster. Every
            process of a prefix must use the same number (checked when clients open).
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
        pool_timeout: how long a caller waits for a pooled connection while every one is
            lent out, before an error. A pool that cannot make a connection within
            ``tier_timeout`` (Postgres does not answer) fails the caller then.
        tier_timeout: the longest one request waits on a tier that does not answer (a
            frozen, overloaded or unreachable Redis or Postgres) before the tier counts as
            unavailable: Redis's socket timeout, Postgres's connect timeout (libpq counts
            whole seconds, at least 2) and the wait for a Postgres connection the pool
            cannot make. A timed-out request is not sent again; the hot tier's breaker
            opens for the whole saver and is probed in the background. So ``setup()``,
            each call and each command finish, or fail with `TierUnavailableError`, within
            about this much more than their work. A legitimately slow reply (a very large
            checkpoint on a slow link) must come within it too.
        breaker_cooldown: how long the hot tier is bypassed after it failed, before a probe.
            The failure that opens it and the probe that closes it are logged at WARNING
            (logger ``langgraph_durable``), with the URL, password hidden.
        redis_required: ``setup()`` raises `TierUnavailableError` (``tier="hot"``) when
            Redis does not answer, instead of starting on Postgres alone (write-through)
            until it does. `from_env` reads it from ``LGD_REDIS_REQUIRED`` (``1``/``true``).
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
        secret: key of the HMAC-SHA256 every stored frame and journal entry carries, bound
            to the frame's place (thread, namespace, checkpoint, channel, version or task);
            at least 16 bytes (``str`` is UTF-8 encoded). Default ``$LGD_SECRET``. Without
            it (and without ``encryption``) Redis is trusted: frames carry a checksum that
            catches damage, not forgery. Never shown by ``repr``.
        encryption: key id -> AES key (16, 24 or 32 bytes): frames and journal entries are
            encrypted with AES-GCM, their place as associated data. Old keys stay listed to
            decrypt; ``encryption_key_id`` names the one that encrypts. Default parsed from
            ``$LGD_ENCRYPTION_KEYS`` (``id=base64key,id=base64key``). Never shown by ``repr``.
        encryption_key_id: the key new frames are encrypted with; default
            ``$LGD_ENCRYPTION_KEY_ID``, or the only key when there is one.
        allowed_types: classes (or ``(module, name)`` pairs) the default serializer may
            rebuild besides LangGraph's safe set (messages, ``Send``, ``Interrupt``,
            datetime, uuid, decimal, ...): the application's pydantic models, dataclasses
            and enums kept in state. A stored value naming any other type is refused.
        retention: what sweeps delete (`Retention`); ``None`` sweeps nothing.
        compress_above: values whose serialized form is larger than this many bytes are
            stored zstd-compressed (inside the sealed frame, in both tiers); ``0`` never
            compresses.
        max_checkpoint_bytes: the most serialized bytes one ``put`` may store (its new
            channel values and the checkpoint itself); a larger one raises
            `SerializationError` naming its largest channel, before anything is stored.
    """

    redis_url: str = DEFAULT_REDIS_URL
    postgres_url: str = DEFAULT_POSTGRES_URL
    write_mode: WriteMode = "through"
    key_prefix: str = "lgd"
    redis_cluster: bool | None = None
    journal_shards: int | None = None
    schema: str = "public"
    hot_ttl: float | timedelta = timedelta(days=1)
    hot_checkpoints: int = 20
    write_deadline: float | timedelta = 30.0
    redis_max_connections: int = 64
    postgres_max_connections: int = 10
    pool_timeout: float | timedelta = 30.0
    tier_timeout: float | timedelta = 3.0
    breaker_cooldown: float | timedelta = 1.0
    redis_required: bool = False
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
    secret: bytes | str | None = field(default=None, repr=False)
    encryption: Mapping[str, bytes] | None = field(default=None, repr=False)
    encryption_key_id: str | None = None
    allowed_types: Collection[type | tuple[str, ...]] = ()
    retention: Retention | None = None
    compress_above: int = 4096
    max_checkpoint_bytes: int = 64 * 1024 * 1024
    redis_replica_acks: int = 0
    redis_replica_timeout: float | timedelta = 0.5
    redis_credential_provider: CredentialProvider | None = field(
        default=None, repr=False, compare=False)
    postgres_credentials: Callable[[], Mapping[str, Any]] | None = field(
        default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._check_keys()
        self._check_connection_options()
        self._check_modes_and_names()
        self._check_urls()
        self._check_limits()

    def _check_connection_options(self) -> None:
        if self.redis_credential_provider is not None and not callable(
                getattr(self.redis_credential_provider, "get_credentials", None)):
            raise ConfigurationError(
                "redis_credential_provider must be a redis.credentials.CredentialProvider")
        if self.redis_url.startswith(SENTINEL_SCHEMES):
            parse_sentinel(self.redis_url)  # raises with the URL's form
        if not isinstance(self.redis_replica_acks, int) or self.redis_replica_acks < 0:
            raise ConfigurationError("redis_replica_acks must be 0 or more")
        if not 0 < seconds(self.tier_timeout) <= 600:
            raise ConfigurationError("tier_timeout must be more than 0 and at most 600 seconds")
        if not 0 < seconds(self.redis_replica_timeout) < seconds(self.tier_timeout):
            raise ConfigurationError(
                "redis_replica_timeout must be more than 0 and less than tier_timeout "
                f"({seconds(self.tier_timeout):g} s): a write waits for replicas within it")
        url = urlsplit(self.redis_url)
        if self.redis_credential_provider is not None and (
                url.password or "password" in dict(parse_qsl(url.query))):
            raise ConfigurationError(
                f"redis_url {mask_url(self.redis_url)} has a password and "
                "redis_credential_provider is set: give the credentials one way")
        if self.postgres_credentials is not None and not callable(self.postgres_credentials):
            raise ConfigurationError(
                "postgres_credentials must be a callable returning libpq settings")

    def _check_modes_and_names(self) -> None:
        if self.retention is not None and not isinstance(self.retention, Retention):
            raise ConfigurationError("retention must be a Retention(...) or None")
        if self.compress_above < 0:
            raise ConfigurationError("compress_above must not be negative (0: never compress)")
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

    def _check_urls(self) -> None:
        if not self.redis_url.startswith(("redis://", "rediss://", "unix://", "valkey://",
                                          "redis+sentinel://", "rediss+sentinel://")):
            raise ConfigurationError(
                f"redis_url must be a redis:// URL (or rediss://, unix://, redis+sentinel://), "
                f"got {mask_url(self.redis_url)!r}"
            )
        if not self.postgres_url.startswith(("postgresql://", "postgres://")) and "=" not in (
            self.postgres_url
        ):
            raise ConfigurationError(
                f"postgres_url must be a postgresql:// URL or libpq conninfo, "
                f"got {mask_url(self.postgres_url)!r}"
            )

    def _check_limits(self) -> None:
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
            "max_checkpoint_bytes",
        ):
            if getattr(self, name) < 1:
                raise ConfigurationError(f"{name} must be at least 1")
        if self.hot_checkpoints < 0:
            raise ConfigurationError("hot_checkpoints must not be negative")
        if self.max_unflushed < 1:
            raise ConfigurationError("max_unflushed must be at least 1")
        if self.journal_shards is not None and (
            isinstance(self.journal_shards, bool)
            or not isinstance(self.journal_shards, int)
            or not 1 <= self.journal_shards <= 256
        ):
            raise ConfigurationError("journal_shards must be between 1 and 256 (or None)")
        if self.redis_cluster not in (None, True, False):
            raise ConfigurationError("redis_cluster must be True, False or None (detect)")

    def _check_keys(self) -> None:
        if self.secret is not None:
            secret = self.secret.encode() if isinstance(self.secret, str) else self.secret
            if not isinstance(secret, bytes) or len(secret) < 16:
                raise ConfigurationError("secret must be at least 16 bytes (or characters)")
        if self.encryption is None:
            if self.encryption_key_id is not None:
                raise ConfigurationError("encryption_key_id is set but encryption is not")
            return
        if not self.encryption:
            raise ConfigurationError("encryption must map at least one key id to a key")
        for key_id, key in self.encryption.items():
            if not isinstance(key_id, str) or not 1 <= len(key_id.encode()) <= 255:
                raise ConfigurationError("encryption key ids must be 1-255 byte strings")
            if not isinstance(key, bytes) or len(key) not in (16, 24, 32):
                raise ConfigurationError(
                    f"encryption key {key_id!r} must be 16, 24 or 32 bytes (AES-128/192/256)"
                )
        current = self.encryption_key_id
        if current is None and len(self.encryption) > 1:
            raise ConfigurationError(
                "encryption has several keys: name the one that encrypts in encryption_key_id"
            )
        if current is not None and current not in self.encryption:
            raise ConfigurationError(f"encryption_key_id {current!r} is not a key of encryption")

    def __repr__(self) -> str:
        shown = {f.name: getattr(self, f.name) for f in fields(self) if f.repr}
        shown.update(redis_url=mask_url(self.redis_url), postgres_url=mask_url(self.postgres_url))
        return f"SaverConfig({', '.join(f'{name}={value!r}' for name, value in shown.items())})"

    @classmethod
    def from_env(cls, **overrides: object) -> SaverConfig:
        """Build a config from ``LGD_REDIS_URL`` / ``LGD_POSTGRES_URL``, the keys
        ``LGD_SECRET`` / ``LGD_ENCRYPTION_KEYS`` / ``LGD_ENCRYPTION_KEY_ID``,
        ``LGD_JOURNAL_SHARDS``, ``LGD_TIER_TIMEOUT`` and ``LGD_REDIS_REQUIRED``, plus
        overrides."""
        values: dict[str, object] = {}
        if url := os.environ.get("LGD_REDIS_URL"):
            values["redis_url"] = url
        if url := os.environ.get("LGD_POSTGRES_URL"):
            values["postgres_url"] = url
        if secret := os.environ.get("LGD_SECRET"):
            values["secret"] = secret
        if keys := os.environ.get("LGD_ENCRYPTION_KEYS"):
            values["encryption"] = _parse_keys(keys)
        if key_id := os.environ.get("LGD_ENCRYPTION_KEY_ID"):
            values["encryption_key_id"] = key_id
        if shards := os.environ.get("LGD_JOURNAL_SHARDS"):
            if not shards.strip().isdigit():
                raise ConfigurationError(f"LGD_JOURNAL_SHARDS must be a number, got {shards!r}")
            values["journal_shards"] = int(shards)
        if timeout := os.environ.get("LGD_TIER_TIMEOUT"):
            try:
                values["tier_timeout"] = float(timeout)
            except ValueError:
                raise ConfigurationError(
                    f"LGD_TIER_TIMEOUT must be a number of seconds, got {timeout!r}") from None
        if required := os.environ.get("LGD_REDIS_REQUIRED"):
            flag = required.strip().lower()
            if flag not in ("1", "true", "yes", "0", "false", "no"):
                raise ConfigurationError(
                    f"LGD_REDIS_REQUIRED must be 1/true/yes or 0/false/no, got {required!r}")
            values["redis_required"] = flag in ("1", "true", "yes")
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]


def _parse_keys(text: str) -> dict[str, bytes]:
    """``id=base64key,id=base64key`` as a key map (the key itself is never echoed)."""
    keys: dict[str, bytes] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key_id, sep, encoded = item.partition("=")
        try:
            if not sep:
                raise ValueError
            keys[key_id.strip()] = base64.b64decode(encoded.strip(), validate=True)
        except (ValueError, binascii.Error):
            raise ConfigurationError(
                "LGD_ENCRYPTION_KEYS must read id=base64key[,id=base64key...]"
            ) from None
    return keys
