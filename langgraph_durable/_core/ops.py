"""The saver's operations, written once as sans-I/O generators (see `requests`).

Write-through protocol for every mutation of a thread (put, put_writes, delete, copy,
prune): announce an intent in Redis, commit in Postgres, then apply the change to Redis
and clear the intent in one script. A reader that finds an intent reads Postgres, so Redis
never serves a state older than an acknowledged one, whichever step a crash interrupts.
When Redis cannot be reached the write goes to Postgres alone and, in the same
transaction, marks the thread's hot copy stale; the marks are applied before Redis is
trusted again (`recover_hot`).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    writes_sort_key,
)

from langgraph_durable._core import journal, ledger
from langgraph_durable._core.codec import FrameError, decode_frame, loads_metadata
from langgraph_durable._core.journal import pack_checkpoint_entry, pack_writes_entry
from langgraph_durable._core.keys import (
    ThreadKeys,
    blob_field,
    journal_key,
    parse_write_field,
    unb64,
    write_field,
)
from langgraph_durable._core.ledger_sql import statements as ledger_statements
from langgraph_durable._core.records import (
    Damaged,
    Location,
    StoredCheckpoint,
    StoredWrite,
    build_tuple,
    corrupt,
    encode_checkpoint,
    encode_writes,
    locate,
    pack_write,
    unpack_write,
)
from langgraph_durable._core.requests import Cold, Context, Hot, Op, Statement, new_version
from langgraph_durable.errors import ConfigurationError, TierUnavailableError

logger = logging.getLogger("langgraph_durable")

PRUNE_STRATEGIES = ("keep_latest", "delete")


# --------------------------------------------------------------------------- hot helpers


def _hot(ctx: Context, request: Hot) -> Op[Any]:
    """Run a hot request if the breaker allows; ``None`` when Redis is bypassed or fails."""
    if not ctx.breaker.allows():
        return None
    try:
        result = yield request
    except TierUnavailableError as exc:
        if exc.tier != "hot":
            raise
        if not ctx.breaker.is_open:
            logger.warning("hot tier unavailable, serving from Postgres alone: %s", exc.__cause__)
        ctx.breaker.failure()
        return None
    return result


def _announce(ctx: Context, keys: ThreadKeys) -> Op[str | None]:
    """Record a write intent; returns its token, or ``None`` if Redis is bypassed."""
    token = uuid.uuid4().hex
    done = yield from _hot(
        ctx, Hot("intent", [keys.intents], [token, ctx.deadline_ms, ctx.intent_ttl_ms])
    )
    return token if done is not None else None


def _stale_mark(ctx: Context, thread_id: str) -> Statement:
    return Statement(ctx.statements.mark_hot_stale_sql, {"thread_id": thread_id})


def _commit(ctx: Context, token: str | None, thread_ids: Sequence[str],
            statements: Sequence[Statement]) -> Op[list[Any]]:
    """Commit statements; if Redis was bypassed, mark the threads' hot copies stale too."""
    marks = [] if token is not None else [_stale_mark(ctx, t) for t in thread_ids]
    result: list[Any] = yield Cold((*statements, *marks))
    return result


def recover_hot(ctx: Context) -> Op[bool]:
    """Probe Redis after an outage; before trusting it again, drop the hot copy of every
    thread written while it was bypassed (Redis may have come back with older data).

    Returns whether the hot tier is usable again; on failure the breaker stays open.
    """
    try:
        yield Hot("journal_state", [journal_key(ctx.config.key_prefix)], [])
        dropped = 0
        while rows := (yield Cold.one(ctx.statements.take_hot_stale_sql, {}, fetch=True))[0]:
            for row in rows:
                keys = ThreadKeys(ctx.config.key_prefix, row["thread_id"])
                yield Hot("drop_thread", [keys.intents, keys.registry, keys.unflushed], [""])
            yield Cold.one(ctx.statements.clear_hot_stale_sql, {
                "thread_ids": [r["thread_id"] for r in rows],
                "before": max(r["at"] for r in rows),
            })
            dropped += len(rows)
    except TierUnavailableError as exc:
        logger.debug("hot tier still unavailable: %s", exc)
        ctx.breaker.failure()
        return False
    logger.warning("hot tier back; dropped the hot copy of %d threads written while it "
                   "was unavailable", dropped)
    ctx.breaker.recovered()
    return True


