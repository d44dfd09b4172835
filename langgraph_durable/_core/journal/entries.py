"""What a journal entry is: how a write-behind ``put``/``put_writes`` packs one and seals
it, and how a flusher decodes and opens it again.

With a secret or encryption configured each entry is sealed (`_core.seal`) and opened by
the flusher before anything of it goes near Postgres: an entry that fails (written into
the stream by someone without the key) goes to the dead letters, never to Postgres.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import ormsgpack

from langgraph_durable._core.context import Context
from langgraph_durable._core.records import Location, StoredCheckpoint, StoredWrite
from langgraph_durable._core.seal import journal_place

GROUP = "flushers"


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
    size: int = 0  # payload bytes, as the journal's byte counter counts them

    @property
    def order(self) -> tuple[int, int]:
        return stream_order(self.id)


def decode(raw: list[Any]) -> Entry:
    entry_id, fields = raw[0], raw[1]
    data = dict(zip(fields[::2], fields[1::2], strict=True))[b"d"]
    body = ormsgpack.unpackb(data)
    kind, thread_id, ns, checkpoint_id = body[0], body[1], body[2], body[3]
    if kind not in ("c", "w") or not all(
        isinstance(x, str) for x in (thread_id, ns, checkpoint_id)
    ):
        raise ValueError(f"not a journal entry: kind {kind!r}")
    return Entry(entry_id.decode(), kind, thread_id, ns, checkpoint_id, body, len(data))


def genuine(ctx: Context, raw: list[Any]) -> Entry:
    """`decode` of an entry opened with the seal when keyed (its size stays the sealed
    payload's, as the journal's byte counter counted it).

    Raises:
        FrameError: the entry was not sealed with this saver's key (forged, or written
            by a saver without it).
    """
    if not ctx.seal.keyed:
        return decode(raw)
    entry_id, fields = raw[0], raw[1]
    sealed = dict(zip(fields[::2], fields[1::2], strict=True))[b"d"]
    opened = ctx.seal.open(sealed, journal_place(ctx.config.key_prefix))
    entry = decode([entry_id, [b"d", bytes(opened)]])
    entry.size = len(sealed)
    return entry


def stream_order(entry_id: str) -> tuple[int, int]:
    """A stream entry id (``"<ms>-<seq>"``) as a sortable pair."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)
