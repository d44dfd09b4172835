"""Reads: `get_tuple` (Redis first, one round trip, decoded cache; Postgres on a miss,
then warm) and `list_checkpoints` (Postgres in one query, merged with unflushed
write-behind checkpoints), with repair of damaged blobs from the other tier.
"""

from __future__ import annotations

import json
import logging
import pickle
import time
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    CheckpointTuple,
)

from langgraph_durable._core import journal, stored_types
from langgraph_durable._core.codec import FrameError, loads_metadata
from langgraph_durable._core.context import Context
from langgraph_durable._core.hot import bypassed, try_hot
from langgraph_durable._core.keys import (
    ThreadKeys,
    blob_field,
    unb64,
    write_field,
)
from langgraph_durable._core.records import (
    Damaged,
    Location,
    Refused,
    StoredWrite,
    build_tuple,
    corrupt,
    locate,
    pack_write,
)
from langgraph_durable._core.requests import Cold, Hot, Op, Statement
from langgraph_durable._core.scripts import thread
from langgraph_durable._core.scripts.registry import Reply
from langgraph_durable._core.scripts.thread import HotRecord

logger = logging.getLogger("langgraph_durable")
T = TypeVar("T")


def _hot_tuple(ctx: Context, where: Location, record: HotRecord) -> CheckpointTuple:
    """Decode a hot record into a tuple; raises `Damaged` when a frame fails."""
    parent = record.fields.get(b"p", b"").decode() or None
    try:
        metadata = loads_metadata(record.fields[b"m"])
    except (FrameError, ValueError) as exc:
        raise Damaged("metadata", str(exc)) from exc
    blobs = []
    for field, frame in record.blobs:
        channel, _, version = field.partition("\x00")
        blobs.append((channel, version, frame))
    return build_tuple(
        ctx.codec,
        where,
        record.checkpoint_id,
        parent,
        record.fields[b"c"],
        metadata,
        blobs,
        record.writes,
    )


def _row_parts(row: dict[str, Any]) -> tuple[list[tuple[str, str, bytes]], list[StoredWrite]]:
    blobs = list(
        zip(
            row["blob_channels"] or [], row["blob_versions"] or [], row["blobs"] or [], strict=True
        )
    )
    writes = [
        StoredWrite(t, i, c, p, b)
        for t, i, c, p, b in zip(
            row["write_task_ids"] or [],
            row["write_idxs"] or [],
            row["write_channels"] or [],
            row["write_paths"] or [],
            row["write_blobs"] or [],
            strict=True,
        )
    ]
    return blobs, writes


def _cold_tuple(ctx: Context, row: dict[str, Any]) -> Op[CheckpointTuple]:
    """Decode a row; a damaged part is repaired from a good hot copy, or raises."""
    where = Location(row["thread_id"], row["checkpoint_ns"], None)
    blobs, writes = _row_parts(row)
    try:
        return (yield from _decoded(ctx, lambda: build_tuple(
            ctx.codec,
            where,
            row["checkpoint_id"],
            row["parent_checkpoint_id"],
            row["checkpoint"],
            loads_metadata(row["metadata"]),
            blobs,
            writes,
        )))
    except Refused as refused:  # Postgres is trusted: a type refused there is not damage
        raise corrupt(where, row["checkpoint_id"], refused, "cold") from refused
    except Damaged as damage:
        repaired = yield from _repair_cold(ctx, where, row, damage)
        if repaired is None:
            raise corrupt(where, row["checkpoint_id"], damage, "cold") from damage
        return repaired


def _decoded(ctx: Context, decode: Callable[[], T]) -> Op[T]:
    """``decode()``; when it meets a type this process does not allow yet, the types the
    application recorded are learned and it runs once more (`_core.stored_types`).

    Raises:
        Refused: the type is not one the application recorded (or allowed).
        Damaged: a frame failed verification.
    """
    try:
        return decode()
    except Refused as refused:
        if not (yield from stored_types.learn(ctx, refused.type_key)):
            raise
    return decode()