# ------------------------------------------------------------------------------- reads


def _hot_tuple(ctx: Context, where: Location, reply: list[Any]) -> CheckpointTuple:
    """Decode a GET script hit: ``hit, id, field, value, ..., "\\0blobs", field, frame...``."""
    checkpoint_id = reply[1].decode()
    fields: dict[bytes, bytes] = {}
    writes: list[StoredWrite] = []
    i = 2
    while reply[i] != b"\x00blobs":
        name, value = reply[i], reply[i + 1]
        if name.startswith(b"w:"):
            task_id, idx = parse_write_field(name.decode())
            writes.append(unpack_write(task_id, idx, value))
        else:
            fields[name] = value
        i += 2
    blobs = [
        (reply[j].split(b"\x00", 1)[0].decode(), reply[j + 1]) for j in range(i + 1, len(reply), 2)
    ]
    parent = fields.get(b"p", b"").decode() or None
    try:
        metadata = loads_metadata(fields[b"m"])
    except (FrameError, ValueError) as exc:
        raise Damaged("metadata", str(exc)) from exc
    return build_tuple(ctx.serde, where, checkpoint_id, parent, fields[b"c"], metadata, blobs,
                       writes)


def _row_parts(row: dict[str, Any]) -> tuple[list[tuple[str, bytes]], list[StoredWrite]]:
    blobs = list(zip(row["blob_channels"] or [], row["blobs"] or [], strict=True))
    writes = [
        StoredWrite(t, i, c, p, b)
        for t, i, c, p, b in zip(
            row["write_task_ids"] or [], row["write_idxs"] or [], row["write_channels"] or [],
            row["write_paths"] or [], row["write_blobs"] or [], strict=True,
        )
    ]
    return blobs, writes


def _cold_tuple(ctx: Context, row: dict[str, Any]) -> Op[CheckpointTuple]:
    """Decode a row; a damaged part is repaired from a good hot copy, or raises."""
    where = Location(row["thread_id"], row["checkpoint_ns"], None)
    blobs, writes = _row_parts(row)
    try:
        return build_tuple(ctx.serde, where, row["checkpoint_id"], row["parent_checkpoint_id"],
                           row["checkpoint"], row["metadata"], blobs, writes)
    except Damaged as damage:
        repaired = yield from _repair_cold(ctx, where, row, damage)
        if repaired is None:
            raise corrupt(where, row["checkpoint_id"], damage, "cold") from damage
        return repaired


def _repair_cold(ctx: Context, where: Location, row: dict[str, Any],
                 damage: Damaged) -> Op[CheckpointTuple | None]:
    keys = ThreadKeys(ctx.config.key_prefix, where.thread_id)
    ns = where.checkpoint_ns
    reply = yield from _hot(ctx, Hot(
        "get", [keys.intents, keys.index(ns), keys.blobs(ns), keys.registry],
        [keys.checkpoint_prefix(ns), row["checkpoint_id"], 0],
    ))
    if not reply or reply[0] != b"hit":
        return None
    try:
        good = _hot_tuple(ctx, where, reply)
    except Damaged:
        return None
    hot = _hot_parts(reply)
    statements = [Statement(ctx.statements.repair_checkpoint_sql, {
        "thread_id": where.thread_id, "checkpoint_ns": ns,
        "checkpoint_id": row["checkpoint_id"], "checkpoint": hot["c"],
    })]
    for field, frame in hot["blobs"]:
        channel, _, version = field.partition("\x00")
        statements.append(Statement(ctx.statements.repair_blob_sql, {
            "thread_id": where.thread_id, "checkpoint_ns": ns, "channel": channel,
            "version": version, "blob": frame,
        }))
    yield Cold(tuple(statements))
    logger.warning("repaired damaged %s of thread %r checkpoint %r from the hot tier",
                   damage.part, where.thread_id, row["checkpoint_id"])
    return good


