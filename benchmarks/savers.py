"""The savers under test: one table of factories, and the helpers that open and drain them.

Each :class:`SaverSpec` opens a saver for the sync API (``open``) and for the async API
(``aopen``). Where the library has one class for both (``InMemorySaver``, ``DurableSaver``)
both factories build that class; where it has two (Postgres, SQLite) each builds its own.
Every saver gets its own :class:`Namespace` per section: a Postgres schema, a Redis key
prefix, a SQLite file, so sections neither see nor measure each other's data.
"""

from __future__ import annotations

import importlib
import logging
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    AsyncExitStack,
    ExitStack,
    asynccontextmanager,
    contextmanager,
)
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal, Protocol

import aiosqlite
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from psycopg import AsyncConnection, Connection
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from benchmarks import infra
from benchmarks.settings import Settings
from benchmarks.timing import reporting, reporting_in

log = logging.getLogger(__name__)

Saver = BaseCheckpointSaver[Any]
Store = Literal["postgres", "redis", "sqlite"]
WriteMode = Literal["through", "behind"]

MEMORY = "memory"
"""Name of the first baseline of every ratio column."""
POSTGRES = "postgres"
"""Name of the second baseline of every ratio column."""
POSTGRES_POOL = "postgres-pool"
"""Name of the pooled Postgres saver, the load section's baseline."""
POOL_MAX_SIZE = 10


@dataclass(frozen=True, slots=True)
class Namespace:
    """Where one saver keeps its data during one section."""

    settings: Settings
    saver: str
    section: str

    @property
    def schema(self) -> str:
        """Postgres schema (a plain identifier: lower case, digits, underscores)."""
        return f"{self.saver}__{self.section}".replace("-", "_")

    @property
    def key_prefix(self) -> str:
        """Redis key prefix; no section name is a prefix of another, so neither are these."""
        return f"{self.settings.key_prefix}.{self.saver}.{self.section}"

    @property
    def sqlite_path(self) -> Path:
        """SQLite database file, in the run's scratch directory."""
        return self.settings.workdir / f"{self.saver}-{self.section}.sqlite"

    @property
    def postgres_url(self) -> str:
        """URL of the run's scratch database."""
        return self.settings.bench_postgres_url

    @property
    def redis_url(self) -> str:
        """URL of the Redis server (keys confined to :attr:`key_prefix`)."""
        return self.settings.redis_url


class SyncFactory(Protocol):
    """Opens a saver for the sync API; ``setup=False`` opens it as an application process
    does once the schema exists (construct and connect, no ``setup()``)."""

    def __call__(
        self, ns: Namespace, *, setup: bool = True
    ) -> AbstractContextManager[Saver]: ...


AsyncFactory = Callable[[Namespace], AbstractAsyncContextManager[Saver]]


def _no_provisioning(ns: Namespace) -> None:
    """Nothing to prepare before the saver opens."""


def _provision_schema(ns: Namespace) -> None:
    """Create the schema that the connection's ``search_path`` points at."""
    infra.create_schema(ns.postgres_url, ns.schema)


@dataclass(frozen=True, slots=True, kw_only=True)
class SaverSpec:
    """How to build one saver under test, and what it stores where."""

    name: str
    label: str
    open: SyncFactory
    aopen: AsyncFactory
    stores: frozenset[Store] = frozenset()
    """Empty for an in-process saver, whose state does not survive a restart."""
    provision: Callable[[Namespace], None] = _no_provisioning
    """Run once per namespace before the first ``open`` (not part of any timing)."""
    has_ledger: bool = False

    @property
    def volatile(self) -> bool:
        """Whether the saver's state lives only in its process."""
        return not self.stores

    @property
    def tiered(self) -> bool:
        """Whether the saver keeps a hot tier in Redis (whose loss a restart can simulate)."""
        return "redis" in self.stores


# --- InMemorySaver ---------------------------------------------------------------------------


@contextmanager
def _memory(ns: Namespace, *, setup: bool = True) -> Iterator[Saver]:
    yield InMemorySaver()


@asynccontextmanager
async def _amemory(ns: Namespace) -> AsyncIterator[Saver]:
    yield InMemorySaver()


# --- PostgresSaver / AsyncPostgresSaver, on one connection or a pool ------------------------


def _postgres_kwargs(ns: Namespace) -> dict[str, Any]:
    """The connection settings the langgraph-checkpoint-postgres docs require, in our schema."""
    return {
        "autocommit": True,
        "prepare_threshold": 0,
        "row_factory": dict_row,
        "options": f"-c search_path={ns.schema}",
    }


