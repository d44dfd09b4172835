"""Write-behind: journal entries and the flush, as sans-I/O operations.

A write-behind ``put``/``put_writes`` updates the thread's hot keys and appends one entry
to the journal (a Redis Stream) in a single script. A flusher takes a batch through a
consumer group, writes it to Postgres in one transaction of idempotent upserts, and only
then acknowledges and deletes the entries. A flusher that dies mid-batch leaves its
entries pending; another claims them once they sat idle for ``reclaim_after``.

A batch Postgres rejects for what it holds (`WriteRejectedError`: a value or a key it
cannot store) is split in halves until the entry at fault is alone; that entry moves to
the dead letters (a stream beside the journal, see `dead_letters`) and every other entry
goes on to Postgres. An entry that cannot even be decoded goes there too.

A sharded layout (`keys.Layout`: a Redis Cluster, or ``journal_shards`` > 1) has one journal
per shard, each beside its threads' keys in one slot: a flusher takes its batches from the
shards in turn (each shard has its own consumer group, so claims and the reclaim of a dead
flusher's batch are per shard), and a flush drains every shard, or only the shards of the
threads it is for.

With a secret or encryption configured each entry is sealed (`_core.seal`) and opened by
the flusher before anything of it goes near Postgres: an entry that fails (written into
the stream by someone without the key) goes to the dead letters, never to Postgres.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import ormsgpack

from langgraph_durable._core.codec import FrameError
from langgraph_durable._core.context import Context
from langgraph_durable._core.records import Location, StoredCheckpoint, StoredWrite
from langgraph_durable._core.requests import Cold, Hot, HotBatch, Op, Pause, Statement
from langgraph_durable._core.scripts import shards as shard_calls
from langgraph_durable._core.seal import journal_place
from langgraph_durable.config import seconds
from langgraph_durable.errors import (
    ConfigurationError,
    FlushTimeoutError,
    TierUnavailableError,
    WriteRejectedError,
)

logger = logging.getLogger("langgraph_durable")

GROUP = "flushers"


def seal_entry(ctx: Context, payload: bytes) -> bytes:
    """An entry as the stream holds it: sealed to this prefix's journal when keyed."""
    seal = ctx.seal
    return seal.seal(payload, journal_place(ctx.config.key_prefix)) if seal.keyed else payload


# A consumer of the group idle this many times `reclaim_after` with no entry pending
# belongs to a saver that closed or died: flushers remove it.
FORGET_CONSUMER_AFTER = 10


def pack_checkpoint_entry(stored: StoredCheckpoint) -> bytes:
    w = stored.where
    return ormsgpack.packb(
        [
            "c",
            w.thread_id,
            w.checkpoint_ns,
            stored.checkpoint_id,
            stored.parent_id,
            stored.run_id,
            stored.frame,
            stored.channel_versions,
            stored.metadata,
            [list(b) for b in stored.blobs],
        ]
    )


def pack_writes_entry(where: Location, stored: Sequence[StoredWrite]) -> bytes:
    return ormsgpack.packb(
        [
            "w",
            where.thread_id,
            where.checkpoint_ns,
            where.checkpoint_id,
            [[w.task_id, w.idx, w.channel, w.task_path, w.frame] for w in stored],
        ]
    )


@dataclass(slots=True)
class Entry:
    """One journal entry, decoded."""

    id: str
    kind: str
    thread_id: str
    ns: str
    checkpoint_id: str
    body: list[Any]
    size: int = 0  # payload bytes, as the journal's byte counter counts them

    @property
    def order(self) -> tuple[int, int]:
        return stream_order(self.id)


def _decode(raw: list[Any]) -> Entry:
    entry_id, fields = raw[0], raw[1]
    data = dict(zip(fields[::2], fields[1::2], strict=True))[b"d"]
    body = ormsgpack.unpackb(data)
    kind, thread_id, ns, checkpoint_id = body[0], body[1], body[2], body[3]
    if kind not in ("c", "w") or not all(
        isinstance(x, str) for x in (thread_id, ns, checkpoint_id)
    ):
        raise ValueError(f"not a journal entry: kind {kind!r}")
    return Entry(entry_id.decode(), kind, thread_id, ns, checkpoint_id, body, len(data))