def _hot_parts(reply: list[Any]) -> dict[str, Any]:
    i, fields = 2, {}
    while reply[i] != b"\x00blobs":
        fields[reply[i].decode()] = reply[i + 1]
        i += 2
    blobs = [(reply[j].decode(), reply[j + 1]) for j in range(i + 1, len(reply), 2)]
    return {"c": fields["c"], "blobs": blobs}


def get_tuple(ctx: Context, config: RunnableConfig) -> Op[CheckpointTuple | None]:
    """Redis first (one round trip, with pending writes); Postgres on a miss, then warm.

    A decoded copy of each tuple read from Redis is kept in process; Redis answers "same"
    when the caller's copy is still current, so a hot read skips transfer and decoding.
    """
    where = locate(config)
    keys = ThreadKeys(ctx.config.key_prefix, where.thread_id)
    ns = where.checkpoint_ns
    held_id, held_version = ctx.cache.held(where.thread_id, ns, where.checkpoint_id)
    reply = yield from _hot(ctx, Hot(
        "get", [keys.intents, keys.index(ns), keys.blobs(ns), keys.registry],
        [keys.checkpoint_prefix(ns), where.checkpoint_id or "", ctx.ttl_ms, held_id,
         held_version],
    ))
    if reply is not None and reply[0] == b"same":
        cached: CheckpointTuple | None = ctx.cache.load(
            where.thread_id, ns, reply[1].decode(), held_version)
        if cached is not None:
            return cached
        reply = yield from _hot(ctx, Hot(
            "get", [keys.intents, keys.index(ns), keys.blobs(ns), keys.registry],
            [keys.checkpoint_prefix(ns), reply[1].decode(), ctx.ttl_ms, "", ""]))
    if reply is not None and reply[0] == b"hit":
        try:
            tup = _hot_tuple(ctx, where, reply)
        except Damaged as damage:
            logger.warning("damaged hot copy of thread %r (%s); reading Postgres",
                           where.thread_id, damage)
        else:
            ctx.cache.store(where.thread_id, ns, reply[1].decode(), _field(reply, b"v"), tup)
            return tup
    if where.checkpoint_id is None:
        query, params = ctx.statements.get_latest_sql, {"thread_id": where.thread_id,
                                                        "checkpoint_ns": ns}
    else:
        query, params = ctx.statements.get_by_id_sql, {
            "thread_id": where.thread_id, "checkpoint_ns": ns,
            "checkpoint_id": where.checkpoint_id}
    rows = (yield Cold.one(query, params, fetch=True))[0]
    if not rows:
        return None
    tup = yield from _cold_tuple(ctx, rows[0])
    if reply is not None:
        yield from _warm(ctx, keys, rows[0])
    return tup


def _field(reply: list[Any], name: bytes) -> str:
    """A field of a GET reply's checkpoint hash ("" if absent)."""
    i = 2
    while reply[i] != b"\x00blobs":
        if reply[i] == name:
            return str(reply[i + 1].decode())
        i += 2
    return ""


def _warm(ctx: Context, keys: ThreadKeys, row: dict[str, Any]) -> Op[None]:
    ns = row["checkpoint_ns"]
    blobs, writes = _row_parts(row)
    refs: list[str] = []
    blob_args: list[str | bytes] = []
    for (channel, frame), version in zip(blobs, row["blob_versions"] or [], strict=True):
        field = blob_field(channel, version)
        refs.append(field)
        blob_args += [field, frame]
    write_args: list[str | bytes] = ["v", new_version()]
    for w in writes:
        write_args += [write_field(w.task_id, w.idx), pack_write(w)]
    yield from _hot(ctx, Hot(
        "warm",
        [keys.intents, keys.index(ns), keys.blobs(ns), keys.checkpoint(ns, row["checkpoint_id"]),
         keys.registry],
        [int(time.time() * 1000), ctx.ttl_ms, row["checkpoint_id"], row["checkpoint"],
         json.dumps(row["metadata"], separators=(",", ":"), ensure_ascii=False),
         row["parent_checkpoint_id"] or "", json.dumps(refs), len(blobs), *blob_args,
         *write_args],
    ))