def _postgres_spec(name: str, label: str, open_: SyncFactory, aopen: AsyncFactory) -> SaverSpec:
    """A Postgres saver: its data lives in the schema that provisioning creates."""
    return SaverSpec(
        name=name,
        label=f"PostgresSaver / AsyncPostgresSaver ({label})",
        open=open_,
        aopen=aopen,
        stores=frozenset({"postgres"}),
        provision=_provision_schema,
    )


@contextmanager
def _postgres(ns: Namespace, *, setup: bool = True) -> Iterator[Saver]:
    conn: Connection[DictRow]
    with Connection.connect(ns.postgres_url, **_postgres_kwargs(ns)) as conn:
        saver = PostgresSaver(conn)
        if setup:
            saver.setup()
        yield saver


@asynccontextmanager
async def _apostgres(ns: Namespace) -> AsyncIterator[Saver]:
    conn: AsyncConnection[DictRow]
    async with await AsyncConnection.connect(ns.postgres_url, **_postgres_kwargs(ns)) as conn:
        saver = AsyncPostgresSaver(conn)
        await saver.setup()
        yield saver


@contextmanager
def _postgres_pool(ns: Namespace, *, setup: bool = True) -> Iterator[Saver]:
    with ConnectionPool[Connection[DictRow]](
        ns.postgres_url, kwargs=_postgres_kwargs(ns), min_size=1, max_size=POOL_MAX_SIZE
    ) as pool:
        pool.wait()
        saver = PostgresSaver(pool)
        if setup:
            saver.setup()
        yield saver


@asynccontextmanager
async def _apostgres_pool(ns: Namespace) -> AsyncIterator[Saver]:
    async with AsyncConnectionPool[AsyncConnection[DictRow]](
        ns.postgres_url,
        kwargs=_postgres_kwargs(ns),
        min_size=1,
        max_size=POOL_MAX_SIZE,
        open=False,
    ) as pool:
        await pool.wait()
        saver = AsyncPostgresSaver(pool)
        await saver.setup()
        yield saver


# --- SqliteSaver / AsyncSqliteSaver (both switch the file to WAL in setup) -------------------


