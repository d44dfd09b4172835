"""Writes and whole-thread changes: put, put_writes (write-through or write-behind),
delete, delete_for_runs and copy (prune: `_core.prune`).

One history per thread: a ``put`` that extends the head its run read (`_core.lineage`)
commits only if its parent is still the namespace's head — in Postgres for write-through,
in Redis for write-behind — and raises `ThreadConflictError` otherwise. A put from an
explicitly addressed checkpoint (time travel, ``update_state`` on a past config) is a fork
the caller asked for, and is never refused.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
)

from langgraph_durable._core import journal, stored_types
from langgraph_durable._core.context import Context
from langgraph_durable._core.hot import (
    announce,
    bypassed,
    commit,
    drop,
    stale_marks,
    try_hot,
)
from langgraph_durable._core.journal import (
    pack_checkpoint_entry,
    pack_writes_entry,
    seal_entry,
)
from langgraph_durable._core.keys import (
    ThreadKeys,
    blob_field,
    write_field,
)
from langgraph_durable._core.records import (
    Location,
    StoredCheckpoint,
    StoredWrite,
    encode_checkpoint,
    encode_writes,
    locate,
    pack_write,
)
from langgraph_durable._core.requests import Cold, Hot, Op, Statement
from langgraph_durable._core.reseal import copy_statement
from langgraph_durable._core.scripts import thread as scripts
from langgraph_durable._core.scripts.registry import Reply
from langgraph_durable._core.scripts.thread import HotRecord, Journal, release
from langgraph_durable._core.sql.ledger import statements as ledger_statements
from langgraph_durable.errors import (
    ConfigurationError,
    ThreadConflictError,
    TierUnavailableError,
    WriteRejectedError,
)

# (intent token, ttl, the committed row) -> the write-through update
ThroughCall = Callable[[str, int, dict[str, Any]], Hot]
# the journal entry -> the write-behind script
BehindCall = Callable[[Journal], Hot]


def put(
    ctx: Context,
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    new_versions: ChannelVersions,
) -> Op[RunnableConfig]:
    stored = encode_checkpoint(
        ctx.codec, config, checkpoint, metadata, new_versions, ctx.config.max_checkpoint_bytes
    )
    where, marks = stored.where, ctx.lineage.caller(config)
    yield from stored_types.record(ctx, stored.types, where)
    cas = marks.extends(where.thread_id, where.checkpoint_ns, stored.parent_id)
    keys, ns = ctx.layout.thread(where.thread_id), where.checkpoint_ns
    token_v = ctx.tokens.new()
    fields = _checkpoint_fields(stored, ctx.config.hot_checkpoints, token_v)
    rows = yield from _write(
        ctx,
        keys,
        where,
        lambda: _put_statement(ctx, stored, cas),
        lambda: seal_entry(ctx, pack_checkpoint_entry(stored)),
        through=lambda token, ttl, row: scripts.put_through(
            keys, ns, fields, token=token, ttl=ttl, version=int(row["version"]),
            head=row["head"] == stored.checkpoint_id, writes=row["has_writes"]),
        behind=lambda journal: scripts.put_behind(keys, ns, fields, extends=cas,
                                                  journal=journal),
    )
    if rows == []:
        yield from _conflict(ctx, stored.where, stored.parent_id, None, stored.checkpoint_id)
    marks.wrote(where.thread_id, where.checkpoint_ns, stored.checkpoint_id)
    _hold_written(ctx, stored, token_v)
    return where.config(stored.checkpoint_id)


def _hold_written(ctx: Context, stored: StoredCheckpoint, token_v: str) -> None:
    """Hold the checkpoint as Redis holds it at ``token_v`` (`TupleCache.wrote`)."""
    fields = {b"c": stored.frame, b"m": stored.metadata.encode(),
              b"p": (stored.parent_id or "").encode(), b"v": token_v.encode()}
    ctx.cache.wrote(stored.where.thread_id, stored.where.checkpoint_ns,
                    HotRecord(stored.checkpoint_id, fields, [], []), stored.parent_id,
                    stored.refs, {blob_field(c, v): frame for c, v, frame in stored.blobs})


def _write(
    ctx: Context,
    keys: ThreadKeys,
    where: Location,
    statement: Callable[[], Statement],
    entry: Callable[[], bytes],
    *,
    through: ThroughCall,
    behind: BehindCall,
    fallback: Callable[[], Statement] | None = None,
) -> Op[list[Any] | None]:
    """The one write protocol of `put` and `put_writes`; returns the statement's rows
    (``None`` when the write went to Redis alone). ``fallback``: committed instead when
    ``statement`` returned no row (it stored nothing, see `PUT_ORDINARY_WRITES_SQL`).

    Write-behind: one hot script stores the change and journals ``entry`` (`_journaled`);
    when Redis sends it through Postgres, it goes on as written through, and waits for
    its update. Write-through: intent, Postgres commit, then the hot script with the
    committed version (which clears the intent), sent without waiting for its reply: until
    it lands, the intent sends readers to Postgres (`_committed`).
    """
    written_behind = ctx.config.write_mode == "behind"
    if written_behind and (yield from _journaled(ctx, where, entry, behind)):
        return None
    return (yield from _committed(ctx, keys, where, statement, through,
                                  behind=written_behind, fallback=fallback))


def _journaled(ctx: Context, where: Location, entry: Callable[[], bytes],
               behind: BehindCall) -> Op[bool]:
    """Whether Redis stored and journaled the write. It refuses one that must go through
    Postgres (its index is not hot, or a write through Postgres is in flight on the
    thread), and raises rather than write Postgres under entries Redis may still hold
    while Redis is bypassed."""
    layout = ctx.layout
    shard = layout.shard(where.thread_id)
    journal_entry = Journal(  # the bounds are split evenly over the shards
        layout.journal(shard),
        layout.journal_bytes(shard),
        entry(),
        -(-ctx.config.max_unflushed // layout.shards),
        -(-ctx.config.max_unflushed_bytes // layout.shards),
    )
    reply = yield from try_hot(ctx, behind(journal_entry))
    if reply is None:
        raise bypassed(where.thread_id)
    refused = scripts.refusal(reply, journal_entry)
    if refused is None:
        return True
    if refused[0] is Reply.CONFLICT:
        yield from _conflict(ctx, where, where.checkpoint_id, refused[1])
    return False  # "cold": through Postgres (the intent tells whether to drain first)


def _committed(ctx: Context, keys: ThreadKeys, where: Location,
               statement: Callable[[], Statement], through: ThroughCall, *,
               behind: bool, fallback: Callable[[], Statement] | None) -> Op[list[Any]]:
    """Intent, Postgres commit, then the update of the committed rows (or the intent's
    release when the statement stored nothing). ``behind``: a write-behind write Redis
    sent through Postgres, which fails closed without an intent and waits for its update
    (else the thread's next write would find the intent and go through Postgres too)."""
    token = yield from announce(ctx, keys, ns=where.checkpoint_ns)
    if token is None and behind:
        # no intent, so other savers' write-behind writes of the thread would go on in
        # Redis, unordered with this commit: fail closed, as with Redis bypassed
        raise bypassed(where.thread_id)
    try:
        rows: list[dict[str, Any]] = (
            yield from commit(ctx, token, [keys.thread_id], [statement()])
        )[0]
        if not rows and fallback is not None:
            rows = (yield from commit(ctx, token, [keys.thread_id], [fallback()]))[0]
    except WriteRejectedError:
        if token is not None:
            yield from try_hot(ctx, release(keys, token))
        raise
    if token is not None:
        update = through(token, ctx.ttl_ms, rows[0]) if rows else release(keys, token)
        yield from try_hot(ctx, update if behind else update.sent_only())
    return rows


def _conflict(
    ctx: Context, where: Location, expected: str | None, head: str | None,
    refused: str | None = None,
) -> Op[None]:
    """Raise `ThreadConflictError` for a write that does not extend the head: a put whose
    parent is no longer the head, or a write to a history the thread's delete removed.
    ``refused``: the checkpoint a refused put would have stored; when its history was
    deleted, what was stored for it (its writes, which may come first) is removed. A head
    learned from Postgres (``head`` None) is told to Redis, whose copy of the namespace may
    end before it (`stale_index.lua`)."""
    rows = (
        yield Cold.one(
            ctx.statements.head_sql,
            {"thread_id": where.thread_id, "checkpoint_ns": where.checkpoint_ns,
             "checkpoint_id": expected},
            fetch=True,
        )
    )[0]
    found = rows[0] if rows else {}
    if found.get("deleted"):
        if refused is not None:
            gone = {"thread_id": where.thread_id, "checkpoint_ns": where.checkpoint_ns,
                    "checkpoint_id": refused}
            # not `deletes`: the thread's other namespaces (a new run's) get their heads
            # rebuilt above the tombstone, or Redis could never warm them again
            yield from mutate_threads(ctx, [where.thread_id], [
                Statement(ctx.statements.extend_deleted_sql, gone),
                Statement(ctx.statements.forget_deleted_sql, gone)])
        raise ThreadConflictError(
            f"thread {where.thread_id!r} was deleted while this run worked: checkpoint "
            f"{expected!r} (namespace {where.checkpoint_ns!r}) is gone, and nothing this "
            "run writes to it is stored. Start a new run to use the thread again",
            thread_id=where.thread_id,
            checkpoint_ns=where.checkpoint_ns,
            expected=expected,
            deleted=True,
        )
    if head is None and found.get("head"):  # Postgres refused the put: see stale_index.lua
        yield from try_hot(ctx, scripts.stale_index(
            ctx.layout.thread(where.thread_id), where.checkpoint_ns, found["head"]))
    head, run_id = head or found.get("head"), found.get("run_id")
    read = "found it empty" if expected is None else f"read checkpoint {expected!r}"
    raise ThreadConflictError(
        f"thread {where.thread_id!r} (namespace {where.checkpoint_ns!r}) moved on while this "
        f"run worked: it {read}, and the head is now {head!r}"
        + (f", written by run {run_id!r}" if run_id else "")
        + ". Two runs were writing one thread at once; re-read the thread (or pass an "
        "explicit checkpoint_id to fork it) and run again",
        thread_id=where.thread_id,
        checkpoint_ns=where.checkpoint_ns,
        expected=expected,
        head=head,
        run_id=run_id,
    )


def _put_statement(ctx: Context, stored: StoredCheckpoint, cas: bool) -> Statement:
    return Statement(
        ctx.statements.put_checkpoint_sql,
        {
            "thread_id": stored.where.thread_id,
            "checkpoint_ns": stored.where.checkpoint_ns,
            "checkpoint_id": stored.checkpoint_id,
            "parent_id": stored.parent_id,
            "run_id": stored.run_id,
            "cas": cas,
            "checkpoint": stored.frame,
            "channel_versions": stored.channel_versions,
            "metadata": stored.metadata,
            "channels": [b[0] for b in stored.blobs],
            "versions": [b[1] for b in stored.blobs],
            "blobs": [b[2] for b in stored.blobs],
        },
        fetch=True,
    )


def _checkpoint_fields(stored: StoredCheckpoint, keep: int,
                       token_v: str) -> scripts.CheckpointFields:
    blob_pairs: list[str | bytes] = []
    for channel, version, frame in stored.blobs:
        blob_pairs += [blob_field(channel, version), frame]
    return scripts.CheckpointFields(
        checkpoint_id=stored.checkpoint_id, frame=stored.frame, metadata=stored.metadata,
        parent=stored.parent_id or "", refs=json.dumps(stored.refs), blob_pairs=blob_pairs,
        keep=keep, token_v=token_v)


def put_writes(
    ctx: Context,
    config: RunnableConfig,
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str,
) -> Op[None]:
    where = locate(config, need_id=True)
    stored = encode_writes(ctx.codec, where, writes, task_id, task_path)
    if not stored:
        return None
    yield from stored_types.record(ctx, set().union(*(w.types for w in stored)), where)
    keys, ns, checkpoint_id = (ctx.layout.thread(where.thread_id), where.checkpoint_ns,
                               where.checkpoint_id)
    assert checkpoint_id is not None  # locate(need_id=True)
    fields = write_fields(stored)
    # the form for ordinary writes to a namespace with a head row first, unless the run
    # found the namespace empty and put nothing there yet (its writes come first)
    common = not any(w.special for w in stored) and not ctx.lineage.caller(config).extends(
        where.thread_id, where.checkpoint_ns, None)
    rows = yield from _write(
        ctx, keys, where, lambda: _writes_statement(ctx, where, stored, common=common),
        lambda: seal_entry(ctx, pack_writes_entry(where, stored)),
        fallback=(lambda: _writes_statement(ctx, where, stored)) if common else None,
        through=lambda token, ttl, row: scripts.put_writes_through(
            keys, ns, checkpoint_id, fields, token=token, ttl=ttl, token_v=ctx.tokens.new(),
            version=int(row["version"]), stored=row["checkpoint_stored"]),
        behind=lambda journal: scripts.put_writes_behind(
            keys, ns, checkpoint_id, fields, token_v=ctx.tokens.new(), journal=journal),
    )
    if rows == []:  # Postgres stored nothing: the checkpoint's history was deleted
        yield from _conflict(ctx, where, where.checkpoint_id, None)
    return None


def _writes_statement(ctx: Context, where: Location, stored: list[StoredWrite], *,
                      common: bool = False) -> Statement:
    """``common``: the form for ordinary writes (`PUT_ORDINARY_WRITES_SQL`)."""
    special = [w for w in stored if w.special]
    ordinary = [w for w in stored if not w.special]
    return Statement(
        ctx.statements.put_ordinary_writes_sql if common else ctx.statements.put_writes_sql,
        {
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
        },
        fetch=True,
    )


def write_fields(stored: list[StoredWrite]) -> list[str | bytes]:
    """Pending writes as put_writes.lua takes them: field, value, mode per write."""
    fields: list[str | bytes] = []
    for w in stored:
        fields += [write_field(w.task_id, w.idx), pack_write(w), "r" if w.special else "n"]
    return fields


# --------------------------------------------------------------------------- lifecycle


def drain_journal(ctx: Context, thread_ids: Sequence[str] | None = None) -> Op[None]:
    """Move every journal entry (of the shards of ``thread_ids``, when given) to Postgres
    before changing whole threads, so a late flush cannot bring deleted rows back —
    whatever this saver's own write mode, since another process may write the prefix
    behind. Write-through callers go on when Redis is bypassed (they wrote nothing there);
    write-behind callers cannot."""
    behind = ctx.config.write_mode == "behind"
    if not behind and not ctx.breaker.allows():
        return None
    try:
        yield from journal.flush(ctx, timeout=None, thread_ids=thread_ids)
    except TierUnavailableError as exc:  # the flush told the breaker (`journal.flush`)
        if behind or exc.tier != "hot":
            raise
    return None


def claim_threads(ctx: Context, thread_ids: Sequence[str]) -> Op[list[str | None]]:
    """Before a change to whole threads: move their journal entries to Postgres, announce
    an intent on each, and move them again. With the intents standing, write-behind writes
    of the threads go through Postgres, so no write made between the first move and the
    intents is left in Redis for the change to pass over: a prune would drop the hot copy
    of a checkpoint not yet in Postgres (readers would miss an acknowledged checkpoint until
    it flushed), a delete would let it flush after. The first move does nearly all the
    work while readers still use Redis; the second, under the intents (readers then use
    Postgres, draining what they miss), only takes what came in between. Returns the
    intents' tokens (``None`` where Redis is bypassed), for `mutate_threads`."""
    yield from drain_journal(ctx, thread_ids)
    tokens: list[str | None] = []
    for thread_id in thread_ids:
        tokens.append((yield from announce(ctx, ctx.layout.thread(thread_id))))
    yield from drain_journal(ctx, thread_ids)
    return tokens


def mutate_threads(
    ctx: Context,
    thread_ids: Sequence[str],
    statements: Sequence[Statement],
    *,
    deletes: bool = False,
    tokens: Sequence[str | None] | None = None,
) -> Op[list[Any]]:
    """Commit statements that change whole threads; their hot copies are dropped after,
    with a tombstone version taken first in the same transaction. The threads' head rows
    are locked before ``statements`` run, so every put of the threads either committed
    before them (and they see it) or waits for this commit. Unless the threads are
    deleted, each remaining namespace then gets a new version and its head back: the
    newest checkpoint, read under the head rows' lock taken again just before, with the
    heads table held against writes from the start (`LOCK_HEADS_TABLE_SQL` says why).
    ``tokens``: the threads' intents, when the caller announced them (`claim_threads`, a
    sweep's claims; ``None`` for a thread whose Redis was bypassed)."""
    keyed = [ctx.layout.thread(t) for t in thread_ids]
    if tokens is None:
        announced: list[str | None] = []
        for keys in keyed:
            announced.append((yield from announce(ctx, keys)))
    else:
        announced = list(tokens)
    bypassed = [t for t, tok in zip(thread_ids, announced, strict=True) if tok is None]
    marks = stale_marks(ctx, bypassed)
    lock = Statement(ctx.statements.lock_heads_sql, {"thread_ids": list(thread_ids)})
    heads = (
        []
        if deletes
        else [lock, Statement(ctx.statements.rebuild_heads_sql, {"thread_ids": list(thread_ids)})]
    )
    table = [] if deletes else [Statement(ctx.statements.lock_heads_table_sql, {})]
    result: list[Any] = yield Cold(
        (
            *table,
            Statement(ctx.statements.tombstone_sql, {}, fetch=True),
            lock,
            *statements,
            *heads,
            *marks,
        )
    )
    result = result[len(table):]
    tombstone = int(result[0][0]["version"])
    for keys, token in zip(keyed, announced, strict=True):
        if token is not None:
            yield from drop(ctx, keys, token, tombstone)
    if marks:
        ctx.marks.due_now()
    return result[2:]


def delete_threads(
    ctx: Context, thread_ids: Sequence[str], *, keep_ledger: bool = False
) -> Op[None]:
    ids = [locate({"configurable": {"thread_id": t}}).thread_id for t in thread_ids]
    ledger = ledger_statements(ctx.config.schema)
    ledger_rows = Statement(ledger.retire_threads if keep_ledger else ledger.delete_threads,
                            {"thread_ids": ids})
    if ids:
        tokens = yield from claim_threads(ctx, ids)
        yield from mutate_threads(
            ctx,
            ids,
            [
                Statement(ctx.statements.delete_threads_sql, {"thread_ids": ids}),
                ledger_rows,
            ],
            deletes=True,
            tokens=tokens,
        )
    return None


def delete_for_runs(ctx: Context, run_ids: Sequence[str]) -> Op[None]:
    runs = [str(r) for r in run_ids]
    if not runs:
        return None
    yield from drain_journal(ctx)
    rows = (yield Cold.one(ctx.statements.threads_of_runs_sql, {"run_ids": runs}, fetch=True))[0]
    threads = [r["thread_id"] for r in rows]
    if threads:
        yield from mutate_threads(
            ctx,
            threads,
            [
                Statement(ctx.statements.delete_for_runs_sql, {"run_ids": runs}),
                Statement(ctx.statements.delete_orphan_blobs_sql, {"thread_ids": threads}),
            ],
        )
    return None


def copy_thread(ctx: Context, source: str, target: str, up_to: str | None = None) -> Op[None]:
    """Copy a thread's checkpoints, writes and ledger records to ``target``; with ``up_to``
    (a checkpoint id), only the checkpoints up to it and the writes of those before it,
    so that it is the copy's head and the copy runs on from it."""
    src = locate({"configurable": {"thread_id": source}}).thread_id
    dst = locate({"configurable": {"thread_id": target}}).thread_id
    if src == dst:
        raise ConfigurationError("copy_thread: source and target are the same thread")
    yield from drain_journal(ctx, [src, dst])
    copy = yield from copy_statement(ctx, src, dst, up_to)
    trim = [] if up_to is None else [
        Statement(ctx.statements.delete_orphan_blobs_sql, {"thread_ids": [dst]})]
    yield from mutate_threads(
        ctx,
        [dst],
        [
            copy,
            *trim,
            Statement(
                ledger_statements(ctx.config.schema).copy_thread,
                {"source": src, "target": dst, "up_to": up_to},
            ),
        ],
    )
    return None
