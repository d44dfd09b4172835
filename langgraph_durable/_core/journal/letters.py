"""The dead letters: journal entries Postgres rejected (or that could not be decoded or
opened), kept in a stream beside the journal until an operator retries or drops them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from langgraph_durable._core.codec import FrameError
from langgraph_durable._core.context import Context
from langgraph_durable._core.journal.entries import genuine
from langgraph_durable._core.journal.state import each_shard
from langgraph_durable._core.requests import Op
from langgraph_durable._core.scripts import shards as shard_calls
from langgraph_durable.errors import ConfigurationError


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
        e = genuine(ctx, [values.get(b"entry", b""), [b"d", data]])
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
