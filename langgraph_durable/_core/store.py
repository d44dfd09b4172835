"""The long-term memory store's operations, as generators the Engine runs (sync or async).

Postgres is the system of record; plain Redis caches item rows for `get`. Each cache
entry is a hash under the key prefix holding a version (the store's sequence), the row
of that version or nothing, and a count of writes in flight:

- a write first takes a hold (`store_hold`, waited for: the data goes, readers read
  Postgres and no fill lands, and the entry expires with the hold), commits in Postgres,
  then releases it
  (`store_wrote`), storing its version, and a put its row, only if no newer version is
  cached; so once a write returned, every process reads it or something newer;
- a read that misses leaves a ticket in the entry (`store_get`) and fills it with the row
  it read only if its ticket is still there, no write is in flight and the cached version
  is older (`store_fill`): a write's hold takes the tickets, and an entry that went
  (expired, evicted, deleted by a restarted Redis's check) took them with it, so a fill
  of a row read before either never lands;
- an item with a TTL is not cached (its entry says so: its reads go to Postgres, which
  refreshes and expires it), nor is a deletion: a delete leaves its version and no row.

Why the newest version cached is the last write committed: an update or a delete draws
its version holding the row's lock, so after every write committed before it. Only an
insert draws its version before it waits (for a delete of the same item, say), so an
insert can commit last with a smaller version than a delete's; its row is then refused
and the delete's version, which holds no row, stays: reads go to Postgres and fills of
the insert's row are refused until the entry expires or a later write replaces it. An
entry never holds a row some later committed write replaced.

When Redis cannot be reached, reads and writes go on through Postgres (the breaker keeps
the next ones off Redis until a probe finds it back).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from langgraph.store.base import (
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from langgraph_durable._core import semantic
from langgraph_durable._core.context import Context
from langgraph_durable._core.requests import Cold, Hot, HotBatch, Statement
from langgraph_durable._core.requests import Op as Operation
from langgraph_durable._core.scripts import store as scripts
from langgraph_durable._core.semantic import NOTHING, Embedded, Index
from langgraph_durable._core.sql import store as q
from langgraph_durable.errors import TierUnavailableError

NOT_CACHED = ""  # an entry's data when its reads go to Postgres (a TTL; a deletion); the
# data "-" (a deletion, as entries of earlier versions hold it) is read from Postgres too


@dataclass(frozen=True, slots=True)
class CacheSettings:
    """Where and how long the read tier keeps entries."""

    prefix: str
    ttl: int = 3600  # seconds an entry lives without being written or filled
    hold_ms: int = 30_000  # the longest a write may keep readers off its entry


def entry_key(prefix: str, namespace: Sequence[str], key: str) -> str:
    """The Redis key of one item's entry (JSON: any label is safe in it)."""
    return f"{prefix}:store:" + json.dumps([*namespace, key], ensure_ascii=False)


def encode(row: dict[str, Any]) -> str:
    """A row as its cache entry's data."""
    if row.get("expires_at") is not None:
        return NOT_CACHED
    return json.dumps({"v": row["value"], "c": row["created_at"].isoformat(),
                       "u": row["updated_at"].isoformat()}, ensure_ascii=False)


def decode(namespace: tuple[str, ...], key: str, data: str) -> Item:
    """An entry's data as the item."""
    loaded = json.loads(data)
    return Item(value=loaded["v"], key=key, namespace=namespace,
                created_at=datetime.fromisoformat(loaded["c"]),
                updated_at=datetime.fromisoformat(loaded["u"]))


def item(row: dict[str, Any], search: bool = False) -> Item:
    """A row as LangGraph's item (a search's with its score, ``None`` when unranked)."""
    common = dict(value=row["value"], key=row["key"], namespace=tuple(row["namespace"]),
                  created_at=row["created_at"], updated_at=row["updated_at"])
    return SearchItem(**common, score=row.get("score")) if search else Item(**common)


def batch(ctx: Context, cache: CacheSettings, ops: Iterable[Op], index: Index | None = None,
          embedded: Embedded = NOTHING) -> Operation[list[Result]]:
    """Run ``ops``: every read sees the store as it was before the batch (reads first,
    like LangGraph's stores), then the writes, the last of each item winning; results in
    op order. With an ``index``, searches with a query rank by ``embedded``'s vectors
    and puts replace their items' embeddings in the same transaction."""
    listed = list(ops)
    results: list[Result] = [None] * len(listed)
    gets = [(i, op) for i, op in enumerate(listed) if isinstance(op, GetOp)]
    if gets:
        found = yield from _gets(ctx, cache, [op for _, op in gets])
        for (i, _), got in zip(gets, found, strict=True):
            results[i] = got
    reads = [(i, op) for i, op in enumerate(listed)
             if isinstance(op, (SearchOp, ListNamespacesOp))]
    if reads:
        statements = tuple(_read_statement(ctx.config.schema, op, index, embedded)
                           for _, op in reads)
        rows = yield Cold(statements)
        for (i, read), got in zip(reads, rows, strict=True):
            results[i] = ([item(r, search=True) for r in got] if isinstance(read, SearchOp)
                          else [tuple(r["ns"]) for r in got])
    puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
    for op in listed:
        if isinstance(op, PutOp):
            puts.pop((tuple(op.namespace), op.key), None)
            puts[(tuple(op.namespace), op.key)] = op
    if puts:  # in key order, so concurrent batches take their row locks in one order
        yield from _puts(ctx, cache, [puts[k] for k in sorted(puts)], index, embedded)
    return results