def _genuine(ctx: Context, raw: list[Any]) -> Entry:
    """`_decode` of an entry opened with the seal when keyed (its size stays the sealed
    payload's, as the journal's byte counter counted it).

    Raises:
        FrameError: the entry was not sealed with this saver's key (forged, or written
            by a saver without it).
    """
    if not ctx.seal.keyed:
        return _decode(raw)
    entry_id, fields = raw[0], raw[1]
    sealed = dict(zip(fields[::2], fields[1::2], strict=True))[b"d"]
    opened = ctx.seal.open(sealed, journal_place(ctx.config.key_prefix))
    entry = _decode([entry_id, [b"d", bytes(opened)]])
    entry.size = len(sealed)
    return entry


def stream_order(entry_id: str) -> tuple[int, int]:
    """A stream entry id (``"<ms>-<seq>"``) as a sortable pair."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


class _Batch:
    """Rows of one flush transaction, deduplicated by primary key as Postgres requires."""

    def __init__(self) -> None:
        self.blobs: dict[tuple[str, str, str, str], bytes] = {}
        self.checkpoints: dict[tuple[str, str, str], list[Any]] = {}
        self.writes: dict[tuple[str, str, str, str, int], list[Any]] = {}
        self.special: dict[tuple[str, str, str, str, int], list[Any]] = {}
        # every namespace the batch touches -> its newest checkpoint id ("" if none)
        self.heads: dict[tuple[str, str], str] = {}

    def add_checkpoint(self, e: Entry) -> None:
        _, t, ns, cid, parent, run_id, frame, versions, metadata, blobs = e.body
        for channel, version, blob in blobs:
            self.blobs.setdefault((t, ns, channel, version), blob)
        self.checkpoints[(t, ns, cid)] = [t, ns, cid, parent, run_id, frame, versions, metadata]
        self.heads[(t, ns)] = max(self.heads.get((t, ns), ""), cid)

    def add_blobs_only(self, e: Entry) -> None:
        _, t, ns, _, _, _, _, _, _, blobs = e.body
        for channel, version, blob in blobs:
            self.blobs.setdefault((t, ns, channel, version), blob)

    def add_writes(self, e: Entry) -> None:
        _, t, ns, cid, writes = e.body
        self.heads.setdefault((t, ns), "")
        for task_id, idx, channel, task_path, frame in writes:
            key = (t, ns, cid, task_id, idx)
            row = [t, ns, cid, task_id, idx, channel, task_path, frame]
            if idx < 0:
                self.special[key] = row  # replaces: the last entry wins
            else:
                self.writes.setdefault(key, row)  # first write wins

    def statements(self, ctx: Context) -> tuple[Statement, ...]:
        st = ctx.statements
        out = []
        if self.blobs:
            keys, frames = list(self.blobs), list(self.blobs.values())
            out.append(
                Statement(
                    st.flush_blobs_sql,
                    {
                        "thread_ids": [k[0] for k in keys],
                        "namespaces": [k[1] for k in keys],
                        "channels": [k[2] for k in keys],
                        "versions": [k[3] for k in keys],
                        "blobs": frames,
                    },
                )
            )
        if self.checkpoints:
            rows = list(self.checkpoints.values())
            names = (
                "thread_ids",
                "namespaces",
                "checkpoint_ids",
                "parent_ids",
                "run_ids",
                "checkpoints",
                "channel_versions",
                "metadata",
            )
            out.append(
                Statement(
                    st.flush_checkpoints_sql, {n: [r[i] for r in rows] for i, n in enumerate(names)}
                )
            )
        names = (
            "thread_ids",
            "namespaces",
            "checkpoint_ids",
            "task_ids",
            "idxs",
            "channels",
            "task_paths",
            "blobs",
        )
        for rows_by_key, query in (
            (self.writes, st.flush_writes_sql),
            (self.special, st.flush_special_writes_sql),
        ):
            if rows_by_key:
                rows = list(rows_by_key.values())
                out.append(Statement(query, {n: [r[i] for r in rows] for i, n in enumerate(names)}))
        if self.heads:
            spaces = sorted(self.heads)  # one lock order for concurrent flushers
            out.append(
                Statement(
                    st.flush_heads_sql,
                    {
                        "thread_ids": [k[0] for k in spaces],
                        "namespaces": [k[1] for k in spaces],
                        "heads": [self.heads[k] or None for k in spaces],
                    },
                    fetch=True,
                )
            )
        return tuple(out)


CheckpointKey = tuple[str, str, str]  # (thread, namespace, checkpoint id)


def _latest_kept(entries: list[Entry]) -> set[CheckpointKey]:
    """The checkpoints the ``latest`` policy flushes: the newest of each thread and
    namespace in the batch, and every checkpoint of the batch a kept one's `DeltaChannel`
    value is rebuilt from. A checkpoint's metadata counts what happened since each delta
    channel's last snapshot (``counters_since_delta_snapshot``, whose largest count is
    the checkpoints since it, so the last of them holds the snapshot); its parents that far
    up are kept too."""
    parents: dict[CheckpointKey, str | None] = {}
    depth: dict[CheckpointKey, int] = {}
    newest: dict[tuple[str, str], str] = {}
    for e in entries:
        if e.kind != "c":
            continue
        key = (e.thread_id, e.ns, e.checkpoint_id)
        parents[key] = e.body[4]
        newest[key[:2]] = max(newest.get(key[:2], ""), e.checkpoint_id)
        try:
            counters = json.loads(e.body[8]).get("counters_since_delta_snapshot") or {}
            counts = [c for v in counters.values() for c in (v if isinstance(v, list) else [v])]
            depth[key] = max((int(c) for c in counts), default=0)
        except (ValueError, TypeError, AttributeError):
            depth[key] = len(entries)  # unreadable: keep every ancestor in the batch
    kept = {(t, ns, cid) for (t, ns), cid in newest.items()}
    todo = list(kept)
    while todo:
        t, ns, cid = todo.pop()
        parent = parents[(t, ns, cid)]
        for _ in range(depth[(t, ns, cid)]):
            if parent is None or (t, ns, parent) not in parents:
                break
            if (t, ns, parent) not in kept:
                kept.add((t, ns, parent))
                todo.append((t, ns, parent))
            parent = parents[(t, ns, parent)]
    return kept


def _plan(ctx: Context, entries: list[Entry]) -> _Batch:
    """Apply the flush policy: ``all`` keeps every checkpoint; ``latest`` keeps, per thread
    and namespace, the newest checkpoint of the batch (every blob, so it stays whole) and
    the ones a `DeltaChannel` rebuilds its value from (`_latest_kept`), and drops the
    writes of the checkpoints it skipped."""
    batch = _Batch()
    entries = sorted(entries, key=lambda e: e.order)
    skipped: set[CheckpointKey] = set()
    if ctx.config.flush_policy == "latest":
        kept = _latest_kept(entries)
        skipped = {
            (e.thread_id, e.ns, e.checkpoint_id)
            for e in entries
            if e.kind == "c" and (e.thread_id, e.ns, e.checkpoint_id) not in kept
        }
    for e in entries:
        if e.kind == "c":
            if (e.thread_id, e.ns, e.checkpoint_id) in skipped:
                batch.add_blobs_only(e)
            else:
                batch.add_checkpoint(e)
        elif (e.thread_id, e.ns, e.checkpoint_id) not in skipped:
            batch.add_writes(e)
    return batch


Rejected = list[tuple[str, str]]  # (entry id, why Postgres or the decoder refused it)


def _commit(ctx: Context, entries: list[Entry], rejected: Rejected) -> Op[list[dict[str, Any]]]:
    """Write entries to Postgres in one transaction; when Postgres rejects it, split the
    entries in halves until each entry at fault is alone and add it to ``rejected``.
    Returns the namespace versions the commits gave."""
    statements = _plan(ctx, entries).statements(ctx)
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


def flush_batch(ctx: Context, consumer: str | None = None, *, shard: int | None = None) -> Op[int]:
    """Move one batch of journal entries to Postgres; returns how many it took off the
    journal (entries Postgres rejected, now dead letters, included). ``consumer`` names
    the flusher in the group (default: this process's background flusher). ``shard``: the
    journal to take it from; default: the next shard, in turn, that holds entries (0 when
    none has any). Acknowledgements that could not be sent since a batch committed go
    first."""
    yield from _acknowledge_late(ctx)
    if shard is not None or ctx.layout.shards == 1:
        return (yield from _flush_shard(ctx, consumer, shard or 0))
    states = yield from _states(ctx, range(ctx.layout.shards))
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
    """Send again the acknowledgements of batches that committed while Redis could not be
    reached (acknowledging twice is harmless: entries no longer pending only drop their
    thread's copy, which reads warm back from Postgres)."""
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


def _flush_shard(ctx: Context, consumer: str | None, shard: int) -> Op[int]:
    layout = ctx.layout
    reclaim_ms = int(seconds(ctx.config.reclaim_after) * 1000)
    raw = yield shard_calls.flush_read(
        layout, shard, group=GROUP, consumer=consumer or ctx.consumer,
        count=ctx.config.flush_batch, reclaim=reclaim_ms, cap=ctx.config.flush_batch_bytes,
        forget=reclaim_ms * FORGET_CONSUMER_AFTER,
    )
    if not raw:
        return 0
    entries: list[Entry] = []
    rejected: Rejected = []
    for r in raw:
        try:
            entries.append(_genuine(ctx, r))
        except (ValueError, TypeError, KeyError, IndexError, FrameError) as exc:
            entry_id = r[0].decode()
            what = "not genuine (no valid seal)" if isinstance(exc, FrameError) else "undecodable"
            rejected.append((entry_id, f"{what} journal entry: {exc}"))
            entries.append(Entry(entry_id, "?", "", "", "", [], 0))
    good = [e for e in entries if e.kind != "?"]
    versions = yield from _commit(ctx, good, rejected)
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


def each_shard(ctx: Context, requests: Sequence[Hot]) -> Op[list[Any]]:
    """Run one request per shard: a single call on one shard, else one batch (one round
    trip on a single node; a cluster driver sends its scripts one by one)."""
    if len(requests) == 1:
        return [(yield requests[0])]
    return list((yield HotBatch(tuple(requests))))


@dataclass(frozen=True, slots=True)
class JournalState:
    """The journal at one moment."""

    oldest: str  # entry id, "" if empty
    newest: str
    length: int
    bytes: int  # payload bytes it holds
    dead_letters: int  # entries Postgres rejected, waiting for an operator


def _state_request(ctx: Context, shard: int) -> Hot:
    return shard_calls.journal_state(ctx.layout, shard)


def _states(ctx: Context, shards: Sequence[int]) -> Op[list[JournalState]]:
    replies = yield from each_shard(ctx, [_state_request(ctx, k) for k in shards])
    return [
        JournalState(first.decode(), last.decode(), int(length), int(size), int(dead))
        for first, last, length, size, dead in replies
    ]


def journal_state(ctx: Context) -> Op[JournalState]:
    """The journal's oldest and newest entry ids, length, bytes and dead letters (over
    every shard: the oldest entry of any, the newest of any, the sums)."""
    states = yield from _states(ctx, range(ctx.layout.shards))
    ids = [s.oldest for s in states if s.oldest] + [s.newest for s in states if s.newest]
    ordered = sorted(ids, key=stream_order)
    return JournalState(
        ordered[0] if ordered else "",
        ordered[-1] if ordered else "",
        sum(s.length for s in states),
        sum(s.bytes for s in states),
        sum(s.dead_letters for s in states),
    )


def probe_request(ctx: Context) -> Hot:
    """A cheap hot request that shows whether Redis answers (shard 0's journal state)."""
    return _state_request(ctx, 0)


def _leave_requests(ctx: Context, consumer: str, shards: Sequence[int]) -> list[Hot]:
    """Remove ``consumer`` from the groups of ``shards``, each unless it still holds
    entries there."""
    return [shard_calls.journal_leave(ctx.layout, k, GROUP, consumer) for k in shards]


def leave_request(ctx: Context, consumer: str | None = None) -> Hot | HotBatch:
    """Remove a consumer (default: this saver's) from every shard's group, unless it still
    holds entries there."""
    requests = _leave_requests(ctx, consumer or ctx.consumer, range(ctx.layout.shards))
    return requests[0] if len(requests) == 1 else HotBatch(tuple(requests))


def flush(ctx: Context, timeout: float | None, thread_ids: Sequence[str] | None = None) -> Op[int]:
    """Drain until every entry present when called is in Postgres (or, rejected by it, in
    the dead letters); returns entries moved. With ``thread_ids``, only the shards that
    hold those threads' entries are drained.

    Works alongside other flushers: entries they hold are waited for (or reclaimed once
    idle), so the promise holds whoever moved them. It reads as a consumer of its own, so
    it never takes over a batch this process's background flusher is committing (that
    flusher's late commit could otherwise land after a delete that this drain let pass).
    """
    yield from _acknowledge_late(ctx)
    layout = ctx.layout
    shards = sorted(
        range(layout.shards) if thread_ids is None else {layout.shard(t) for t in thread_ids}
    )
    states = yield from _states(ctx, shards)
    targets = {k: s.newest for k, s in zip(shards, states, strict=True) if s.newest}
    if not targets:
        return 0
    consumer = f"{ctx.consumer}:{secrets.token_hex(4)}"
    moved, started = 0, time.monotonic()
    left = sorted(targets)
    while True:
        for k in left:
            moved += yield from _flush_shard(ctx, consumer, k)
        states = yield from _states(ctx, left)
        done = [
            k
            for k, s in zip(left, states, strict=True)
            if not s.oldest or stream_order(s.oldest) > stream_order(targets[k])
        ]
        if done:
            yield from each_shard(ctx, _leave_requests(ctx, consumer, done))
            left = [k for k in left if k not in done]
        if not left:
            return moved
        if timeout is not None and time.monotonic() - started >= timeout:
            raise FlushTimeoutError(
                f"flush: entries up to {max(targets.values(), key=stream_order)} still "
                f"unflushed after {timeout:.1f} s"
            )
        yield Pause(0.005)


# --------------------------------------------------------------------------- dead letters


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A journal entry Postgres rejected, kept until an operator retries or drops it."""

    id: str  # the dead letter's own id
    entry_id: str  # the journal entry it was
    reason: str
    kind: str  # "checkpoint", "writes" or "?" (undecodable)
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    size: int


def _dead_letter(ctx: Context, raw: list[Any], shard: int) -> DeadLetter:
    letter_id, fields = raw[0].decode(), raw[1]
    values = dict(zip(fields[::2], fields[1::2], strict=True))
    data = values.get(b"d", b"")
    try:
        e = _genuine(ctx, [values.get(b"entry", b""), [b"d", data]])
        kind = "checkpoint" if e.kind == "c" else "writes"
        where = (e.thread_id, e.ns, e.checkpoint_id)
    except (ValueError, TypeError, KeyError, IndexError, FrameError):
        kind, where = "?", ("", "", "")
    return DeadLetter(
        f"{shard}/{letter_id}" if ctx.layout.sharded else letter_id,
        values.get(b"entry", b"").decode(),
        values.get(b"reason", b"").decode(errors="replace"),
        kind,
        *where,
        len(data),
    )


def dead_letters(ctx: Context, limit: int = 1000) -> Op[list[DeadLetter]]:
    """The dead letters, at most ``limit`` in all, oldest first; with shards, shard by
    shard (shard 0's oldest first, then shard 1's, ...), so a ``limit`` below the total
    leaves out the last shards' letters. A sharded layout's letter ids are
    ``<shard>/<stream id>``."""
    layout = ctx.layout
    replies = yield from each_shard(
        ctx, [shard_calls.dead_letters(layout, k, "-", limit) for k in range(layout.shards)]
    )
    letters = [
        _dead_letter(ctx, r, k) for k, reply in enumerate(replies) for r in reply or []
    ]
    return letters[:limit]


def resolve_dead_letter(ctx: Context, letter_id: str, action: str) -> Op[str]:
    """``action="retry"``: put a dead letter back on the journal (once what Postgres
    rejected was fixed, e.g. a column widened); returns its new entry id. ``"drop"``:
    delete it for good; returns ``"dropped"``. Returns ``""`` if there is no such letter."""
    if action not in ("retry", "drop"):
        raise ConfigurationError(f"action must be 'retry' or 'drop', not {action!r}")
    layout = ctx.layout
    shard, stream_id = 0, letter_id
    if layout.sharded:
        head, _, stream_id = letter_id.partition("/")
        if not head.isdigit() or int(head) >= layout.shards:
            return ""
        shard = int(head)
    raw = yield shard_calls.dead_letters(layout, shard, stream_id, 1)
    if not raw or raw[0][0].decode() != stream_id:
        return ""
    letter = _dead_letter(ctx, raw[0], shard)
    if action == "retry" and letter.kind == "?":
        raise ConfigurationError(
            f"dead letter {letter_id} cannot be decoded; it can only be dropped")
    keys = layout.thread(letter.thread_id)
    if letter.kind != "?" and layout.shard(letter.thread_id) != shard:
        raise ConfigurationError(f"dead letter {letter_id} names a thread of another shard")
    # an undecodable letter names no thread (it can only be dropped)
    unflushed = (layout.nobody(shard) if letter.kind == "?" else keys).unflushed
    reply = yield shard_calls.dead_letter(
        layout, shard, unflushed=unflushed, letter=stream_id, action=action,
        member=keys.unflushed_member(letter.checkpoint_ns, letter.checkpoint_id))
    return bytes(reply).decode() if reply else ""
