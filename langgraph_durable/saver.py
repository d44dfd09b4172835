"""`DurableSaver`: a LangGraph checkpointer with a Redis hot tier over a Postgres system of record.

Every method exists in both flavours on the same object; each is one line that hands a
sans-I/O operation from `_core.ops` to the saver's engine (``saver.engine``), which runs it
with the blocking clients (shared by all threads) or the running event loop's (so
successive ``asyncio.run`` calls keep working).
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import random
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Collection, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from types import TracebackType
from typing import Any, TypeVar

import psycopg_pool
import redis
import redis.asyncio
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from langgraph_durable._core import hot, journal, migrate, ops
from langgraph_durable._core.context import SweepReport
from langgraph_durable._core.requests import Op
from langgraph_durable._core.sql import CORE_MIGRATIONS, Migration
from langgraph_durable._core.sql.ledger import LEDGER_MIGRATIONS
from langgraph_durable._core.sql.store import STORE_MIGRATIONS
from langgraph_durable._core.sql.sweep import RETENTION_MIGRATIONS
from langgraph_durable._core.strict import default_serde
from langgraph_durable._tiers.engine import Engine
from langgraph_durable.config import Retention, SaverConfig, WriteMode, seconds
from langgraph_durable.errors import (
    ConfigurationError,
    DurableError,
    FlushTimeoutError,
    TierUnavailableError,
)
from langgraph_durable.flusher import BackgroundFlusher
from langgraph_durable.ledger import Ledger

logger = logging.getLogger("langgraph_durable")
logger.addHandler(logging.NullHandler())  # quiet unless the application configures logging
T = TypeVar("T")

# Write-behind savers whose background flusher runs: flushed at interpreter exit.
_UNCLOSED: weakref.WeakSet[DurableSaver] = weakref.WeakSet()


@atexit.register
def _flush_unclosed() -> None:
    for saver in list(_UNCLOSED):
        saver._flush_at_exit()


class DurableSaver(BaseCheckpointSaver[str]):
    """Checkpointer with a Redis hot tier and a PostgreSQL cold tier.

    A drop-in replacement for `MemorySaver`: ``builder.compile(checkpointer=saver)``, then
    ``graph.invoke`` and ``await graph.ainvoke`` on the same object.

    Args:
        redis_url: hot tier URL; default ``$LGD_REDIS_URL`` or ``redis://127.0.0.1:6379/0``.
        postgres_url: cold tier URL; default ``$LGD_POSTGRES_URL`` or the local server.
        write_mode: ``"through"`` (a write returns once Postgres committed it) or
            ``"behind"`` (once Redis holds it; a flusher moves it to Postgres).
        key_prefix: prefix of every Redis key.
        schema: Postgres schema of every table.
        serde: serializer; default LangGraph's `JsonPlusSerializer` in strict mode: it
            rebuilds only LangGraph's safe types and ``allowed_types`` (see
            docs/trust-model.md).
        redis_client: a `redis.Redis` of the application's for blocking callers, used
            instead of one built from ``redis_url`` (never closed by the saver). Made
            without ``decode_responses``.
        aredis_client: a `redis.asyncio.Redis` for async callers, on the event loop that
            first uses it (never closed by the saver).
        postgres_pool: an open `psycopg_pool.ConnectionPool` for blocking callers (any row
            factory, autocommit or not; never opened or closed by the saver).
        apostgres_pool: an open `psycopg_pool.AsyncConnectionPool` for async callers, on
            its event loop (never opened or closed by the saver).
        **options: any other `SaverConfig` field (``hot_ttl``, pool sizes, flush settings,
            ``secret``, ``encryption``, ``allowed_types``, ``redis_credential_provider``,
            ``postgres_credentials``).

    Attributes:
        config: the saver's `SaverConfig`.
        engine: runs the saver's operations (its context, clients and lease heartbeats);
            the ledger, the flusher and the CLI use it too.

    A client passed in for one flavour only (``redis_client`` without ``aredis_client``)
    serves that flavour; the other is built from the tier's URL if one is given (argument
    or ``LGD_*`` variable), else using it raises `ConfigurationError`.

    Raises:
        ConfigurationError: an option is invalid.
    """

    def __init__(
        self,
        redis_url: str | None = None,
        postgres_url: str | None = None,
        *,
        write_mode: WriteMode = "through",
        key_prefix: str = "lgd",
        schema: str = "public",
        serde: SerializerProtocol | None = None,
        redis_client: redis.Redis | None = None,
        aredis_client: redis.asyncio.Redis | None = None,
        postgres_pool: psycopg_pool.ConnectionPool[Any] | None = None,
        apostgres_pool: psycopg_pool.AsyncConnectionPool[Any] | None = None,
        **options: Any,
    ) -> None:
        redis_url_given = redis_url is not None or "LGD_REDIS_URL" in os.environ
        postgres_url_given = postgres_url is not None or "LGD_POSTGRES_URL" in os.environ
        self.config = SaverConfig.from_env(
            redis_url=redis_url,
            postgres_url=postgres_url,
            write_mode=write_mode,
            key_prefix=key_prefix,
            schema=schema,
            **options,
        )
        super().__init__(serde=default_serde(serde, self.config))
        self.engine = Engine(self.config, self.serde, redis_client=redis_client,
                             aredis_client=aredis_client, postgres_pool=postgres_pool,
                             apostgres_pool=apostgres_pool, redis_url_given=redis_url_given,
                             postgres_url_given=postgres_url_given)
        self._ctx = self.engine.context
        self._lock = threading.Lock()
        self._flusher: BackgroundFlusher | None = None
        self._on_close: list[Callable[[], None]] = []
        self._behind = self.config.write_mode == "behind"
        self._background = self._behind and self.config.background_flush
        self._ledger: Ledger | None = None
        self.engine.after_fork(self._forked)

    @property
    def migrations(self) -> tuple[Migration, ...]:
        """Every schema migration `setup` applies."""
        return tuple(
            sorted(
                CORE_MIGRATIONS + LEDGER_MIGRATIONS + RETENTION_MIGRATIONS + STORE_MIGRATIONS,
                key=lambda m: m.version,
            )
        )

    @property
    def ledger(self) -> Ledger:
        """The tool-call ledger: records of every `durable_tool` call made with this saver."""
        if self._ledger is None:
            with self._lock:
                if self._ledger is None:
                    self._ledger = Ledger(self.engine)
        return self._ledger

    def _forked(self) -> None:
        """In a child after ``fork()``: the parent's flusher thread did not come along; the
        child's first write starts its own."""
        self._lock = threading.Lock()
        self._flusher = None

    # ------------------------------------------------------------------ writes

    def _write(self, op: Op[T]) -> T:
        """Run a write; in write-behind mode the first one starts the background flusher."""
        if self._background and self._flusher is None:
            self._start_flusher()
        return self.engine.run(op)

    async def _awrite(self, op: Op[T]) -> T:
        if self._background and self._flusher is None:
            self._start_flusher()
        return await self.engine.arun(op)

    # ------------------------------------------------------------------ lifecycle

    def setup(self) -> None:
        """Create the schema and tables (idempotent, safe from many processes at once) and
        open a connection to each tier.

        Raises:
            TierUnavailableError: Postgres cannot be reached, said within seconds with the
                (masked) URL and the reason (Redis may be down: the saver then serves from
                Postgres until it is back).
            ConfigurationError: the database does not exist or refused the credentials.
            SchemaVersionError: the schema was migrated by a newer release.
        """
        self.engine.check_cold()
        self.engine.run(migrate.setup(self.config.schema, self.migrations))
        self.engine.run(hot.connect(self._ctx))

    async def asetup(self) -> None:
        """Async twin of `setup`."""
        await self.engine.acheck_cold()
        await self.engine.arun(migrate.setup(self.config.schema, self.migrations))
        await self.engine.arun(hot.connect(self._ctx))

    def _start_flusher(self) -> None:
        with self._lock:
            if self._flusher is None:
                self._flusher = BackgroundFlusher(self.engine)
                self._flusher.start()
                _UNCLOSED.add(self)

    def _flush_at_exit(self) -> None:
        """A script that ends without `close`: move what it acknowledged to Postgres."""
        if self._flusher is None:
            return
        try:
            self.close()
        except Exception as exc:  # the interpreter is going away: say it, do not raise
            logger.warning("at exit: acknowledged writes left in Redis for a flusher: %s", exc)

    def flush(self, timeout: float | None = None) -> int:
        """Block until every write acknowledged before the call is in Postgres.

        A no-op in write-through mode. Returns how many journal entries this call moved.

        Raises:
            TierUnavailableError: Redis or Postgres cannot be reached.
            FlushTimeoutError: ``timeout`` seconds passed first (also a `TimeoutError`).
        """
        if not self._behind:
            return 0
        return self.engine.run(journal.flush(self._ctx, timeout))

    async def aflush(self, timeout: float | None = None) -> int:
        """Async twin of `flush`."""
        if not self._behind:
            return 0
        return await self.engine.arun(journal.flush(self._ctx, timeout))

    def health(self) -> dict[str, Any]:
        """Tier reachability, breaker state, flush backlog and lag, latency percentiles."""
        return self._health(self.engine.run(ops.health(self._ctx)))

    async def ahealth(self) -> dict[str, Any]:
        """Async twin of `health`."""
        return self._health(await self.engine.arun(ops.health(self._ctx)))

    def _health(self, report: dict[str, Any]) -> dict[str, Any]:
        report["flush"]["flusher_failures"] = self._flusher.failures if self._flusher else 0
        return report

    def close(self) -> None:
        """Stop the flusher after a final drain, then close the blocking clients."""
        flusher, self._flusher = self._flusher, None
        if flusher is not None:
            flusher.stop()
            try:
                self.flush(timeout=seconds(self.config.pool_timeout))
            except (TierUnavailableError, FlushTimeoutError) as exc:
                logger.warning(
                    "close: acknowledged writes left in Redis for a later flusher: %s", exc
                )
        if self.engine.has_blocking_clients:
            self._leave_journal()
        self.engine.close()
        with self._lock:
            callbacks, self._on_close = self._on_close, []
        for callback in reversed(callbacks):
            callback()

    def _leave_journal(self) -> None:
        """Take this saver's consumer out of the journal's group (when it holds nothing)."""
        try:
            self.engine.run(hot.try_hot(self._ctx, journal.leave_request(self._ctx)))
        except DurableError as exc:
            logger.debug("close: consumer left in the journal's group: %s", exc)

    async def aclose(self) -> None:
        """Close the current event loop's clients (and the blocking ones, after the
        flusher's final drain)."""
        if not self.engine.has_blocking_clients:
            try:
                await self.engine.arun(hot.try_hot(self._ctx, journal.leave_request(self._ctx)))
            except DurableError as exc:
                logger.debug("close: consumer left in the journal's group: %s", exc)
        await self.engine.aclose()
        if self.engine.has_blocking_clients or self._flusher is not None or self._on_close:
            await asyncio.to_thread(self.close)

    def on_close(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once, after `close` closed the clients (last registered, first
        called); e.g. to stop servers the saver was made for."""
        with self._lock:
            self._on_close.append(callback)

    def __enter__(self) -> DurableSaver:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> DurableSaver:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    @classmethod
    @contextmanager
    def from_conn_string(
        cls, redis_url: str, postgres_url: str, **options: Any
    ) -> Iterator[DurableSaver]:
        """A saver for the two URLs, set up, closed on exit (like `PostgresSaver`'s)."""
        saver = cls(redis_url, postgres_url, **options)
        try:
            saver.setup()
            yield saver
        finally:
            saver.close()

    @classmethod
    @asynccontextmanager
    async def afrom_conn_string(
        cls, redis_url: str, postgres_url: str, **options: Any
    ) -> AsyncIterator[DurableSaver]:
        """Async twin of `from_conn_string`."""
        saver = cls(redis_url, postgres_url, **options)
        try:
            await saver.asetup()
            yield saver
        finally:
            await saver.aclose()

    # ------------------------------------------------------------------ reads

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint named by ``config`` (or its thread's latest) with pending writes."""
        return self.engine.run(ops.get_tuple(self._ctx, config))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async twin of `get_tuple`."""
        return await self.engine.arun(ops.get_tuple(self._ctx, config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first; ``filter`` matches metadata, ``limit`` runs in SQL."""
        yield from self.engine.run(
            ops.list_checkpoints(self._ctx, config, filter=filter, before=before, limit=limit)
        )

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async twin of `list`."""
        for item in await self.engine.arun(
            ops.list_checkpoints(self._ctx, config, filter=filter, before=before, limit=limit)
        ):
            yield item

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Writes and seed of each channel along the parent chain, in a few round trips."""
        return self.engine.run(ops.delta_channel_history(self._ctx, config, channels))

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Async twin of `get_delta_channel_history`."""
        return await self.engine.arun(ops.delta_channel_history(self._ctx, config, channels))

    # ------------------------------------------------------------------ writes

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint and the channel versions it introduces."""
        return self._write(ops.put(self._ctx, config, checkpoint, metadata, new_versions))

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async twin of `put`."""
        return await self._awrite(ops.put(self._ctx, config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes (special channels replace, others first-write-wins)."""
        self._write(ops.put_writes(self._ctx, config, writes, task_id, task_path))

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Async twin of `put_writes`."""
        await self._awrite(ops.put_writes(self._ctx, config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str, *, keep_ledger: bool = False) -> None:
        """Delete a thread's checkpoints, blobs and writes from both tiers, and its tool
        ledger records unless ``keep_ledger``."""
        self.engine.run(ops.delete_threads(self._ctx, [thread_id], keep_ledger=keep_ledger))

    async def adelete_thread(self, thread_id: str, *, keep_ledger: bool = False) -> None:
        """Async twin of `delete_thread`."""
        await self.engine.arun(ops.delete_threads(self._ctx, [thread_id], keep_ledger=keep_ledger))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) that the given runs created."""
        self.engine.run(ops.delete_for_runs(self._ctx, run_ids))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async twin of `delete_for_runs`."""
        await self.engine.arun(ops.delete_for_runs(self._ctx, run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str, *,
                    up_to: str | None = None) -> None:
        """Copy a thread's whole history (every ancestor and its writes) to another id.

        Args:
            source_thread_id: the thread to copy.
            target_thread_id: the copy's id (a thread with no checkpoints, or they merge).
            up_to: a checkpoint id of the source: copy only the checkpoints stored up to it
                (in every namespace), without the writes of the tasks that ran from it, so
                that it is the copy's head and the copy runs on from there: a fork. The
                ledger is copied whole, so a tool call that already ran is not run again
                by the fork.

        Raises:
            ConfigurationError: source and target are the same thread.
            TierUnavailableError: Postgres is unreachable.
        """
        self.engine.run(ops.copy_thread(self._ctx, source_thread_id, target_thread_id, up_to))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str, *,
                           up_to: str | None = None) -> None:
        """Async twin of `copy_thread`."""
        await self.engine.arun(
            ops.copy_thread(self._ctx, source_thread_id, target_thread_id, up_to))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``"keep_latest"``: keep each namespace's latest checkpoint and what its
        `DeltaChannel` values and pending interrupts need; ``"delete"``: delete the threads."""
        self.engine.run(ops.prune(self._ctx, thread_ids, strategy))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Async twin of `prune`."""
        await self.engine.arun(ops.prune(self._ctx, thread_ids, strategy))

    def sweep(self, retention: Retention | None = None, *, dry_run: bool = False) -> SweepReport:
        """Delete, from both tiers, what ``retention`` (default: the saver's) no longer
        keeps; with ``dry_run``, only count it. Safe while graphs run and with several
        sweepers at once; a thread busy with a writer is left for the next sweep.

        Raises:
            ConfigurationError: no retention is configured or given.
            TierUnavailableError: Redis or Postgres cannot be reached.
        """
        return self.engine.run(ops.sweep(self._ctx, self._retention(retention), dry_run=dry_run))

    async def asweep(
        self, retention: Retention | None = None, *, dry_run: bool = False
    ) -> SweepReport:
        """Async twin of `sweep`."""
        return await self.engine.arun(
            ops.sweep(self._ctx, self._retention(retention), dry_run=dry_run)
        )

    def _retention(self, retention: Retention | None) -> Retention:
        chosen = retention or self.config.retention
        if chosen is None:
            raise ConfigurationError(
                "no retention policy: pass DurableSaver(retention=Retention(max_idle=...)) "
                "or sweep(Retention(...))"
            )
        return chosen

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> DurableSaver:
        """Allow the graph's state types to be rebuilt (LangGraph calls this when it compiles
        a graph under ``LANGGRAPH_STRICT_MSGPACK=true``).

        Returns this saver, not a copy: its serializer takes the types in place, so the
        saver's engine, its flusher and every graph compiled with it keep sharing one
        serializer (a copy's allowlist would never reach them, and ``close()`` would not
        stop a flusher the copy started).
        """
        widened = super().with_allowlist(extra_allowlist)
        if widened is not self:  # a serializer of the application's, copied with the types
            self.serde = self._ctx.serde = widened.serde
        return self

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Monotonic, sortable version strings (as `InMemorySaver` makes them)."""
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(current.split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"