def list_checkpoints(
    ctx: Context,
    config: RunnableConfig | None,
    *,
    filter: dict[str, Any] | None,
    before: RunnableConfig | None,
    limit: int | None,
) -> Op[list[CheckpointTuple]]:
    """History from Postgres in one query: filters and limit run in SQL, no N+1."""
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
    present = frozenset(k for k, v in params.items() if v is not None and k != "limit")
    query = ctx.statements.list_sql(present, limit is not None)
    rows = (yield Cold.one(query, {k: v for k, v in params.items() if v is not None},
                          fetch=True))[0]
    result = []
    for row in rows:
        result.append((yield from _cold_tuple(ctx, row)))
    if behind and thread_id is not None:
        unflushed = yield from _unflushed(ctx, thread_id)
        result = _merge(result, [t for t in unflushed if _matches(t, params, filter)], limit)
    return result


def _unflushed(ctx: Context, thread_id: str) -> Op[list[CheckpointTuple]]:
    """The thread's checkpoints with entries the flusher has not moved yet, from Redis."""
    keys = ThreadKeys(ctx.config.key_prefix, thread_id)
    records = yield from _hot(ctx, Hot("list_unflushed", [keys.unflushed], [keys.base]))
    out = []
    for rec in records or []:
        where = Location(thread_id, unb64(rec[0]), None)
        out.append(_hot_tuple(ctx, where, [b"hit", *rec[1:]]))
    return out


def _matches(tup: CheckpointTuple, params: dict[str, Any], filter: dict[str, Any] | None) -> bool:
    configurable = tup.config["configurable"]
    cid = configurable["checkpoint_id"]
    return (
        params["checkpoint_ns"] in (None, configurable["checkpoint_ns"])
        and (params["checkpoint_id"] is None or cid == params["checkpoint_id"])
        and (params["before"] is None or cid < params["before"])
        and all(tup.metadata.get(k) == v for k, v in (filter or {}).items())
    )


def _merge(cold: list[CheckpointTuple], hot: list[CheckpointTuple],
           limit: int | None) -> list[CheckpointTuple]:
    """Newest first; the hot copy wins (it may hold writes not flushed yet)."""
    def key(t: CheckpointTuple) -> tuple[str, str]:
        return t.config["configurable"]["checkpoint_ns"], t.config["configurable"]["checkpoint_id"]

    merged = {key(t): t for t in cold}
    merged.update({key(t): t for t in hot})
    ordered = sorted(merged.values(), key=lambda t: key(t)[1], reverse=True)
    return ordered if limit is None else ordered[:limit]


# ------------------------------------------------------------------------------ writes


def put(ctx: Context, config: RunnableConfig, checkpoint: Checkpoint,
        metadata: CheckpointMetadata, new_versions: ChannelVersions) -> Op[RunnableConfig]:
    stored = encode_checkpoint(ctx.serde, config, checkpoint, metadata, new_versions)
    where = stored.where
    keys = ThreadKeys(ctx.config.key_prefix, where.thread_id)
    if ctx.config.write_mode == "behind":
        entry = yield from _hot(ctx, _put_hot(keys, stored, "", -1, journal=(
            journal_key(ctx.config.key_prefix), pack_checkpoint_entry(stored),
            ctx.config.max_unflushed)))
        if entry is not None:
            return where.config(stored.checkpoint_id)
    token = yield from _announce(ctx, keys)
    yield from _commit(ctx, token, [where.thread_id], [_put_statement(ctx, stored)])
    if token is not None:
        yield from _hot(ctx, _put_hot(keys, stored, token, ctx.ttl_ms))
    return where.config(stored.checkpoint_id)