def _repair_cold(
    ctx: Context, where: Location, row: dict[str, Any], damage: Damaged
) -> Op[CheckpointTuple | None]:
    keys = ctx.layout.thread(where.thread_id)
    ns = where.checkpoint_ns
    reply = yield from try_hot(ctx, _get(ctx, keys, ns, row["checkpoint_id"], 0))
    found = thread.found(reply) if reply else None
    if found is None or found.reply is not Reply.HIT:
        return None
    record = found.record()
    try:
        good = _hot_tuple(ctx, where, record)
    except Damaged:
        return None
    statements = [
        Statement(
            ctx.statements.repair_checkpoint_sql,
            {
                "thread_id": where.thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": row["checkpoint_id"],
                "checkpoint": record.fields[b"c"],
            },
        )
    ]
    for field, frame in record.blobs:
        channel, _, version = field.partition("\x00")
        statements.append(
            Statement(
                ctx.statements.repair_blob_sql,
                {
                    "thread_id": where.thread_id,
                    "checkpoint_ns": ns,
                    "channel": channel,
                    "version": version,
                    "blob": frame,
                },
            )
        )
    yield Cold(tuple(statements))
    logger.warning(
        "repaired damaged %s of thread %r checkpoint %r from the hot tier",
        damage.part,
        where.thread_id,
        row["checkpoint_id"],
    )
    return good


def _get(
    ctx: Context, keys: ThreadKeys, ns: str, checkpoint_id: str, ttl_ms: int, held: str = "",
    held_version: str = "",
) -> Hot:
    return thread.get(keys, ns, checkpoint_id, ttl_ms, ctx.tokens.new(), held, held_version)


def _found(ctx: Context, request: Hot) -> Op[thread.Found | None]:
    """Run a get.lua call; its parsed reply, or ``None`` when Redis is bypassed."""
    reply = yield from try_hot(ctx, request)
    return None if reply is None else thread.found(reply)


def get_tuple(ctx: Context, config: RunnableConfig) -> Op[CheckpointTuple | None]:
    """Redis first (one round trip, with pending writes); Postgres on a miss, then warm.

    A decoded copy of each tuple read from Redis is kept in process; Redis answers "same"
    when the caller's copy is still current, so a hot read skips transfer and decoding.
    A read by id never warms: only the latest checkpoint may become a namespace's head in
    Redis. A miss on a namespace with entries not yet flushed drains the journal first, so
    Postgres is never older than what was acknowledged.
    """
    where = locate(config)
    marks = ctx.lineage.caller(config)
    tup = yield from _read(ctx, where)
    marks.read(
        where.thread_id,
        where.checkpoint_ns,
        None if tup is None else tup.config["configurable"]["checkpoint_id"],
        latest=where.checkpoint_id is None,
        # LangGraph's check whether a checkpoint it addressed was superseded
        check="checkpoint_id" in (config.get("configurable") or {}),
    )
    return tup


def _hot_read(
    ctx: Context, where: Location, found: Callable[[], HotRecord],
    decoded: CheckpointTuple | None = None,
) -> Op[CheckpointTuple | None]:
    """Decode the checkpoint Redis sent or the cache held (``found`` parses it; ``decoded``
    when it was decoded already) and keep it for the next read (`TupleCache.keep`);
    ``None`` when a frame fails: the caller reads Postgres."""
    try:
        record = found()
        tup = decoded or (yield from _decoded(ctx, lambda: _hot_tuple(ctx, where, record)))
    except Damaged as damage:
        logger.warning(
            "damaged hot copy of thread %r (%s); reading Postgres", where.thread_id, damage
        )
        return None
    ctx.cache.keep(where.thread_id, where.checkpoint_ns, record, tup)
    return tup


class _Early:
    """The copy of a held checkpoint that a "same" reply asks for, made while the read's
    round trip is in flight (`Hot.meanwhile`): unpickled, or decoded from the record held.
    Anything that fails leaves it empty, and the read makes its copy after the reply."""

    __slots__ = ("checkpoint_id", "ctx", "record", "value", "version", "where")

    def __init__(self, ctx: Context, where: Location, checkpoint_id: str, version: str) -> None:
        self.ctx, self.where, self.checkpoint_id, self.version = ctx, where, checkpoint_id, version
        self.record: HotRecord | None = None  # decoded from this record: to `keep`
        self.value: CheckpointTuple | None = None

    def __call__(self) -> None:
        where = self.where
        held = self.ctx.cache.peek(where.thread_id, where.checkpoint_ns, self.checkpoint_id,
                                   self.version)
        try:
            if isinstance(held, HotRecord):
                self.value, self.record = _hot_tuple(self.ctx, where, held), held
            elif held is not None:
                self.value = pickle.loads(held)
        except Exception:  # a type still to learn, a damaged frame: the read's own path
            self.value = self.record = None


