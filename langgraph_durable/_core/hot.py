"""Hot-tier plumbing shared by every operation: calls that tolerate a Redis outage, the
write-through intent protocol, and the recovery that runs before Redis is trusted again.

Write-through protocol for every mutation of a thread (put, put_writes, delete, copy,
prune): announce an intent in Redis, commit in Postgres, then apply the change to Redis
and clear the intent in one script. A reader that finds an intent reads Postgres, so Redis
never serves a state older than an acknowledged one, whichever step a crash interrupts.
When Redis cannot be reached the write goes to Postgres alone and, in the same
transaction, marks the thread's hot copy stale. Every process applies the marks Redis has
not seen before it first trusts Redis, after a write of its own bypassed Redis, and then
every ``stale_poll_interval`` (`apply_marks`), so another process serves a copy older than
such a write for at most that long.

Every Postgres commit gives the namespaces it changes a new version (one sequence), and
Redis keeps the newest version it has seen: a copy read before a change can never replace
the copy the change produced (see `_core/scripts/`).
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import time
from collections.abc import Sequence
from typing import Any

from langgraph_durable._core import journal
from langgraph_durable._core.context import Context
from langgraph_durable._core.keys import ThreadKeys
from langgraph_durable._core.outage import hot_failed
from langgraph_durable._core.requests import Cold, Hot, HotBatch, Op, Pause, Statement
from langgraph_durable._core.scripts import shards, thread
from langgraph_durable.config import mask_url, seconds
from langgraph_durable.errors import SchemaVersionError, TierUnavailableError

logger = logging.getLogger("langgraph_durable")


def try_hot(ctx: Context, request: Hot | HotBatch) -> Op[Any]:
    """Run a hot request if the breaker allows; ``None`` when Redis is bypassed or fails."""
    if not ctx.breaker.allows():
        return None
    try:
        result = yield request
    except TierUnavailableError as exc:
        if exc.tier != "hot":
            raise
        hot_failed(ctx, exc)
        return None
    return result


def bypassed(thread_id: str) -> TierUnavailableError:
    """The error of a write-behind read or write while Redis is bypassed: Redis may hold
    entries of the thread that Postgres lacks, so serving or extending Postgres's state
    could return an older checkpoint or fork the thread."""
    return TierUnavailableError(
        f"Redis (hot tier) is unavailable and thread {thread_id!r} may have write-behind "
        "entries only Redis holds; its reads and writes wait for Redis rather than serve "
        "older state or fork it",
        tier="hot",
    )


def announce(ctx: Context, keys: ThreadKeys, *, ns: str | None = None) -> Op[str | None]:
    """Record a write intent; returns its token, or ``None`` if Redis is bypassed.

    With ``ns``, the namespace about to be written: when it has write-behind entries not
    yet flushed (another saver writes the prefix behind, or this one sends a write through
    Postgres), they are flushed first, so the Postgres commit that follows sees its head.
    Entries of the thread's other namespaces do not change that head, and do not wait.
    """
    token = secrets.token_hex(16)
    member = "" if ns is None else keys.unflushed_member(ns, "")
    dirty = yield from try_hot(ctx, thread.intent(keys, token, ctx.deadline_ms, ctx.ttl_ms, member))
    if dirty is None:
        return None
    if ns is not None and int(dirty):
        yield from journal.flush(ctx, timeout=None, thread_ids=[keys.thread_id])
    return token


def stale_marks(ctx: Context, thread_ids: Sequence[str]) -> list[Statement]:
    """Statements that mark the threads' hot copies stale, for the end of a transaction
    that changed them while Redis was bypassed. The mark's version becomes the threads'
    tombstone once applied; every namespace of the threads then gets a newer version, so
    a copy read after the change is accepted again. The marks are numbered last, under a
    lock held until the commit, so they commit in the order of their numbers: a process
    that applied the marks up to a number never misses one committed below it later."""
    out: list[Statement] = []
    for thread_id in thread_ids:
        out.append(Statement(ctx.statements.mark_hot_stale_sql, {"thread_id": thread_id}))
        out.append(Statement(ctx.statements.bump_thread_sql, {"thread_id": thread_id}))
    if out:
        out.append(Statement(ctx.statements.order_marks_sql, {}))
        out.append(Statement(ctx.statements.renumber_marks_sql,
                             {"thread_ids": list(thread_ids)}))
    return out


def commit(
    ctx: Context, token: str | None, thread_ids: Sequence[str], statements: Sequence[Statement]
) -> Op[list[Any]]:
    """Commit statements; if Redis was bypassed, mark the threads' hot copies stale too, and
    have this process apply the marks before its next operation."""
    marks = [] if token is not None else stale_marks(ctx, thread_ids)
    # a mark gives every namespace of its threads a new version, so the transaction takes
    # their head rows first, in the order a change to whole threads takes them: two marked
    # writes to namespaces of one thread would otherwise each hold its own namespace's row
    # and wait for the other's (a deadlock, which Postgres ends by failing one); the
    # table's write lock comes before them (`LOCK_HEADS_FOR_WRITES_SQL` says why)
    lock = [Statement(ctx.statements.lock_heads_for_writes_sql, {}),
            Statement(ctx.statements.lock_heads_sql, {"thread_ids": list(thread_ids)})]
    if not marks:
        lock = []
    result: list[Any] = yield Cold((*lock, *statements, *marks))
    if marks:
        ctx.marks.due_now()
    return result[len(lock):]


def drop(ctx: Context, keys: ThreadKeys, token: str | None, tombstone: int) -> Op[Any]:
    """Drop a thread's hot copy, leaving ``tombstone`` as the version below which no copy
    of it is accepted again."""
    return (
        yield from try_hot(
            ctx,
            _drop_request(ctx, keys, token or "", tombstone, only_flushed=False),
        )
    )


def drop_many(ctx: Context, dropped: Sequence[tuple[ThreadKeys, str]], tombstone: int) -> Op[Any]:
    """`drop` for several threads (each with its intent token) in one round trip."""
    if not dropped:
        return None
    requests = tuple(
        _drop_request(ctx, keys, token, tombstone, only_flushed=False) for keys, token in dropped
    )
    return (yield from try_hot(ctx, HotBatch(requests)))


def _drop_request(
    ctx: Context, keys: ThreadKeys, token: str, tombstone: int, *, only_flushed: bool
) -> Hot:
    return thread.drop_thread(keys, token, tombstone, ctx.ttl_ms, only_flushed=only_flushed)


def apply_marks(ctx: Context, *, recovering: bool = False) -> Op[int]:
    """Drop the hot copy of every thread a write changed while it bypassed Redis, for the
    marks this Redis has not applied yet; returns how many threads were dropped.

    The highest mark applied is kept in Redis itself, beside the data it describes (one
    per journal shard, in the shard's slot), so a Redis — or, on a cluster, the node of a
    shard — restored from an older snapshot or promoted from a replica that lagged has an
    older mark and applies again the marks made since, and a new or emptied Redis applies
    every mark kept (one per thread, for twice ``hot_ttl``). The usual poll, with no new
    mark, is one index lookup in Postgres and one Redis round trip (on a cluster, one call
    per shard: `each_shard`). Raises
    `TierUnavailableError` when a tier cannot be reached; nothing is recorded as applied.
    """
    layout = ctx.layout
    # Redis first: a process's first call then reaches Redis while its first Postgres
    # connection is still being made. A mark made between the two reads is newer than
    # `applied` and is applied now; marks Redis applied meanwhile are applied again
    # (dropping a hot copy twice is harmless).
    applied = [
        int(r or 0)
        for r in (yield from journal.each_shard(
            ctx, [shards.marks(layout, k) for k in range(layout.shards)]))
    ]
    newest = (yield Cold.one(ctx.statements.newest_mark_sql, {}, fetch=True))[0][0]["seq"]
    after = min(applied)
    if after >= newest:
        return 0
    dropped = 0
    while rows := (
        yield Cold.one(ctx.statements.pending_marks_sql, {"after": after}, fetch=True)
    )[0]:
        for row in rows:
            thread_id = row["thread_id"]
            if row["seq"] <= applied[layout.shard(thread_id)]:
                continue  # that shard's Redis applied it already
            keys = layout.thread(thread_id)
            if (yield _drop_request(ctx, keys, "", row["version"], only_flushed=True)) == -1:
                # write-behind entries of the thread are on their way: they go first
                yield from journal.flush(ctx, timeout=None, thread_ids=[thread_id],
                                         recovering=recovering)
                yield _drop_request(ctx, keys, "", row["version"], only_flushed=False)
            dropped += 1
        after = max(r["seq"] for r in rows)
        yield from journal.each_shard(
            ctx, [shards.marks(layout, k, after) for k in range(layout.shards)])
    if dropped:
        keep = 2 * ctx.ttl_ms / 1000 or 7 * 86400.0  # a copy older than that expired
        yield Cold.one(ctx.statements.forget_marks_sql, {"keep": keep})
        logger.info(  # the mechanism at work, nothing for an operator to do
            "dropped the hot copy of %d threads written while Redis was bypassed", dropped
        )
    return dropped


def poll_marks(ctx: Context) -> Op[None]:
    """Apply pending stale marks if they are due; a tier that cannot be reached delays the
    next try by one interval instead of failing the caller's operation."""
    if not ctx.breaker.allows():
        return None
    try:
        yield from apply_marks(ctx)
    except TierUnavailableError as exc:
        logger.debug("stale marks not checked: %s", exc)
        if exc.tier == "hot":
            hot_failed(ctx, exc)
    except SchemaVersionError:
        return None  # not set up yet (still due): the operation itself says so
    ctx.marks.checked()
    return None


def recover_hot(ctx: Context) -> Op[bool]:
    """Probe Redis after an outage; before trusting it again, apply every stale mark
    (Redis may have come back with older data).

    Returns whether the hot tier is usable again; on failure the breaker stays open.
    """
    try:
        yield journal.probe_request(ctx)
        yield from apply_marks(ctx, recovering=True)
        ctx.marks.checked()
    except TierUnavailableError as exc:
        logger.debug("hot tier still unavailable: %s", exc)
        hot_failed(ctx, exc)
        return False
    if ctx.breaker.recovered():
        logger.warning("Redis (hot tier) at %s answers again: reads and writes use it",
                       mask_url(ctx.config.redis_url))
    return True


def connect(ctx: Context) -> Op[bool]:
    """Open a hot-tier connection now (at setup), so the first read after a restart costs
    one round trip; returns whether Redis answered. A dead Redis is not an error here
    (`hot_failed` says so), unless ``redis_required`` is set.

    Raises:
        TierUnavailableError: Redis did not answer and ``redis_required`` is set.
    """
    if not ctx.config.redis_required:
        state = yield from try_hot(ctx, journal.probe_request(ctx))
        return state is not None
    try:
        if ctx.breaker.is_open and not ctx.breaker.cooled():  # it just failed: not again
            raise ctx.breaker.reason or TierUnavailableError("Redis did not answer", tier="hot")
        yield journal.probe_request(ctx)
    except TierUnavailableError as exc:
        if exc.tier != "hot":
            raise
        raise TierUnavailableError(
            f"Redis (hot tier) at {mask_url(ctx.config.redis_url)} cannot be reached "
            f"({exc.__cause__ or exc}), and redis_required is set: the saver does not start "
            "on Postgres alone", tier="hot") from exc
    if ctx.breaker.is_open:
        return (yield from recover_hot(ctx))
    return True


# How long the lock of `check_redis` lasts unless its holder renews it (each SCAN step),
# and how many keys a step looks at.
CHECK_LEASE_MS = 10_000
CHECK_SCAN = 1000


def check_redis(ctx: Context, run_id: str, token: str) -> Op[None]:
    """Make the data of the Redis process ``run_id`` safe to serve, once per process per
    prefix: a Redis that restarted may have loaded a snapshot older than what Postgres
    holds (an RDB, an AOF's last second, a replica promoted in its place), and its copies
    of threads would then serve, and be extended from, a checkpoint older than one that
    was acknowledged or flushed. So every thread's copy is dropped and read back from
    Postgres on its next read, after the thread's write-behind entries still in the
    journal reached Postgres (they are the only copy of those writes; moving one Postgres
    already holds again is harmless). The long-term store's cached items go too.

    One process checks (a lock in Redis, renewed as it goes); the others wait until it
    recorded the run id as checked, for at most ``tier_timeout``, and do not start one of
    their own when it failed (a later call does): a check that Postgres holds up (frozen,
    or slow to take the flushes) would otherwise hold every caller of the prefix as long,
    and then each would run one of its own in turn. The key that records it is data of
    the process it names, so no snapshot of an earlier one holds it. Drivers run this
    before the first script on a connection to a Redis process they have not seen checked
    (`RedisCheck`), with ``token`` for the lock (so that they can release it with
    `abandon_check` when the check is stopped midway: a cancelled task).

    Raises:
        TierUnavailableError: a tier could not be reached, or another caller's check did
            not end within ``tier_timeout`` (``tier="hot"``: Redis's data cannot be
            trusted until the check runs again).
    """
    layout = ctx.layout
    bound = seconds(ctx.config.tier_timeout)
    try:
        started, waited = time.monotonic(), False
        while (state := (yield shards.incarnation(layout, "check", run_id, token,
                                                  CHECK_LEASE_MS))) != 0:
            if state == 1:
                return None
            if time.monotonic() - started >= bound:
                raise TierUnavailableError(
                    f"Redis (hot tier) is a new process (run id {run_id}) whose data "
                    f"another caller has been checking against Postgres for over "
                    f"{bound:g}s: Redis is not used until the check is done", tier="hot")
            waited = True
            yield Pause(0.05)  # another process checks it
        if waited:  # the check waited for failed, or its caller died: a later call retries
            yield from abandon_check(ctx, run_id, token)
            raise TierUnavailableError(
                f"Redis (hot tier) is a new process (run id {run_id}) whose data another "
                f"caller could not check against Postgres: Redis is not used until a "
                f"check succeeds", tier="hot")
        try:
            dropped = yield from _drop_every_copy(ctx, run_id, token)
        except Exception:  # the next caller checks again at once, not after the lease
            yield from abandon_check(ctx, run_id, token)
            raise
        yield shards.incarnation(layout, "done", run_id, token)
    except TierUnavailableError as exc:
        if exc.tier == "hot":
            raise
        raise TierUnavailableError(
            f"Redis (hot tier) restarted, and its data cannot be checked against Postgres "
            f"({exc}): Redis is not used until it can", tier="hot") from exc
    if dropped:
        logger.warning(
            "Redis (hot tier) at %s is a new process (run id %s), whose data may be older "
            "than Postgres (a restart from a snapshot, a promoted replica): the hot copies "
            "of %d threads were dropped; they are read from Postgres again",
            mask_url(ctx.config.redis_url), run_id, dropped)
    return None


def _drop_every_copy(ctx: Context, run_id: str, token: str) -> Op[int]:
    """Scan the prefix's keys for `check_redis`, dropping the copy of every thread met;
    returns how many threads."""
    layout = ctx.layout
    dropped, cursor = 0, "0"
    while True:
        reply = yield shards.incarnation_scan(layout, token, CHECK_LEASE_MS, cursor,
                                              CHECK_SCAN)
        if not reply:
            raise TierUnavailableError(
                f"checking the Redis process {run_id} took longer than its lock "
                f"({CHECK_LEASE_MS / 1000:g}s) between two steps", tier="hot")
        cursor = _text(reply[0])
        threads = sorted({t for t in map(layout.thread_of, reply[1:]) if t is not None})
        # a batch another process's flusher took is either committed, waiting to be
        # acknowledged until this check ends, or failed, once it sat idle for
        # tier_timeout (the bound of its commit): taking it over then, not after
        # reclaim_after, keeps every caller of this prefix from waiting that long
        yield from _drop_flushed(ctx, [(layout.thread(t), 1) for t in threads],
                                 reclaim=seconds(ctx.config.tier_timeout))
        dropped += len(threads)
        if cursor == "0":
            return dropped


def abandon_check(ctx: Context, run_id: str, token: str) -> Op[None]:
    """Release the lock ``token`` of a `check_redis` that failed or was stopped midway, if
    Redis answers (a lock another caller holds now stays)."""
    with contextlib.suppress(TierUnavailableError):  # else the lease ends it
        yield shards.incarnation(ctx.layout, "abandon", run_id, token)
    return None


def _drop_flushed(ctx: Context, drops: Sequence[tuple[ThreadKeys, int]], *,
                  reclaim: float | None = None) -> Op[None]:
    """Drop the copies of threads, each leaving its tombstone, in one round trip, as
    `apply_marks` drops one: a thread whose write-behind entries are still on their way to
    Postgres has them flushed first (``reclaim``: see `journal.flush`), then is dropped."""
    if not drops:
        return None
    replies = yield HotBatch(tuple(_drop_request(ctx, keys, "", tomb, only_flushed=True)
                                   for keys, tomb in drops))
    waiting = [(keys, tomb) for (keys, tomb), reply in zip(drops, replies, strict=True)
               if reply == -1]
    if waiting:
        yield from journal.flush(ctx, timeout=None,
                                 thread_ids=[keys.thread_id for keys, _ in waiting],
                                 reclaim=reclaim, recovering=True)
        yield HotBatch(tuple(_drop_request(ctx, keys, "", tomb, only_flushed=False)
                             for keys, tomb in waiting))
    return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