def _put_statement(ctx: Context, stored: StoredCheckpoint) -> Statement:
    return Statement(ctx.statements.put_checkpoint_sql, {
        "thread_id": stored.where.thread_id,
        "checkpoint_ns": stored.where.checkpoint_ns,
        "checkpoint_id": stored.checkpoint_id,
        "parent_id": stored.parent_id,
        "run_id": stored.run_id,
        "checkpoint": stored.frame,
        "channel_versions": stored.channel_versions,
        "metadata": stored.metadata,
        "channels": [b[0] for b in stored.blobs],
        "versions": [b[1] for b in stored.blobs],
        "blobs": [b[2] for b in stored.blobs],
    })


Journal = tuple[str, bytes, int]  # (journal key, entry payload, bound)


def _put_hot(keys: ThreadKeys, stored: StoredCheckpoint, token: str, ttl: int,
             journal: Journal | None = None) -> Hot:
    ns = stored.where.checkpoint_ns
    hot_keys = [keys.intents, keys.index(ns), keys.blobs(ns),
                keys.checkpoint(ns, stored.checkpoint_id), keys.registry]
    args: list[str | bytes | int] = [
        token, ttl, stored.checkpoint_id, stored.frame, stored.metadata,
        stored.parent_id or "", json.dumps(stored.refs), len(stored.blobs)]
    for channel, version, frame in stored.blobs:
        args += [blob_field(channel, version), frame]
    if journal is None:
        return Hot("put", hot_keys, [*args, new_version()])
    key, payload, bound = journal
    member = keys.unflushed_member(ns, stored.checkpoint_id)
    return Hot("put_behind", [*hot_keys, key, keys.unflushed],
               [*args, payload, member, bound, new_version()])


def put_writes(ctx: Context, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
               task_id: str, task_path: str) -> Op[None]:
    where = locate(config, need_id=True)
    assert where.checkpoint_id is not None
    stored = encode_writes(ctx.serde, where, writes, task_id, task_path)
    if not stored:
        return None
    keys = ThreadKeys(ctx.config.key_prefix, where.thread_id)
    if ctx.config.write_mode == "behind":
        entry = yield from _hot(ctx, _writes_hot(keys, where, stored, "", -1, journal=(
            journal_key(ctx.config.key_prefix), pack_writes_entry(where, stored),
            ctx.config.max_unflushed)))
        if entry is not None:
            return None
    token = yield from _announce(ctx, keys)
    yield from _commit(ctx, token, [where.thread_id], [_writes_statement(ctx, where, stored)])
    if token is not None:
        yield from _hot(ctx, _writes_hot(keys, where, stored, token, ctx.ttl_ms))
    return None


def _writes_statement(ctx: Context, where: Location, stored: list[StoredWrite]) -> Statement:
    special = [w for w in stored if w.special]
    ordinary = [w for w in stored if not w.special]
    return Statement(ctx.statements.put_writes_sql, {
        "thread_id": where.thread_id,
        "checkpoint_ns": where.checkpoint_ns,
        "checkpoint_id": where.checkpoint_id,
        "task_id": stored[0].task_id,
        "task_path": stored[0].task_path,
        "idxs": [w.idx for w in ordinary],
        "channels": [w.channel for w in ordinary],
        "blobs": [w.frame for w in ordinary],
        "s_idxs": [w.idx for w in special],
        "s_channels": [w.channel for w in special],
        "s_blobs": [w.frame for w in special],
    })


