"""`DurableStore`: LangGraph's long-term memory store on Postgres, with a Redis read tier.

Postgres holds every item (`_core/sql/store.py`); plain Redis (no modules) caches item
rows for `get`, kept coherent across processes (`_core/store.py`). One object serves
``batch`` and ``abatch``: each builds the same operation and hands it to the saver's
`Engine`, whose blocking or event-loop driver runs it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, overload

from langgraph.store.base import BaseStore, Op, Result, TTLConfig, validate_op_namespace

from langgraph_durable._batching import Batcher
from langgraph_durable._core import migrate, semantic
from langgraph_durable._core import store as core
from langgraph_durable._core.sql.ledger import LEDGER_MIGRATIONS
from langgraph_durable._core.sql.schema import CORE_MIGRATIONS, Migration
from langgraph_durable._core.sql.store import STORE_MIGRATIONS
from langgraph_durable._core.sql.sweep import RETENTION_MIGRATIONS
from langgraph_durable._core.strict import default_serde
from langgraph_durable._tiers.engine import Engine
from langgraph_durable.config import SaverConfig
from langgraph_durable.errors import ConfigurationError

if TYPE_CHECKING:
    from langgraph_durable.saver import DurableSaver

logger = logging.getLogger("langgraph_durable")

class DurableStore(BaseStore):
    """A `BaseStore` whose items live in Postgres and whose gets are served from Redis.

    Args:
        redis_url: the read tier (``LGD_REDIS_URL`` when omitted, like `DurableSaver`).
        postgres_url: the system of record (``LGD_POSTGRES_URL`` when omitted).
        schema: Postgres schema of the store's table (shared with a saver's is fine).
        key_prefix: every Redis key starts with it.
        ttl: LangGraph's `TTLConfig` (``default_ttl`` in minutes, ``refresh_on_read``).
        index: semantic search (LangGraph's ``IndexConfig``: ``dims``, ``embed``,
            ``fields``; and PostgresStore's ``distance_type``, ``"cosine"`` by default, and
            ``ann_index_config={"vector_type": "halfvec"}``). Needs pgvector on the
            Postgres server (`setup` says so when it is missing); searches rank exactly,
            within the namespace prefix and the filter.
        cache_ttl: seconds a cached item lives in Redis without being read from Postgres.
        saver: a `DurableSaver` whose connections the store shares: its servers, schema,
            key prefix, pools and breakers (no URLs, schema, prefix or options beside it).
            One set of pools per process serves both; `close` leaves them to the saver.
        **options: any other `SaverConfig` option (pool sizes, timeouts).

    Raises:
        ConfigurationError: an option or the index config is invalid.
    """

    supports_ttl = True
    table_version: ClassVar[int] = min(m.version for m in STORE_MIGRATIONS)
    """The schema version that creates the store's table: a schema older than it has none
    (`setup` or ``langgraph-durable migrate`` brings it)."""

    def __init__(
        self,
        redis_url: str | None = None,
        postgres_url: str | None = None,
        *,
        schema: str = "public",
        key_prefix: str = "lgd",
        ttl: TTLConfig | None = None,
        index: Any = None,
        cache_ttl: int = 3600,
        saver: DurableSaver | None = None,
        **options: Any,
    ) -> None:
        self.index_config: dict[str, Any] | None = None if index is None else dict(index)
        self._index = None if index is None else semantic.index_from_config(index)
        self.embeddings = None if self._index is None else self._index.embeddings
        if not isinstance(cache_ttl, int) or cache_ttl < 1:
            raise ConfigurationError("cache_ttl must be a whole number of seconds, at least 1")
        self.ttl_config = ttl
        self._sweeper: concurrent.futures.Future[None] | None = None
        self._sweeper_stop = threading.Event()
        self._asweeper: tuple[asyncio.Task[None], asyncio.Event] | None = None
        self._batchers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Batcher] = (
            weakref.WeakKeyDictionary())
        self._owns_engine = saver is None
        if saver is not None:
            given = [name for name, value in (("redis_url", redis_url),
                                              ("postgres_url", postgres_url)) if value]
            given += [name for name, value, default in (("schema", schema, "public"),
                                                        ("key_prefix", key_prefix, "lgd"))
                      if value != default] + sorted(options)
            if given:
                raise ConfigurationError(
                    f"a store made from a saver takes its servers, schema, key prefix and "
                    f"options from it; drop {', '.join(given)} (or build the store alone)")
            self.config, self.engine = saver.config, saver.engine
        else:
            self.config = SaverConfig.from_env(redis_url=redis_url, postgres_url=postgres_url,
                                               key_prefix=key_prefix, schema=schema, **options)
            self.engine = Engine(
                self.config, default_serde(None, self.config),
                redis_url_given=redis_url is not None or "LGD_REDIS_URL" in os.environ,
                postgres_url_given=postgres_url is not None or "LGD_POSTGRES_URL" in os.environ)
        self.cache = core.CacheSettings(prefix=self.config.key_prefix, ttl=cache_ttl)

    @property
    def migrations(self) -> tuple[Migration, ...]:
        """Every migration `setup` applies: the saver's (its tables share the schema and
        the Engine reads them) and the store's."""
        return tuple(sorted(CORE_MIGRATIONS + LEDGER_MIGRATIONS + RETENTION_MIGRATIONS
                            + STORE_MIGRATIONS, key=lambda m: m.version))

    # ------------------------------------------------------------------ lifecycle

    def setup(self) -> None:
        """Create the schema and tables (idempotent, safe from many processes at once).

        Raises:
            TierUnavailableError: Postgres cannot be reached.
            SchemaVersionError: the schema was migrated by a newer release.
        """
        self.engine.check_cold()
        self.engine.run(migrate.setup(self.config.schema, self.migrations))
        if self._index is not None:
            self.engine.run(semantic.setup(self.config.schema, self._index))

    async def asetup(self) -> None:
        """Async twin of `setup`."""
        await self.engine.acheck_cold()
        await self.engine.arun(migrate.setup(self.config.schema, self.migrations))
        if self._index is not None:
            await self.engine.arun(semantic.setup(self.config.schema, self._index))

    def close(self) -> None:
        """Stop the TTL sweeper thread, if one runs, and close the blocking clients (a
        saver's, when made from one, stay open for it)."""
        self.stop_ttl_sweeper()
        if self._owns_engine:
            self.engine.close()

    async def aclose(self) -> None:
        """Stop the TTL sweeper task, if one runs, and close the running event loop's
        clients (a saver's, when made from one, stay open for it)."""
        await self.astop_ttl_sweeper()
        if self._owns_engine:
            await self.engine.aclose()

    def __enter__(self) -> DurableStore:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    async def __aenter__(self) -> DurableStore:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    @classmethod
    @contextmanager
    def from_conn_string(cls, redis_url: str | None = None, postgres_url: str | None = None,
                         **options: Any) -> Iterator[DurableStore]:
        """A store for the two URLs, set up, closed on exit."""
        store = cls(redis_url, postgres_url, **options)
        try:
            store.setup()
            yield store
        finally:
            store.close()

    @classmethod
    @asynccontextmanager
    async def afrom_conn_string(cls, redis_url: str | None = None,
                                postgres_url: str | None = None,
                                **options: Any) -> AsyncIterator[DurableStore]:
        """Async twin of `from_conn_string`."""
        store = cls(redis_url, postgres_url, **options)
        try:
            await store.asetup()
            yield store
        finally:
            await store.aclose()

    # ------------------------------------------------------------------ ops

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` (reads see the store as before the batch); results in op order.
        With an index, the texts and queries are embedded first: a model that fails
        leaves the store as it was."""
        checked = self._checked(ops)
        embedded = semantic.embed(self._index, checked)
        return self.engine.run(core.batch(self.engine.context, self.cache, checked,
                                          self._index, embedded))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Async twin of `batch`. Calls made while others of the same event loop are in
        flight run together, as one batch (`_batching`): ``asyncio.gather`` of many
        ``aget``/``aput`` costs a few round trips, not one each."""
        checked = self._checked(ops)
        if not checked:
            return []
        loop = asyncio.get_running_loop()
        batcher = self._batchers.get(loop)
        if batcher is None:
            batcher = self._batchers[loop] = Batcher(self._abatch_now)
        return await batcher.submit(checked)

    async def _abatch_now(self, ops: list[Op]) -> list[Result]:
        embedded = await semantic.aembed(self._index, ops)
        return await self.engine.arun(core.batch(self.engine.context, self.cache, ops,
                                                 self._index, embedded))

    @overload
    def sweep_ttl(self, batch: int = 1000) -> int: ...
    @overload
    def sweep_ttl(self, batch: int = 1000, *, every: float) -> int | None: ...

    def sweep_ttl(self, batch: int = 1000, *, every: float | None = None) -> int | None:
        """Delete expired items, at most ``batch`` per statement; returns how many. With
        ``every`` (seconds), only if no process sharing the schema began a sweep within
        that long (else ``None``): what the TTL sweeper does, so many replicas sweep once."""
        return self.engine.run(core.sweep(self.config.schema, self._batch(batch),
                                          _every(every)))

    @overload
    async def asweep_ttl(self, batch: int = 1000) -> int: ...
    @overload
    async def asweep_ttl(self, batch: int = 1000, *, every: float) -> int | None: ...

    async def asweep_ttl(self, batch: int = 1000, *, every: float | None = None
                         ) -> int | None:
        """Async twin of `sweep_ttl`."""
        return await self.engine.arun(core.sweep(self.config.schema, self._batch(batch),
                                                 _every(every)))

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None
                          ) -> concurrent.futures.Future[None]:
        """Sweep expired items every ``sweep_interval_minutes`` (default: the ``ttl``
        config's ``sweep_interval_minutes``, else 5) in a thread of its own, at once and
        then each interval; returns its future (`stop_ttl_sweeper` ends it). Every replica
        may run one: a sweep runs only where no other began within the interval
        (`sweep_ttl`'s ``every``), so they sweep once per interval between them. A sweep
        that fails (a tier down) is logged and tried again next interval."""
        interval = self._interval(sweep_interval_minutes)
        if self._sweeper is not None and not self._sweeper.done():
            return self._sweeper
        stop = self._sweeper_stop = threading.Event()
        future: concurrent.futures.Future[None] = concurrent.futures.Future()

        def loop() -> None:
            try:
                while True:
                    _swept(lambda: self.sweep_ttl(every=interval * 0.9))
                    if stop.wait(interval):
                        break
            finally:
                future.set_result(None)

        threading.Thread(target=loop, name="lgd-store-ttl-sweeper", daemon=True).start()
        self._sweeper = future
        return future

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the thread `start_ttl_sweeper` started; whether it ended within ``timeout``
        (True when none runs)."""
        if self._sweeper is None:
            return True
        self._sweeper_stop.set()
        try:
            self._sweeper.result(timeout)
        except concurrent.futures.TimeoutError:
            return False
        return True

    async def astart_ttl_sweeper(self, sweep_interval_minutes: float | None = None
                                 ) -> asyncio.Task[None]:
        """Async twin of `start_ttl_sweeper`: a task of the running loop
        (`astop_ttl_sweeper` ends it)."""
        interval = self._interval(sweep_interval_minutes)
        if self._asweeper is not None and not self._asweeper[0].done():
            return self._asweeper[0]
        stop = asyncio.Event()

        async def loop() -> None:
            while True:
                await _aswept(self.asweep_ttl(every=interval * 0.9))
                try:
                    await asyncio.wait_for(stop.wait(), interval)
                    return
                except TimeoutError:
                    continue

        task = asyncio.create_task(loop(), name="lgd-store-ttl-sweeper")
        self._asweeper = (task, stop)
        return task

    async def astop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the task `astart_ttl_sweeper` started; whether it ended within
        ``timeout`` (True when none runs)."""
        if self._asweeper is None:
            return True
        task, stop = self._asweeper
        stop.set()
        done, _ = await asyncio.wait({task}, timeout=timeout)
        return bool(done)

    def _interval(self, minutes: float | None) -> float:
        """The sweeper's interval in seconds."""
        if minutes is None:
            minutes = (self.ttl_config or {}).get("sweep_interval_minutes") or 5
        if isinstance(minutes, bool) or not isinstance(minutes, (int, float)) or not (
                0 < minutes <= 7 * 24 * 60):
            raise ConfigurationError(
                f"sweep_interval_minutes must be a number of minutes above 0, at most a week; "
                f"got {minutes!r}")
        return float(minutes) * 60

    @staticmethod
    def _batch(batch: int) -> int:
        if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= 100_000:
            raise ConfigurationError("sweep_ttl batch must be between 1 and 100000")
        return batch

    @staticmethod
    def _checked(ops: Iterable[Op]) -> list[Op]:
        """``ops`` as a list, each namespace checked the way LangGraph's wrappers do (ops
        passed straight to ``batch`` skip them)."""
        ops = list(ops)
        for op in ops:
            validate_op_namespace(op)  # without an index, a query is ignored (InMemoryStore)
        return ops


def _every(every: float | None) -> float | None:
    if every is not None and (isinstance(every, bool) or not isinstance(every, (int, float))
                              or every < 0):
        raise ConfigurationError(f"sweep_ttl every must be a number of seconds, got {every!r}")
    return every


def _swept(sweep: Callable[[], int | None]) -> None:
    try:
        _said(sweep())
    except Exception as exc:  # the sweeper's own thread: nobody else would hear of it
        logger.warning("store TTL sweep failed (tried again next interval): %s", exc)


async def _aswept(sweep: Awaitable[int | None]) -> None:
    try:
        _said(await sweep)
    except Exception as exc:  # the sweeper's own task: nobody else would hear of it
        logger.warning("store TTL sweep failed (tried again next interval): %s", exc)


def _said(gone: int | None) -> None:
    if gone:
        logger.info("store TTL sweep deleted %d expired items", gone)