def _read_statement(schema: str, op: SearchOp | ListNamespacesOp, index: Index | None,
                    embedded: Embedded) -> Statement:
    if isinstance(op, SearchOp):
        ranking = (index.ranking(schema, embedded.queries[op.query])
                   if index is not None and op.query else None)
        query, params = q.search_statement(schema, op.namespace_prefix, op.filter, op.limit,
                                           op.offset, op.refresh_ttl, ranking)
    else:
        conditions = [(c.match_type, c.path) for c in op.match_conditions or ()]
        query, params = q.list_namespaces_statement(schema, conditions, op.max_depth,
                                                    op.limit, op.offset)
    return Statement(query, params, fetch=True)


def _hot(ctx: Context, request: Hot | HotBatch) -> Operation[Any]:
    """The reply, or ``None`` when Redis is off or fails (the breaker notes it)."""
    if not ctx.breaker.allows():
        return None
    try:
        return (yield request)
    except TierUnavailableError:
        ctx.breaker.failure()
        return None


def _gets(ctx: Context, cache: CacheSettings, ops: list[GetOp]) -> Operation[list[Item | None]]:
    """Items from their entries; the others from Postgres, then filled."""
    keys = [entry_key(cache.prefix, op.namespace, op.key) for op in ops]
    ticket = uuid.uuid4().hex
    replies = yield from _hot(ctx, HotBatch(tuple(
        scripts.get(k, ticket, cache.hold_ms) for k in keys)))
    found: list[Item | None] = [None] * len(ops)
    missing: list[int] = []
    for i, op in enumerate(ops):
        data = replies[i][1] if replies and replies[i] and len(replies[i]) > 1 else None
        if data is not None:  # `store_get` serves no entry without a row
            found[i] = decode(tuple(op.namespace), op.key, _text(data))
        else:
            missing.append(i)
    if not missing:
        return found
    missing.sort(key=lambda i: (tuple(ops[i].namespace), ops[i].key))  # one lock order
    schema = ctx.config.schema
    get = q.statements(schema).get
    statements = tuple(Statement(get, q.get_params(ops[i].namespace, ops[i].key,
                                                   ops[i].refresh_ttl), fetch=True)
                       for i in missing)
    rows = yield Cold(statements)
    fills = []
    for i, got in zip(missing, rows, strict=True):
        if got:
            found[i] = item(got[0])
            fills.append(scripts.fill(keys[i], ticket, got[0]["version"], encode(got[0]),
                                      cache.ttl))
    if fills and replies is not None:
        yield from _hot(ctx, HotBatch(tuple(fills)))
    return found


def _puts(ctx: Context, cache: CacheSettings, ops: list[PutOp], index: Index | None,
          embedded: Embedded) -> Operation[None]:
    """Hold the entries, commit every write in one transaction, then store the rows.

    The holds are waited for: each is in Redis before the commit, so from then until the
    row's update lands every reader of the item goes to Postgres, which has the row (a fill
    of an older row is refused), and a writer that dies after its commit leaves the hold,
    not the replaced row. A hold sent without waiting could fail unseen (a Redis that lost
    its scripts answers ``NOSCRIPT``, and the update behind it, on another connection, too)
    and leave the replaced row served. The update of one put is sent without waiting: one
    that fails leaves the hold to expire (``hold_ms``), reads going to Postgres meanwhile."""
    keys = [entry_key(cache.prefix, op.namespace, op.key) for op in ops]
    holds = tuple(scripts.hold(k, cache.hold_ms) for k in keys)
    held = yield from _hot(ctx, holds[0] if len(holds) == 1 else HotBatch(holds))
    schema = ctx.config.schema
    rendered = q.statements(schema)
    statements = tuple(
        Statement(rendered.delete, q.delete_params(op.namespace, op.key), fetch=True)
        if op.value is None else
        Statement(rendered.put, q.put_params(op.namespace, op.key, op.value, op.ttl),
                  fetch=True)
        for op in ops)
    if index is not None:  # each item's embeddings, after its row (they reference it)
        statements += tuple(
            semantic.replace_statement(schema, index, (tuple(op.namespace), op.key), embedded)
            for op in ops if op.value is not None)
    rows = yield Cold(statements)
    if held is None:  # Redis was off: entries it still holds expire with their TTL
        return None
    wrote = tuple(
        scripts.wrote(k, got[0]["version"], NOT_CACHED if op.value is None else encode(got[0]),
                      cache.ttl)
        for k, op, got in zip(keys, ops, rows[:len(ops)], strict=True))
    yield from _hot(ctx, wrote[0].sent_only() if len(wrote) == 1 else HotBatch(wrote))
    return None


def sweep(schema: str, batch_size: int, every: float | None = None) -> Operation[int | None]:
    """Delete expired items, at most ``batch_size`` per statement (each its own commit, so
    no sweep holds many rows at once), until none is left; returns how many went. With
    ``every`` (seconds), only if no replica began a sweep within that long: it claims the
    interval first (one row, `SWEEP_CLAIM_SQL`), and returns ``None`` when another did."""
    if every is not None:
        claimed = (yield Cold.one(q.statements(schema).sweep_claim, {"every": every},
                                  fetch=True))[0]
        if not claimed:
            return None
    total = 0
    while True:
        rows = (yield Cold.one(q.statements(schema).sweep, {"batch": batch_size},
                              fetch=True))[0]
        total += len(rows)
        if len(rows) < batch_size:
            return total


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