def _writes_hot(keys: ThreadKeys, where: Location, stored: list[StoredWrite], token: str,
                ttl: int, journal: Journal | None = None) -> Hot:
    assert where.checkpoint_id is not None
    hot_keys = [keys.intents, keys.checkpoint(where.checkpoint_ns, where.checkpoint_id),
                keys.registry]
    args: list[str | bytes | int] = [token, ttl, len(stored)]
    for w in stored:
        args += [write_field(w.task_id, w.idx), pack_write(w), "r" if w.special else "n"]
    if journal is None:
        return Hot("put_writes", hot_keys, [*args, new_version()])
    key, payload, bound = journal
    member = keys.unflushed_member(where.checkpoint_ns, where.checkpoint_id)
    return Hot("put_writes_behind", [*hot_keys, key, keys.unflushed],
               [*args, payload, member, bound, new_version()])


# --------------------------------------------------------------------------- lifecycle


def _settle(ctx: Context) -> Op[None]:
    """Write-behind: move every journal entry to Postgres before changing whole threads,
    so a late flush cannot bring deleted rows back."""
    if ctx.config.write_mode == "behind":
        yield from journal.flush(ctx, timeout=None)
    return None


def _mutate_threads(ctx: Context, thread_ids: Sequence[str],
                    statements: Sequence[Statement]) -> Op[list[Any]]:
    """Commit statements that change whole threads; their hot copies are dropped after."""
    keyed = [ThreadKeys(ctx.config.key_prefix, t) for t in thread_ids]
    tokens = []
    for keys in keyed:
        tokens.append((yield from _announce(ctx, keys)))
    bypassed = [t for t, tok in zip(thread_ids, tokens, strict=True) if tok is None]
    marks = [_stale_mark(ctx, t) for t in bypassed]
    result: list[Any] = yield Cold((*statements, *marks))
    for keys, token in zip(keyed, tokens, strict=True):
        if token is not None:
            yield from _hot(ctx, Hot("drop_thread", [keys.intents, keys.registry,
                                                     keys.unflushed], [token]))
    return result


def delete_threads(ctx: Context, thread_ids: Sequence[str], *,
                   keep_ledger: bool = False) -> Op[None]:
    ids = [locate({"configurable": {"thread_id": t}}).thread_id for t in thread_ids]
    ledger = [] if keep_ledger else [
        Statement(ledger_statements(ctx.config.schema).delete_threads, {"thread_ids": ids})]
    if ids:
        yield from _settle(ctx)
        yield from _mutate_threads(ctx, ids, [
            Statement(ctx.statements.delete_threads_sql, {"thread_ids": ids}),
            *ledger,
        ])
    return None


def delete_for_runs(ctx: Context, run_ids: Sequence[str]) -> Op[None]:
    runs = [str(r) for r in run_ids]
    if not runs:
        return None
    yield from _settle(ctx)
    rows = (yield Cold.one(ctx.statements.threads_of_runs_sql, {"run_ids": runs},
                          fetch=True))[0]
    threads = [r["thread_id"] for r in rows]
    if threads:
        yield from _mutate_threads(ctx, threads, [
            Statement(ctx.statements.delete_for_runs_sql, {"run_ids": runs}),
            Statement(ctx.statements.delete_orphan_blobs_sql, {"thread_ids": threads}),
        ])
    return None


def copy_thread(ctx: Context, source: str, target: str) -> Op[None]:
    src = locate({"configurable": {"thread_id": source}}).thread_id
    dst = locate({"configurable": {"thread_id": target}}).thread_id
    if src == dst:
        raise ConfigurationError("copy_thread: source and target are the same thread")
    yield from _settle(ctx)
    yield from _mutate_threads(ctx, [dst], [
        Statement(ctx.statements.copy_thread_sql, {"source": src, "target": dst}),
        Statement(ledger_statements(ctx.config.schema).copy_thread,
                  {"source": src, "target": dst}),
    ])
    return None


