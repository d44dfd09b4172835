"""The flush: moving journal entries to Postgres.

A flusher takes a batch through a consumer group, writes it to Postgres in one transaction
of idempotent upserts, and only then acknowledges and deletes the entries. A flusher that
dies mid-batch leaves its entries pending; another claims them once they sat idle for
``reclaim_after``. One whose commit fails releases them, so another takes them at once
(its own Postgres link may be the one lost), and so does the next drain for entries Redis
handed a drain that had given up on its read (`_acknowledge_late`).

A batch Postgres rejects for what it holds (`WriteRejectedError`: a value or a key it
cannot store) is split in halves until the entry at fault is alone; that entry moves to
the dead letters (a stream beside the journal, see `letters`) and every other entry goes
on to Postgres. An entry that cannot even be decoded goes there too.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Iterable, Sequence
from typing import Any

from langgraph_durable._core.codec import FrameError
from langgraph_durable._core.context import Context, silent
from langgraph_durable._core.journal.entries import GROUP, Entry, genuine, stream_order
from langgraph_durable._core.journal.policy import plan
from langgraph_durable._core.journal.state import each_shard, leave_requests, shard_states
from langgraph_durable._core.outage import hot_failed
from langgraph_durable._core.requests import Cold, Hot, Op, Pause
from langgraph_durable._core.scripts import shards as shard_calls
from langgraph_durable._core.sql.flush import ANSWERS_SQL
from langgraph_durable.config import seconds
from langgraph_durable.errors import FlushTimeoutError, TierUnavailableError, WriteRejectedError

logger = logging.getLogger("langgraph_durable")

# A consumer of the group idle this many times `reclaim_after` with no entry pending
# belongs to a saver that closed or died: flushers remove it.
FORGET_CONSUMER_AFTER = 10


# A drain whose shards' oldest entries (another flusher's batch) have not moved for this
# many seconds asks Postgres itself whether it answers (`ANSWERS_SQL`).
STILL_PROBE = 0.5

Rejected = list[tuple[str, str]]  # (entry id, why Postgres or the decoder refused it)


def _commit(ctx: Context, entries: list[Entry], rejected: Rejected) -> Op[list[dict[str, Any]]]:
    """Write entries to Postgres in one transaction; when Postgres rejects it, split the
    entries in halves until each entry at fault is alone and add it to ``rejected``.
    Returns the namespace versions the commits gave."""
    statements = plan(ctx, entries).statements(ctx)
    if not statements:
        return []
    try:
        return list((yield Cold(statements))[-1] or [])
    except WriteRejectedError as exc:
        if len(entries) == 1:
            e = entries[0]
            rejected.append(
                (
                    e.id,
                    f"thread {e.thread_id!r}, namespace {e.ns!r}, checkpoint "
                    f"{e.checkpoint_id!r} ({'checkpoint' if e.kind == 'c' else 'writes'}): "
                    f"{exc}",
                )
            )
            return []
        half = len(entries) // 2
        first = yield from _commit(ctx, entries[:half], rejected)
        return first + (yield from _commit(ctx, entries[half:], rejected))


def _breaker_guarded(ctx: Context, op: Op[int], *, recovering: bool = False) -> Op[int]:
    """Run a flush through the hot breaker: while it is open (Redis did not answer a moment
    ago) the flush raises at once, as every other request that needs Redis does, instead
    of waiting tier_timeout again; a Redis failure opens it for the whole saver (before:
    each drain of a write-behind delete, copy or prune waited tier_timeout anew).
    ``recovering``: the probe that is to close it (`hot.recover_hot`) or the check of a
    restarted Redis (`hot.check_redis`), which drain whatever the breaker says."""
    if not (recovering or ctx.breaker.allows()):
        op.close()
        raise silent("hot", ctx.breaker.reason)
    try:
        return (yield from op)
    except TierUnavailableError as exc:
        if exc.tier == "hot":
            hot_failed(ctx, exc)
        raise


def flush_batch(ctx: Context, consumer: str | None = None, *, shard: int | None = None) -> Op[int]:
    """Move one batch of journal entries to Postgres; returns how many it took off the
    journal (entries Postgres rejected, now dead letters, included). ``consumer`` names
    the flusher in the group (default: this process's background flusher). ``shard``: the
    journal to take it from; default: the next shard, in turn, that holds entries (0 when
    none has any). Acknowledgements that could not be sent since a batch committed go
    first. Through the hot breaker (`_breaker_guarded`)."""
    return (yield from _breaker_guarded(ctx, _flush_batch(ctx, consumer, shard)))


def _flush_batch(ctx: Context, consumer: str | None, shard: int | None) -> Op[int]:
    yield from _acknowledge_late(ctx)
    if shard is not None or ctx.layout.shards == 1:
        return (yield from _flush_shard(ctx, consumer, shard or 0))
    states = yield from shard_states(ctx, range(ctx.layout.shards))
    start = ctx.flush_cursor
    for step in range(ctx.layout.shards):
        k = (start + step) % ctx.layout.shards
        if states[k].length == 0:
            continue
        moved = yield from _flush_shard(ctx, consumer, k)
        if moved:
            ctx.flush_cursor = k + 1  # the next batch starts at the next shard: fair
            return moved
    return 0


def _acknowledge_late(ctx: Context) -> Op[None]:
    """Send what Redis must still hear (`Context.unacknowledged`): the acknowledgements of
    batches that committed while Redis could not be reached (acknowledging twice is
    harmless: entries no longer pending only drop their thread's copy, which reads warm
    back from Postgres), and the releases of entries drains Redis failed may hold (a
    drain whose read timed out in a frozen Redis is gone, but Redis runs the read when it
    thaws and hands it entries, which would hold every drain of their shard up until they
    sat idle for reclaim_after)."""
    while ctx.unacknowledged:
        try:
            acknowledgement = ctx.unacknowledged.popleft()
        except IndexError:
            return None
        try:
            yield acknowledgement
        except TierUnavailableError:
            ctx.unacknowledged.appendleft(acknowledgement)
            raise
    return None


def _flush_shard(ctx: Context, consumer: str | None, shard: int,
                 reclaim: float | None = None) -> Op[int]:
    """One batch of ``shard``: this consumer's own entries first, else entries another
    took and left idle for ``reclaim`` seconds (default ``reclaim_after``), else new ones."""
    layout = ctx.layout
    reclaim_after_ms = int(seconds(ctx.config.reclaim_after) * 1000)
    reclaim_ms = reclaim_after_ms if reclaim is None else int(reclaim * 1000)
    raw = yield shard_calls.flush_read(
        layout, shard, group=GROUP, consumer=consumer or ctx.consumer,
        count=ctx.config.flush_batch, reclaim=reclaim_ms, cap=ctx.config.flush_batch_bytes,
        forget=reclaim_after_ms * FORGET_CONSUMER_AFTER,
    )
    if not raw:
        return 0
    entries: list[Entry] = []
    rejected: Rejected = []
    for r in raw:
        try:
            entries.append(genuine(ctx, r))
        except (ValueError, TypeError, KeyError, IndexError, FrameError) as exc:
            entry_id = r[0].decode()
            what = "not genuine (no valid seal)" if isinstance(exc, FrameError) else "undecodable"
            rejected.append((entry_id, f"{what} journal entry: {exc}"))
            entries.append(Entry(entry_id, "?", "", "", "", [], 0))
    good = [e for e in entries if e.kind != "?"]
    try:
        versions = yield from _commit(ctx, good, rejected)
    except TierUnavailableError:
        # Released, the batch goes to the next flusher or drain that reads the shard, at
        # once: a drain reads no more, and a flusher backs off (its Postgres link may be
        # the one cut); held, it would hold every drain of the shard up until it sat idle
        # for reclaim_after. Unreleased (Redis out of reach too), it is reclaimed then.
        try:
            yield shard_calls.journal_release(layout, shard, GROUP, consumer or ctx.consumer,
                                              max(reclaim_ms, reclaim_after_ms),
                                              [e.id for e in entries])
        except TierUnavailableError:  # a flusher reads its own again; a drain does not
            if consumer is not None:
                ctx.unacknowledged.extend(_releases(ctx, consumer, [shard]))
        raise
    acked: list[str | bytes | int] = []
    for e in entries:
        keys = layout.nobody(shard) if e.kind == "?" else layout.thread(e.thread_id)
        acked += [
            e.id,
            keys.unflushed,
            keys.unflushed_member(e.ns, e.checkpoint_id),
            keys.registry,
            e.size,
        ]
    refused = [part for entry_id, reason in rejected for part in (entry_id, reason)]
    raised: list[str | bytes | int] = []
    for row in versions:
        keys = ctx.layout.thread(row["thread_id"])
        raised += [keys.versions, keys.version_field(row["checkpoint_ns"]), row["version"]]
    acknowledgement = shard_calls.flush_ack(layout, shard, group=GROUP, ttl=ctx.ttl_ms,
                                            entries=acked, rejected=refused, versions=raised)
    try:
        yield acknowledgement
    except TierUnavailableError:
        # committed: Redis must still hear of it (the versions the commit gave, and the
        # copies to drop if Redis lost the entries meanwhile), or a warm read before the
        # commit could land after it
        ctx.unacknowledged.append(acknowledgement)
        raise
    for entry_id, reason in rejected:
        logger.warning(
            "flush: journal entry %s moved to the dead letters (`langgraph-durable "
            "dead-letters list`): %s",
            entry_id,
            reason,
        )
    return len(entries)


def flush(ctx: Context, timeout: float | None, thread_ids: Sequence[str] | None = None, *,
          reclaim: float | None = None, recovering: bool = False) -> Op[int]:
    """Drain until every entry present when called is in Postgres (or, rejected by it, in
    the dead letters); returns entries moved. With ``thread_ids``, only the shards that
    hold those threads' entries are drained. ``reclaim``: how long (seconds) entries
    another flusher took sit idle before this drain takes them over (default
    ``reclaim_after``).

    Works alongside other flushers: entries they hold are waited for (or reclaimed once
    idle), so the promise holds whoever moved them. It reads as a consumer of its own, so
    it never takes over a batch this process's background flusher is committing (that
    flusher's late commit could otherwise land after a delete that this drain let pass).

    Through the hot breaker (`_breaker_guarded`, which says what ``recovering`` is for).
    """
    return (yield from _breaker_guarded(ctx, _drain(ctx, timeout, thread_ids, reclaim),
                                        recovering=recovering))


def _drain(ctx: Context, timeout: float | None, thread_ids: Sequence[str] | None,
           reclaim: float | None) -> Op[int]:
    yield from _acknowledge_late(ctx)
    layout = ctx.layout
    shards = sorted(
        range(layout.shards) if thread_ids is None else {layout.shard(t) for t in thread_ids}
    )
    states = yield from shard_states(ctx, shards)
    targets = {k: s.newest for k, s in zip(shards, states, strict=True) if s.newest}
    if not targets:
        return 0
    consumer = f"{ctx.consumer}:{secrets.token_hex(4)}"
    try:
        return (yield from _drain_rounds(ctx, consumer, targets, timeout, reclaim))
    except TierUnavailableError as exc:
        if exc.tier == "hot":  # a read Redis runs once it answers again hands it entries
            ctx.unacknowledged.extend(_releases(ctx, consumer, targets))
        raise


def _releases(ctx: Context, consumer: str, shards: Iterable[int]) -> list[Hot]:
    """Releases of every entry ``consumer`` holds in ``shards`` (`_acknowledge_late`)."""
    reclaim_ms = int(seconds(ctx.config.reclaim_after) * 1000)
    return [shard_calls.journal_release(ctx.layout, k, GROUP, consumer, reclaim_ms, [])
            for k in shards]


def _drain_rounds(ctx: Context, consumer: str, targets: dict[int, str],
                  timeout: float | None, reclaim: float | None) -> Op[int]:
    """`flush` as ``consumer``, until each shard's entries up to ``targets`` moved."""
    moved, started = 0, time.monotonic()
    left = sorted(targets)
    seen, still_since = None, started  # the shards' oldest entries, unmoved since then
    while True:
        for k in left:
            moved += yield from _flush_shard(ctx, consumer, k, reclaim)
        states = yield from shard_states(ctx, left)
        oldest = ([s.oldest for s in states], moved)
        if oldest != seen:
            seen, still_since = oldest, time.monotonic()
        elif time.monotonic() - still_since >= STILL_PROBE:
            # Entries another flusher holds have not moved: a Postgres that does not
            # answer holds them up, and would hold this caller up until it answers again;
            # asked itself, it fails this drain within tier_timeout instead.
            yield Cold.one(ANSWERS_SQL, {})
            still_since = time.monotonic()
        done = [
            k
            for k, s in zip(left, states, strict=True)
            if not s.oldest or stream_order(s.oldest) > stream_order(targets[k])
        ]
        if done:
            yield from each_shard(ctx, leave_requests(ctx, consumer, done))
            left = [k for k in left if k not in done]
        if not left:
            return moved
        if timeout is not None and time.monotonic() - started >= timeout:
            raise FlushTimeoutError(
                f"flush: entries up to {max(targets.values(), key=stream_order)} still "
                f"unflushed after {timeout:.1f} s"
            )
        yield Pause(0.005)
