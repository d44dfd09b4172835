"""Store: LangGraph's long-term memory store (``BaseStore``), one call at a time, sync API.

The selected savers that have a store of their own bring it, and the rows keep the saver's
name, so the ratio columns and the goals find their baselines as in the other sections:
``memory`` is ``InMemoryStore``, ``postgres`` is ``PostgresStore`` (langgraph-checkpoint-
postgres, on one connection, in its own schema) and ``durable-through`` is ``DurableStore``
(its writes go through Postgres; Redis serves its gets). The other savers have no store.

Two tables: ``get`` of an item read before, ``put`` of a new item and a ``search`` with a
numeric filter, interleaved per sample; then ``get`` p50 in namespaces of growing size.
"""

from __future__ import annotations

import gc
import importlib
import logging
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from langgraph.store.base import BaseStore, PutOp
from langgraph.store.memory import InMemoryStore
from langgraph.store.postgres import PostgresStore
from psycopg import Connection
from psycopg.rows import DictRow

from benchmarks import infra
from benchmarks.context import Context
from benchmarks.report import NOTE, Column, Row, Table, add_ratios, error_row
from benchmarks.savers import MEMORY, POSTGRES, Namespace, _postgres_kwargs
from benchmarks.sections._common import LATENCY_COLUMNS, latency_rows
from benchmarks.timing import Series, reporting, reporting_in, round_robin, summarize, timed_ns
from benchmarks.workloads import message_text

SECTION = "store"
NAMESPACE_SECTION = "stores"
"""The section part of each store's schema and Redis prefix: not ``store``, a prefix of
``storage``'s (no section's prefix may be a prefix of another's, see ``Namespace``)."""
DURABLE = "durable-through"
SEED_BATCH = 1000
"""Items per ``batch`` call while seeding (seeding is not timed)."""
SEARCH_LIMIT = 10
GROWTH_PROBES = 16
"""Items read in each namespace of the growth table, spread over it, one per round."""

GET = "get · item read before"
PUT = "put · new item"
SEARCH = f"search · numeric filter, limit={SEARCH_LIMIT}"

SEARCH_NS = ("bench", "search")
PUT_NS = ("bench", "put")

STORE = Column("saver", "store")
"""The saver column, headed by what its rows compare here."""

log = logging.getLogger(__name__)

Probe = Callable[[int], int]


# --- the stores under test --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoreSpec:
    """How to open one store, set up, in its namespace."""

    label: str
    open: Callable[[Namespace], AbstractContextManager[BaseStore]]


@contextmanager
def _memory(ns: Namespace) -> Iterator[BaseStore]:
    yield InMemoryStore()


@contextmanager
def _postgres(ns: Namespace) -> Iterator[BaseStore]:
    """``PostgresStore`` on one connection with the settings its package requires, its
    tables in the schema the connection's ``search_path`` names."""
    infra.create_schema(ns.postgres_url, ns.schema)
    conn: Connection[DictRow]
    with Connection.connect(ns.postgres_url, **_postgres_kwargs(ns)) as conn:
        store = PostgresStore(conn)
        store.setup()
        yield store


@contextmanager
def _durable(ns: Namespace) -> Iterator[BaseStore]:
    """``DurableStore``, imported at run time so that its absence is the store's error."""
    module = importlib.import_module("langgraph_durable")
    durable_store_class = getattr(module, "DurableStore", None)
    if durable_store_class is None:
        raise ImportError("langgraph_durable has no DurableStore")
    store = durable_store_class(
        redis_url=ns.redis_url,
        postgres_url=ns.postgres_url,
        schema=ns.schema,
        key_prefix=ns.key_prefix,
    )
    try:
        store.setup()
        yield store
    finally:
        store.close()


STORES: dict[str, StoreSpec] = {
    MEMORY: StoreSpec("InMemoryStore", _memory),
    POSTGRES: StoreSpec("PostgresStore (one connection)", _postgres),
    DURABLE: StoreSpec("DurableStore", _durable),
}
"""The store of each saver that has one, by the saver's name."""


@dataclass(slots=True)
class OpenStores:
    """The stores that opened, and why the others did not."""

    stores: dict[str, BaseStore] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


@contextmanager
def _closing_reported(cm: AbstractContextManager[BaseStore], name: str) -> Iterator[BaseStore]:
    """Enter ``cm``; if the body succeeds, close it and log (not raise) a closing error."""
    with ExitStack() as inner:
        store = inner.enter_context(cm)
        yield store
        with reporting(partial(log.error, "%s: closing failed: %s", name)):
            inner.close()


def open_stores(stack: ExitStack, names: Sequence[str], ctx: Context) -> OpenStores:
    """Open the store of each name on ``stack``, keeping failures as errors."""
    result = OpenStores()
    for name in names:
        with reporting_in(result.errors, name):
            ns = Namespace(settings=ctx.settings, saver=name, section=NAMESPACE_SECTION)
            opening = STORES[name].open(ns)
            result.stores[name] = stack.enter_context(_closing_reported(opening, name))
    return result