def prune(ctx: Context, thread_ids: Sequence[str], strategy: str) -> Op[None]:
    """Keep the latest checkpoint of each namespace, with every ancestor a `DeltaChannel`
    needs to rebuild its value (back to its nearest stored snapshot) — or delete all."""
    if strategy not in PRUNE_STRATEGIES:
        raise ConfigurationError(f"prune strategy must be one of {PRUNE_STRATEGIES}, "
                                 f"not {strategy!r}")
    ids = [locate({"configurable": {"thread_id": t}}).thread_id for t in thread_ids]
    if not ids:
        return None
    if strategy == "delete":
        yield from delete_threads(ctx, ids)
        return None
    yield from _settle(ctx)
    rows = (yield Cold.one(ctx.statements.prune_scan_sql, {"thread_ids": ids},
                          fetch=True))[0]
    keep = list(_keep_set(rows))
    yield from _mutate_threads(ctx, ids, [
        Statement(ctx.statements.prune_delete_sql, {
            "thread_ids": ids,
            "keep_threads": [k[0] for k in keep],
            "keep_ns": [k[1] for k in keep],
            "keep_ids": [k[2] for k in keep],
        }, fetch=True),
        Statement(ctx.statements.delete_orphan_blobs_sql, {"thread_ids": ids}),
    ])
    return None


def _keep_set(rows: list[dict[str, Any]]) -> Iterator[tuple[str, str, str]]:
    by_ns: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_ns.setdefault((row["thread_id"], row["checkpoint_ns"]), {})[row["checkpoint_id"]] = row
    for (thread_id, ns), checkpoints in by_ns.items():
        latest = checkpoints[max(checkpoints)]
        yield thread_id, ns, latest["checkpoint_id"]
        delta_channels = set((latest["counters"] or {}).keys())
        current: dict[str, Any] | None = latest
        # Walk up until every delta channel found its stored value (its seed).
        while delta_channels and current is not None:
            delta_channels -= set(current["stored_channels"] or [])
            parent = current["parent_checkpoint_id"]
            current = checkpoints.get(parent) if parent else None
            if delta_channels and current is not None:
                yield thread_id, ns, current["checkpoint_id"]


# ------------------------------------------------------------------------ delta channels


def delta_channel_history(ctx: Context, config: RunnableConfig,
                          channels: Sequence[str]) -> Op[dict[str, DeltaChannelHistory]]:
    """Per-channel writes and seed along the parent chain, in two or three round trips
    whatever the chain's length (the default walks one `get_tuple` per ancestor)."""
    if not channels:
        return {}
    if ctx.config.write_mode == "behind":
        try:  # the walk below reads Postgres: bring it up to date first
            yield from journal.flush(ctx, timeout=None)
        except TierUnavailableError as exc:
            if exc.tier != "cold":
                raise
            return (yield from _walk_delta_history(ctx, config, channels))
    where = locate(config)
    target = where.checkpoint_id
    if target is None:
        latest = yield from get_tuple(ctx, config)
        if latest is None:
            return {ch: {"writes": []} for ch in channels}
        target = latest.config["configurable"]["checkpoint_id"]
    base = {"thread_id": where.thread_id, "checkpoint_ns": where.checkpoint_ns}
    chain = (yield Cold.one(ctx.statements.delta_chain_sql,
                            {**base, "checkpoint_id": target, "channels": list(channels)},
                            fetch=True))[0]
    remaining = set(channels)
    walked: dict[str, list[str]] = {ch: [] for ch in channels}
    seed_at: dict[str, str] = {}
    for row in chain:
        if not remaining:
            break
        for ch in remaining:
            walked[ch].append(row["checkpoint_id"])
        for ch in set(row["stored"] or []) & remaining:
            seed_at[ch] = row["checkpoint_id"]
            remaining.discard(ch)
    needed_ids = sorted({cid for ids in walked.values() for cid in ids})
    writes_rows = []
    if needed_ids:
        writes_rows = (yield Cold.one(ctx.statements.delta_writes_sql, {
            **base, "checkpoint_ids": needed_ids, "channels": list(channels)}, fetch=True))[0]
    seeds: dict[str, Any] = {}
    if seed_at:
        seed_rows = (yield Cold.one(ctx.statements.delta_seeds_sql, {
            **base, "seed_ids": list(seed_at.values()), "seed_channels": list(seed_at)},
            fetch=True))[0]
        for row in seed_rows:
            seeds[row["channel"]] = _load_frame(ctx, where, row["blob"], row["channel"])
    order = {cid: depth for depth, cid in enumerate(r["checkpoint_id"] for r in chain)}
    result: dict[str, DeltaChannelHistory] = {}
    for ch in channels:
        on_path = set(walked[ch])
        mine = [r for r in writes_rows if r["channel"] == ch and r["checkpoint_id"] in on_path]
        # oldest ancestor first; within one checkpoint, live execution's order
        mine.sort(key=lambda r: (-order[r["checkpoint_id"]],
                                 writes_sort_key(r["task_path"], r["task_id"], r["idx"])))
        entry: DeltaChannelHistory = {"writes": [
            (r["task_id"], ch, _load_frame(ctx, where, r["blob"], ch)) for r in mine
        ]}
        if ch in seeds:
            entry["seed"] = seeds[ch]
        result[ch] = entry
    return result