@contextmanager
def _sqlite(ns: Namespace, *, setup: bool = True) -> Iterator[Saver]:
    conn = sqlite3.connect(ns.sqlite_path, check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        if setup:
            saver.setup()
        yield saver
    finally:
        conn.close()


@asynccontextmanager
async def _asqlite(ns: Namespace) -> AsyncIterator[Saver]:
    async with aiosqlite.connect(ns.sqlite_path) as conn:
        saver = AsyncSqliteSaver(conn)
        await saver.setup()
        yield saver


# --- DurableSaver: one object for both APIs ---------------------------------------------------


def _durable_saver(ns: Namespace, write_mode: WriteMode) -> Any:
    """Build a ``DurableSaver``; an import or constructor failure becomes the saver's error.

    Imported by name at run time, not at module import, so that the harness runs (and
    reports the error) while the class is missing or broken; hence the ``Any``.
    """
    module = importlib.import_module("langgraph_durable")
    durable_saver_class = getattr(module, "DurableSaver", None)
    if durable_saver_class is None:
        raise ImportError("langgraph_durable has no DurableSaver yet")
    return durable_saver_class(
        redis_url=ns.redis_url,
        postgres_url=ns.postgres_url,
        write_mode=write_mode,
        key_prefix=ns.key_prefix,
        schema=ns.schema,
    )


async def _call_twin(obj: object, method: str) -> None:
    """Await ``obj.a<method>()`` when the object has it, else call ``obj.<method>()``."""
    twin = getattr(obj, f"a{method}", None)
    if twin is not None:
        await twin()
    else:
        getattr(obj, method)()


@contextmanager
def _durable(ns: Namespace, *, write_mode: WriteMode, setup: bool = True) -> Iterator[Saver]:
    saver = _durable_saver(ns, write_mode)
    try:
        if setup:
            saver.setup()
        yield saver
    finally:
        saver.close()


@asynccontextmanager
async def _adurable(ns: Namespace, *, write_mode: WriteMode) -> AsyncIterator[Saver]:
    saver = _durable_saver(ns, write_mode)
    try:
        await _call_twin(saver, "setup")
        yield saver
    finally:
        await _call_twin(saver, "close")


def _durable_spec(write_mode: WriteMode) -> SaverSpec:
    return SaverSpec(
        name=f"durable-{write_mode}",
        label=f'DurableSaver(write_mode="{write_mode}")',
        open=partial(_durable, write_mode=write_mode),
        aopen=partial(_adurable, write_mode=write_mode),
        stores=frozenset({"postgres", "redis"}),
        has_ledger=True,
    )


SPECS: tuple[SaverSpec, ...] = (
    SaverSpec(name=MEMORY, label="InMemorySaver", open=_memory, aopen=_amemory),
    _postgres_spec(POSTGRES, "one connection", _postgres, _apostgres),
    _postgres_spec(
        POSTGRES_POOL, f"psycopg_pool, max_size={POOL_MAX_SIZE}", _postgres_pool, _apostgres_pool
    ),
    SaverSpec(
        name="sqlite",
        label="SqliteSaver / AsyncSqliteSaver (file, WAL)",
        open=_sqlite,
        aopen=_asqlite,
        stores=frozenset({"sqlite"}),
    ),
    _durable_spec("through"),
    _durable_spec("behind"),
)
SPECS_BY_NAME = {spec.name: spec for spec in SPECS}


# --- opening a set of savers, each failure kept as that saver's error ------------------------


@dataclass(slots=True)
class OpenSavers:
    """The savers of one section that opened, and why the others did not."""

    savers: dict[str, Saver] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


def _closing_failure_logged(name: str) -> AbstractContextManager[None]:
    """Log (not raise) an exception of the body as ``name``'s closing failure."""
    return reporting(partial(log.error, "%s: closing failed: %s", name))


@contextmanager
def _closing_reported(cm: AbstractContextManager[Saver], name: str) -> Iterator[Saver]:
    """Enter ``cm``; if the body succeeds, close it and log (not raise) a closing error."""
    with ExitStack() as inner:
        saver = inner.enter_context(cm)
        yield saver
        with _closing_failure_logged(name):
            inner.close()


@asynccontextmanager
async def _aclosing_reported(
    cm: AbstractAsyncContextManager[Saver], name: str
) -> AsyncIterator[Saver]:
    """Async twin of :func:`_closing_reported`."""
    async with AsyncExitStack() as inner:
        saver = await inner.enter_async_context(cm)
        yield saver
        with _closing_failure_logged(name):
            await inner.aclose()


def namespace(settings: Settings, spec: SaverSpec, section: str) -> Namespace:
    """The namespace of ``spec`` in ``section``."""
    return Namespace(settings=settings, saver=spec.name, section=section)


def provisioned(settings: Settings, spec: SaverSpec, section: str) -> Namespace:
    """The namespace of ``spec`` in ``section``, provisioned for the saver to open in it."""
    ns = namespace(settings, spec, section)
    spec.provision(ns)
    return ns


def open_savers(
    stack: ExitStack, specs: Iterable[SaverSpec], settings: Settings, section: str
) -> OpenSavers:
    """Provision and open each spec's sync saver on ``stack``, keeping failures as errors."""
    result = OpenSavers()
    for spec in specs:
        with reporting_in(result.errors, spec.name):
            opening = spec.open(provisioned(settings, spec, section))
            result.savers[spec.name] = stack.enter_context(_closing_reported(opening, spec.name))
    return result


async def aopen_savers(
    stack: AsyncExitStack, specs: Iterable[SaverSpec], settings: Settings, section: str
) -> OpenSavers:
    """Async twin of :func:`open_savers`, for the savers of the async API."""
    result = OpenSavers()
    for spec in specs:
        with reporting_in(result.errors, spec.name):
            opening = spec.aopen(provisioned(settings, spec, section))
            result.savers[spec.name] = await stack.enter_async_context(
                _aclosing_reported(opening, spec.name)
            )
    return result


def drain(saver: Saver) -> bool:
    """Block until a write-behind saver has written everything to its system of record.

    Returns whether the saver has anything to drain (a ``flush()`` method).
    """
    flush = getattr(saver, "flush", None)
    if flush is None:
        return False
    flush()
    return True


async def adrain(saver: Saver) -> bool:
    """Async twin of :func:`drain` (``aflush()`` when present, else ``flush()``)."""
    if getattr(saver, "flush", None) is None and getattr(saver, "aflush", None) is None:
        return False
    await _call_twin(saver, "flush")
    return True
