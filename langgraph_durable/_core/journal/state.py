"""The journal's state (its entries, bytes and dead letters over every shard) and its
consumer group's membership.

A sharded layout (`keys.Layout`: a Redis Cluster, or ``journal_shards`` > 1) has one journal
per shard, each beside its threads' keys in one slot: each shard has its own consumer
group, so claims and the reclaim of a dead flusher's batch are per shard.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langgraph_durable._core.context import Context
from langgraph_durable._core.journal.entries import GROUP, stream_order
from langgraph_durable._core.requests import Hot, HotBatch, Op
from langgraph_durable._core.scripts import shards as shard_calls


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


def shard_states(ctx: Context, shards: Sequence[int]) -> Op[list[JournalState]]:
    replies = yield from each_shard(ctx, [_state_request(ctx, k) for k in shards])
    return [
        JournalState(first.decode(), last.decode(), int(length), int(size), int(dead))
        for first, last, length, size, dead in replies
    ]


def journal_state(ctx: Context) -> Op[JournalState]:
    """The journal's oldest and newest entry ids, length, bytes and dead letters (over
    every shard: the oldest entry of any, the newest of any, the sums)."""
    states = yield from shard_states(ctx, range(ctx.layout.shards))
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


def leave_requests(ctx: Context, consumer: str, shards: Sequence[int]) -> list[Hot]:
    """Remove ``consumer`` from the groups of ``shards``, each unless it still holds
    entries there."""
    return [shard_calls.journal_leave(ctx.layout, k, GROUP, consumer) for k in shards]


def leave_request(ctx: Context, consumer: str | None = None) -> Hot | HotBatch:
    """Remove a consumer (default: this saver's) from every shard's group, unless it still
    holds entries there."""
    requests = leave_requests(ctx, consumer or ctx.consumer, range(ctx.layout.shards))
    return requests[0] if len(requests) == 1 else HotBatch(tuple(requests))