def _walk_delta_history(ctx: Context, config: RunnableConfig,
                        channels: Sequence[str]) -> Op[dict[str, DeltaChannelHistory]]:
    """LangGraph's reference walk, one `get_tuple` per ancestor: served by Redis when
    Postgres is unreachable in write-behind mode."""
    collected: dict[str, list[PendingWrite]] = {c: [] for c in channels}
    seeds: dict[str, Any] = {}
    remaining = set(channels)
    target = yield from get_tuple(ctx, config)
    cursor = target.parent_config if target else None
    while cursor is not None and remaining:
        tup = yield from get_tuple(ctx, cursor)
        if tup is None:
            break
        for write in reversed(tup.pending_writes or []):
            if write[1] in remaining:
                collected[write[1]].append(write)
        for ch in [c for c in remaining if c in tup.checkpoint["channel_values"]]:
            seeds[ch] = tup.checkpoint["channel_values"][ch]
            remaining.discard(ch)
        cursor = tup.parent_config
    result: dict[str, DeltaChannelHistory] = {}
    for ch in channels:
        entry: DeltaChannelHistory = {"writes": list(reversed(collected[ch]))}
        if ch in seeds:
            entry["seed"] = seeds[ch]
        result[ch] = entry
    return result


def _load_frame(ctx: Context, where: Location, frame: bytes, channel: str) -> Any:
    try:
        return ctx.serde.loads_typed(decode_frame(frame))
    except (FrameError, Exception) as exc:
        raise corrupt(where, where.checkpoint_id or "", Damaged("blob", str(exc), channel),
                      "cold") from exc


PendingWrites = list[PendingWrite]


# ------------------------------------------------------------------------------ health


def health(ctx: Context) -> Op[dict[str, Any]]:
    """Reachability, breaker, flush backlog and lag, latency per tier and ledger outcome
    counts, without raising when a tier is down."""
    report: dict[str, Any] = {"write_mode": ctx.config.write_mode}
    try:
        oldest, _, length = yield from journal.journal_state(ctx)
        hot_ok = True
    except TierUnavailableError:
        oldest, length, hot_ok = "", 0, False
    try:
        report["ledger"] = yield from ledger.counts(ctx, None)
        cold_ok = True
    except TierUnavailableError:
        cold_ok = False
    lag = max(0.0, time.time() - journal.stream_order(oldest)[0] / 1000) if oldest else 0.0
    report["hot"] = {"reachable": hot_ok, "breaker": ctx.breaker.state(),
                     "trips": ctx.breaker.trips, "recoveries": ctx.breaker.recoveries}
    report["cold"] = {"reachable": cold_ok}
    report["flush"] = {"unflushed": length, "lag_seconds": round(lag, 3),
                       "policy": ctx.config.flush_policy}
    report["latency_ms"] = ctx.latencies.percentiles()
    return report