# --- seeded namespaces, checked before they are timed ----------------------------------------


def _key(index: int) -> str:
    return f"m{index:06d}"


def _value(index: int, score: int) -> dict[str, Any]:
    """A memory: a 200-character text and a number to filter on."""
    return {"text": message_text("memory", index), "score": score}


def _seed(store: BaseStore, namespace: tuple[str, ...], scores: Sequence[int]) -> None:
    """Put item ``i`` with score ``scores[i]`` for every ``i``, ``SEED_BATCH`` at a time."""
    for start in range(0, len(scores), SEED_BATCH):
        stop = min(start + SEED_BATCH, len(scores))
        store.batch([PutOp(namespace, _key(i), _value(i, scores[i])) for i in range(start, stop)])


def _expect_item(store: BaseStore, namespace: tuple[str, ...], index: int, score: int) -> None:
    found = store.get(namespace, _key(index))
    if found is None or found.value != _value(index, score):
        raise AssertionError(f"get {namespace}/{_key(index)} did not return what was put")


@dataclass(frozen=True, slots=True)
class SearchWorkload:
    """The search namespace's scores and the filter that matches a tenth of them.

    Scores are a shuffled run of numbers with the same count of digits, so comparing them
    as text (as ``PostgresStore`` does) or as numbers selects the same items.
    """

    scores: tuple[int, ...]
    threshold: int

    @classmethod
    def make(cls, items: int) -> SearchWorkload:
        base = 10 ** len(str(items))
        scores = [base + i for i in range(items)]
        random.Random(36).shuffle(scores)
        return cls(tuple(scores), base + items - max(SEARCH_LIMIT, items // 10))

    @property
    def filter(self) -> dict[str, Any]:
        return {"score": {"$gte": self.threshold}}

    @property
    def matches(self) -> frozenset[str]:
        return frozenset(_key(i) for i, s in enumerate(self.scores) if s >= self.threshold)

    @property
    def read_index(self) -> int:
        """The item the get of the first table reads again and again."""
        return len(self.scores) // 2


def _growth_indexes(size: int) -> list[int]:
    return sorted({i * size // GROWTH_PROBES for i in range(GROWTH_PROBES)})


def _growth_ns(size: int) -> tuple[str, ...]:
    return ("bench", "grow", str(size))


def _check_search(store: BaseStore, work: SearchWorkload) -> None:
    """The filter selects every match and nothing else; the timed search returns matches."""
    every = store.search(SEARCH_NS, filter=work.filter, limit=len(work.scores))
    if {item.key for item in every} != work.matches:
        raise AssertionError(
            f"search returned {len(every)} items, not the {len(work.matches)} whose score is "
            f"at least {work.threshold}"
        )
    first = store.search(SEARCH_NS, filter=work.filter, limit=SEARCH_LIMIT)
    if len(first) != SEARCH_LIMIT or not {item.key for item in first} <= work.matches:
        raise AssertionError(f"search(limit={SEARCH_LIMIT}) returned wrong items")


@dataclass(frozen=True, slots=True)
class Fixture:
    """One store, its seeded namespaces checked (and so read once each)."""

    store: BaseStore
    work: SearchWorkload


def _fixture(store: BaseStore, work: SearchWorkload, sizes: Sequence[int]) -> Fixture:
    _seed(store, SEARCH_NS, work.scores)
    _check_search(store, work)
    _expect_item(store, SEARCH_NS, work.read_index, work.scores[work.read_index])
    for size in sizes:
        _seed(store, _growth_ns(size), range(size))
        for index in _growth_indexes(size):
            _expect_item(store, _growth_ns(size), index, index)
    return Fixture(store, work)


# --- probes -----------------------------------------------------------------------------------


def _get(fx: Fixture) -> Probe:
    key = _key(fx.work.read_index)
    return lambda _round: timed_ns(lambda: fx.store.get(SEARCH_NS, key))


def _put(fx: Fixture) -> Probe:
    """A new key each round, valued like the seeded items."""

    def probe(round_: int) -> int:
        key, value = _key(round_), _value(round_, fx.work.scores[0])
        return timed_ns(lambda: fx.store.put(PUT_NS, key, value))

    return probe


def _search(fx: Fixture) -> Probe:
    filter_ = fx.work.filter
    return lambda _round: timed_ns(
        lambda: fx.store.search(SEARCH_NS, filter=filter_, limit=SEARCH_LIMIT)
    )


def _grown_get(store: BaseStore, size: int) -> Probe:
    """Round ``r`` reads the ``r``-th of the items spread over the namespace, in turn."""
    namespace, keys = _growth_ns(size), [_key(i) for i in _growth_indexes(size)]
    return lambda round_: timed_ns(lambda: store.get(namespace, keys[round_ % len(keys)]))


OPERATIONS: tuple[tuple[str, Callable[[Fixture], Probe]], ...] = (
    (GET, _get),
    (PUT, _put),
    (SEARCH, _search),
)


# --- tables -----------------------------------------------------------------------------------


def _growth_row(name: str, series: Mapping[int, Series[int]]) -> Row:
    """One store's p50 at each size, the largest over the smallest, or its first error."""
    errors = [entry.error for entry in series.values() if entry.error]
    if errors:
        return error_row(name, errors[0])
    if not all(entry.values for entry in series.values()):
        return {"saver": name, NOTE: "no samples"}
    row: Row = {"saver": name}
    p50s = [summarize(entry.values).p50 for entry in series.values()]
    for size, p50 in zip(series, p50s, strict=True):
        row[f"at_{size}"] = p50
    row["growth"] = p50s[-1] / p50s[0]
    return row


def _tables(ctx: Context, work: SearchWorkload) -> tuple[Table, Table]:
    profile, sizes = ctx.profile, ctx.profile.store_namespace_sizes
    largest, smallest = f"{sizes[-1]:,}", f"{sizes[0]:,}"
    total = len(work.scores) + sum(sizes)
    mapping = (
        "Stores: memory = InMemoryStore, postgres = PostgresStore (langgraph-checkpoint-"
        "postgres, one connection), durable-through = DurableStore; `vs mem` / `vs pg` divide "
        "by InMemoryStore's / PostgresStore's p50."
    )
    calls = Table(
        SECTION,
        "Store: single calls, sync API",
        (Column("op", "operation"), STORE, *LATENCY_COLUMNS),
        notes=[
            mapping,
            f"Items are {{text: 200 characters, score}}. get: one item of a "
            f"{len(work.scores):,}-item namespace, read again and again (it was read before "
            "timing, so DurableStore serves it from Redis). put: a new key per sample. "
            f"search: the same namespace, filter score ≥ {work.threshold} (matching "
            f"{len(work.matches)} items, checked against every store before timing), "
            f"limit={SEARCH_LIMIT}. Scores have the same count of digits, so PostgresStore, "
            "which compares numbers as text, selects the same items. Each store also holds "
            f"the namespaces of the growth table below: {total:,} items in all, seeded "
            "before any call is timed.",
        ],
    )
    growth = Table(
        SECTION,
        "Store: get p50 (µs) as a namespace grows",
        (
            STORE,
            *(Column(f"at_{n}", f"@{n:,} items", "us") for n in sizes),
            Column("growth", f"@{largest}/@{smallest}", "ratio"),
            Column("x_postgres", f"vs pg @{largest}", "ratio"),
        ),
        notes=[
            mapping,
            f"One namespace per size; round r reads the r-th of {GROWTH_PROBES} items spread "
            "over the namespace, each read once before timing. Every namespace of a store is "
            f"in the same table (or dict); {profile.store_rounds} samples per store and size.",
        ],
    )
    return calls, growth


def run(ctx: Context) -> list[Table]:
    """Seed each selected store, then time its calls, interleaved per sample."""
    profile, sizes = ctx.profile, ctx.profile.store_namespace_sizes
    work = SearchWorkload.make(profile.store_search_items)
    calls, growth = _tables(ctx, work)
    names = [spec.name for spec in ctx.specs if spec.name in STORES]
    if not names:
        for table in (calls, growth):
            table.rows.append({"saver": "store", NOTE: f"not run: select {', '.join(STORES)}"})
        return [calls, growth]
    with ExitStack() as stack:
        opened = open_stores(stack, names, ctx)
        fixtures: dict[str, Fixture] = {}
        errors = dict(opened.errors)
        for name, store in opened.stores.items():
            log.info("%s: seeding %s", SECTION, name)
            with reporting_in(errors, name):
                fixtures[name] = _fixture(store, work, sizes)
        for label, make_probe in OPERATIONS:
            log.info("%s: %s", SECTION, label)
            gc.collect()
            series = round_robin(
                {name: make_probe(fixture) for name, fixture in fixtures.items()},
                rounds=profile.store_rounds,
                warmup=profile.store_warmup,
            )
            calls.rows.extend(latency_rows(series, op=label))
        log.info("%s: get as a namespace grows", SECTION)
        gc.collect()
        grown = round_robin(
            {
                (name, size): _grown_get(fixture.store, size)
                for name, fixture in fixtures.items()
                for size in sizes
            },
            rounds=profile.store_rounds,
            warmup=profile.store_warmup,
        )
        growth.rows.extend(
            _growth_row(name, {size: grown[(name, size)] for size in sizes}) for name in fixtures
        )
    add_ratios(calls.rows, "p50", group=("op",))
    add_ratios(growth.rows, f"at_{sizes[-1]}")
    calls.rows.extend(error_row(name, error, op="(all)") for name, error in errors.items())
    growth.rows.extend(error_row(name, error) for name, error in errors.items())
    return [calls, growth]