def _read(ctx: Context, where: Location) -> Op[CheckpointTuple | None]:
    """The checkpoint ``where`` names (its namespace's latest without an id)."""
    keys = ctx.layout.thread(where.thread_id)
    ns = where.checkpoint_ns
    held_id, held_version = ctx.cache.held(where.thread_id, ns, where.checkpoint_id)
    request = _get(ctx, keys, ns, where.checkpoint_id or "", ctx.ttl_ms, held_id, held_version)
    early = _Early(ctx, where, held_id, held_version) if held_id else None
    reply = yield from _found(ctx, request if early is None else request.overlapping(early))
    if reply is not None and reply.reply is Reply.SAME:  # about the held id (get.lua)
        made = early.value if early is not None else None
        cached = ctx.cache.load(where.thread_id, ns, reply.checkpoint_id, held_version, made)
        in_flight = made is not None and cached is made  # copied while Redis answered
        record = early.record if in_flight and early is not None else cached
        tup = None if isinstance(cached, HotRecord) else cached
        if isinstance(record, HotRecord):  # a record held: decoded (in flight or now), kept
            tup = yield from _hot_read(ctx, where, lambda: record, made if in_flight else None)
        if tup is not None:
            return tup
        reply = yield from _found(ctx, _get(ctx, keys, ns, reply.checkpoint_id, ctx.ttl_ms))
    if reply is not None and reply.reply is Reply.HIT:
        tup = yield from _hot_read(ctx, where, reply.record)
        if tup is not None:
            return tup
    if reply is None and ctx.config.write_mode == "behind":
        raise bypassed(where.thread_id)
    if reply is not None and reply.dirty:
        yield from journal.flush(ctx, timeout=None, thread_ids=[where.thread_id])
    if where.checkpoint_id is None:
        query, params = (
            ctx.statements.get_latest_sql,
            {"thread_id": where.thread_id, "checkpoint_ns": ns},
        )
    else:
        query, params = (
            ctx.statements.get_by_id_sql,
            {
                "thread_id": where.thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": where.checkpoint_id,
            },
        )
    rows = (yield Cold.one(query, params, fetch=True, binary=True))[0]
    if not rows:
        if ctx.config.write_mode == "behind" and where.checkpoint_id is None and (
            reply is not None and reply.reply is Reply.MISS
        ):  # the run that reads this next writes a root: it may start the index in Redis
            yield from try_hot(ctx, thread.known_empty(keys, ns, reply.ticket))
        return None
    row = rows[0]
    tup = yield from _cold_tuple(ctx, row)
    if reply is not None and reply.reply in (Reply.MISS, Reply.BUSY) and (
        where.checkpoint_id is None
    ):
        yield from _warm(ctx, keys, row, "head", reply.ticket)
    elif reply is not None and reply.reply is Reply.HIT:  # a damaged hot copy: repair it
        yield from _warm(ctx, keys, row, "repair", b"")
    return tup


def _warm(
    ctx: Context, keys: ThreadKeys, row: dict[str, Any], mode: str, ticket: bytes
) -> Op[None]:
    """Load the row into Redis; `ticket` is the one the read's miss was handed (see
    get.lua): a Redis that lost it since refuses the warm."""
    ns = row["checkpoint_ns"]
    blobs, writes = _row_parts(row)
    refs: list[str] = []
    blob_args: list[str | bytes] = []
    for channel, version, frame in blobs:
        field = blob_field(channel, version)
        refs.append(field)
        blob_args += [field, frame]
    write_args: list[str | bytes] = ["v", ctx.tokens.new()]
    for w in writes:
        write_args += [write_field(w.task_id, w.idx), pack_write(w)]
    yield from try_hot(ctx, thread.warm(
        keys, ns, checkpoint_id=row["checkpoint_id"], now=int(time.time() * 1000),
        ttl=ctx.ttl_ms, frame=row["checkpoint"], metadata=row["metadata"],
        parent=row["parent_checkpoint_id"] or "", refs=json.dumps(refs),
        version=row["version"] or 0, mode=mode, ticket=ticket, blob_pairs=blob_args,
        fields=write_args,
    ))


