"""Write-behind: journal entries and the flush, as sans-I/O operations.

A write-behind ``put``/``put_writes`` updates the thread's hot keys and appends one entry
to the journal (a Redis Stream) in a single script. A flusher takes a batch through a
consumer group, writes it to Postgres in one transaction of idempotent upserts, and only
then acknowledges and deletes the entries. A flusher that dies mid-batch leaves its
entries pending; another claims them once they sat idle for ``reclaim_after``.

With a secret or encryption configured each entry is sealed (`_core.seal`), and the
flusher opens it before anything of it goes near Postgres: an entry that fails (written
into the stream by someone without the key) is logged and dropped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import ormsgpack

from langgraph_durable._core.codec import FrameError
from langgraph_durable._core.context import Context
from langgraph_durable._core.keys import ThreadKeys, journal_key
from langgraph_durable._core.records import Location, StoredCheckpoint, StoredWrite
from langgraph_durable._core.requests import Cold, Hot, Op, Pause, Statement
from langgraph_durable._core.seal import journal_place
from langgraph_durable.config import seconds

GROUP = "flushers"
logger = logging.getLogger("langgraph_durable")


def seal_entry(ctx: Context, payload: bytes) -> bytes:
    """An entry as the stream holds it: sealed to this prefix's journal when keyed."""
    seal = ctx.seal
    return seal.seal(payload, journal_place(ctx.config.key_prefix)) if seal.keyed else payload


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

    @property
    def order(self) -> tuple[int, int]:
        return stream_order(self.id)


def _decode(raw: list[Any]) -> Entry:
    entry_id, fields = raw[0], raw[1]
    data = dict(zip(fields[::2], fields[1::2], strict=True))[b"d"]
    body = ormsgpack.unpackb(data)
    return Entry(entry_id.decode(), body[0], body[1], body[2], body[3], body)


def _genuine(ctx: Context, raw: list[Any]) -> Entry | None:
    """The entry, opened with the seal when keyed; ``None`` (logged) when it fails: such an
    entry was not written by a saver holding the key, and must not be applied."""
    entry_id, fields = raw[0], raw[1]
    try:
        if ctx.seal.keyed:
            data = dict(zip(fields[::2], fields[1::2], strict=True)).get(b"d", b"")
            fields = [b"d", bytes(ctx.seal.open(data, journal_place(ctx.config.key_prefix)))]
        return _decode([entry_id, fields])
    except (FrameError, ormsgpack.MsgpackDecodeError, ValueError, TypeError, IndexError) as exc:
        logger.error(
            "journal entry %s of prefix %r is not genuine (%s): dropped, not flushed",
            entry_id.decode(),
            ctx.config.key_prefix,
            exc,
        )
        return None


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


def _plan(ctx: Context, entries: list[Entry]) -> _Batch:
    """Apply the flush policy: ``all`` keeps every checkpoint; ``latest`` keeps, per thread
    and namespace, the newest checkpoint of the batch (every blob, so it stays whole) and
    drops the writes of the checkpoints it skipped."""
    batch = _Batch()
    entries.sort(key=lambda e: e.order)
    newest: dict[tuple[str, str], str] = {}
    if ctx.config.flush_policy == "latest":
        for e in entries:
            if e.kind == "c":
                key = (e.thread_id, e.ns)
                newest[key] = max(newest.get(key, ""), e.checkpoint_id)
    skipped = {
        (e.thread_id, e.ns, e.checkpoint_id)
        for e in entries
        if e.kind == "c" and newest.get((e.thread_id, e.ns), e.checkpoint_id) != e.checkpoint_id
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


def flush_batch(ctx: Context) -> Op[int]:
    """Move one batch of journal entries to Postgres; returns how many it moved."""
    prefix = ctx.config.key_prefix
    journal = journal_key(prefix)
    raw = yield Hot(
        "flush_read",
        [journal],
        [
            GROUP,
            ctx.consumer,
            ctx.config.flush_batch,
            int(seconds(ctx.config.reclaim_after) * 1000),
        ],
    )
    if not raw:
        return 0
    decoded = [(r[0].decode(), _genuine(ctx, r)) for r in raw]
    entries = [e for _, e in decoded if e is not None]
    statements = _plan(ctx, entries).statements(ctx)
    versions: list[dict[str, Any]] = []
    if statements:
        versions = (yield Cold(statements))[-1] or []
    ack: list[str | bytes | int] = [GROUP, ctx.ttl_ms, len(decoded)]
    for entry_id, e in decoded:
        if e is None:  # acknowledged and deleted; its claimed thread is left alone
            rejected = f"{journal}:rejected"
            ack += [entry_id, rejected, "-", rejected]
            continue
        keys = ThreadKeys(prefix, e.thread_id)
        ack += [e.id, keys.unflushed, keys.unflushed_member(e.ns, e.checkpoint_id), keys.registry]
    for row in versions:
        keys = ThreadKeys(prefix, row["thread_id"])
        ack += [keys.versions, keys.version_field(row["checkpoint_ns"]), row["version"]]
    yield Hot("flush_ack", [journal], ack)
    return len(decoded)


def journal_state(ctx: Context) -> Op[tuple[str, str, int]]:
    """``(oldest entry id, newest entry id, length)`` of the journal (ids ``""`` if empty)."""
    first, last, length = yield Hot("journal_state", [journal_key(ctx.config.key_prefix)], [])
    return first.decode(), last.decode(), int(length)


def flush(ctx: Context, timeout: float | None) -> Op[int]:
    """Drain until every entry present when called is in Postgres; returns entries moved.

    Works alongside other flushers: entries they hold are waited for (or reclaimed once
    idle), so the promise holds whoever moved them.
    """
    _, target, _ = yield from journal_state(ctx)
    if not target:
        return 0
    moved, started = 0, time.monotonic()
    while True:
        moved += yield from flush_batch(ctx)
        oldest, _, _ = yield from journal_state(ctx)
        if not oldest or stream_order(oldest) > stream_order(target):
            return moved
        if timeout is not None and time.monotonic() - started >= timeout:
            raise TimeoutError(
                f"flush: entries up to {target} still unflushed after {timeout:.1f} s"
            )
        yield Pause(0.005)