def list_checkpoints(
    ctx: Context,
    config: RunnableConfig | None,
    *,
    filter: dict[str, Any] | None,
    before: RunnableConfig | None,
    limit: int | None,
) -> Op[list[CheckpointTuple]]:
    """History from Postgres in one query (filters and limit run in SQL, no N+1), merged
    with the thread's checkpoints Redis holds unflushed."""
    configurable = (config or {}).get("configurable") or {}
    thread_id = None
    if config is not None and configurable.get("thread_id") is not None:
        thread_id = locate(config).thread_id
    ns = configurable.get("checkpoint_ns")
    before_id = ((before or {}).get("configurable") or {}).get("checkpoint_id")
    if limit is not None and limit <= 0:
        return []
    params = {
        "thread_id": thread_id,
        "checkpoint_ns": ns,
        "checkpoint_id": configurable.get("checkpoint_id"),
        "before": before_id,
        "filter": json.dumps(filter) if filter else None,
        "limit": limit,
    }
    behind = ctx.config.write_mode == "behind"
    if behind and thread_id is None:
        yield from journal.flush(ctx, timeout=None)  # history of every thread: drain first
    # Redis before Postgres: an entry flushed between the two reads is in the second.
    unflushed = (yield from _unflushed(ctx, thread_id)) if behind and thread_id else []
    present = frozenset(k for k, v in params.items() if v is not None and k != "limit")
    query = ctx.statements.list_sql(present, limit is not None)
    bound = {k: v for k, v in params.items() if v is not None}
    rows = (yield Cold.one(query, bound, fetch=True, binary=True))[0]
    result = []
    for row in rows:
        result.append((yield from _cold_tuple(ctx, row)))
    if unflushed:
        result = _merge(result, [t for t in unflushed if _matches(t, params, filter)], limit)
    return result


def _unflushed(ctx: Context, thread_id: str) -> Op[list[CheckpointTuple]]:
    """The thread's checkpoints with entries the flusher has not moved yet, from Redis.
    When Redis lacks the hot copy of one of them (a flusher whose acknowledgement came
    late dropped the thread's copy), the thread's entries are drained first, so Postgres,
    read next, holds it."""
    keys = ctx.layout.thread(thread_id)
    while True:
        reply = yield from try_hot(ctx, thread.list_unflushed(keys))
        if reply is None:
            raise bypassed(thread_id)
        complete, records = thread.unflushed_records(reply)
        if complete:
            break
        yield from journal.flush(ctx, timeout=None, thread_ids=[thread_id])
    out = []
    for ns, record in records:
        where = Location(thread_id, unb64(ns), None)
        try:
            out.append((yield from _decoded(ctx, partial(_hot_tuple, ctx, where, record))))
        except Damaged as damage:
            raise corrupt(where, record.checkpoint_id, damage, "hot") from damage
    return out


def _matches(tup: CheckpointTuple, params: dict[str, Any], filter: dict[str, Any] | None) -> bool:
    configurable = tup.config["configurable"]
    cid = configurable["checkpoint_id"]
    return (
        params["checkpoint_ns"] in (None, configurable["checkpoint_ns"])
        and (params["checkpoint_id"] is None or cid == params["checkpoint_id"])
        and (params["before"] is None or cid < params["before"])
        and contains(dict(tup.metadata), filter or {})
    )


def contains(document: Any, pattern: Any) -> bool:
    """Postgres' ``jsonb @>`` on decoded JSON, so a filter matches an unflushed checkpoint
    exactly as it will match the flushed row: objects match key by key, an array contains
    another if each element of the other is contained in one of its own, scalars match
    equal scalars of the same JSON type. (Filters are objects, so jsonb's one exception, a
    top-level array containing a scalar, never applies.)"""
    if isinstance(pattern, dict):
        return isinstance(document, dict) and all(
            key in document and contains(document[key], value) for key, value in pattern.items()
        )
    if isinstance(pattern, list):
        return isinstance(document, list) and all(
            any(contains(item, wanted) for item in document) for wanted in pattern
        )
    return _scalar_equal(document, pattern)


def _scalar_equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return bool(a == b) and not isinstance(a, (dict, list)) and not isinstance(b, (dict, list))


def _merge(
    cold: list[CheckpointTuple], hot: list[CheckpointTuple], limit: int | None
) -> list[CheckpointTuple]:
    """Newest first; the hot copy wins (it may hold writes not flushed yet)."""

    def key(t: CheckpointTuple) -> tuple[str, str]:
        return t.config["configurable"]["checkpoint_ns"], t.config["configurable"]["checkpoint_id"]

    merged = {key(t): t for t in cold}
    merged.update({key(t): t for t in hot})
    ordered = sorted(merged.values(), key=lambda t: key(t)[1], reverse=True)
    return ordered if limit is None else ordered[:limit]
