"""Calls of the scripts on a journal shard's keys (the journal, its byte counter, its dead
letters, its stale marks): one builder per script, keys and arguments by the names of its
header (see `registry`)."""

from __future__ import annotations

from collections.abc import Sequence

from langgraph_durable._core.keys import Layout
from langgraph_durable._core.requests import Hot
from langgraph_durable._core.scripts.registry import SCRIPTS, Arg


def marks(layout: Layout, shard: int, seq: int | str = "") -> Hot:
    """Raise the shard's applied stale mark to ``seq`` ("": only read it); replies the mark."""
    return SCRIPTS["marks"].call(marks=layout.marks(shard), seq=seq)


def flush_read(layout: Layout, shard: int, *, group: str, consumer: str, count: int,
               reclaim: int, cap: int, forget: int) -> Hot:
    """Hand ``consumer`` a batch of the shard's journal entries."""
    return SCRIPTS["flush_read"].call(journal=layout.journal(shard), group=group,
                                      consumer=consumer, count=count, reclaim=reclaim,
                                      cap=cap, forget=forget)


def flush_ack(layout: Layout, shard: int, *, group: str, ttl: int, entries: Sequence[Arg],
              rejected: Sequence[Arg], versions: Sequence[Arg]) -> Hot:
    """Acknowledge a committed batch: ``entries`` (five values per entry), ``rejected``
    (two per rejected entry), ``versions`` (three per namespace flushed)."""
    return SCRIPTS["flush_ack"].call(
        journal=layout.journal(shard), dead=layout.dead(shard),
        journal_bytes=layout.journal_bytes(shard), group=group, ttl=ttl,
        n=len(entries) // 5, m=len(rejected) // 2, entries=entries, rejected=rejected,
        versions=versions)


def journal_state(layout: Layout, shard: int) -> Hot:
    """The shard's oldest and newest entry ids, length, bytes and dead letters."""
    return SCRIPTS["journal_state"].call(journal=layout.journal(shard),
                                         journal_bytes=layout.journal_bytes(shard),
                                         dead=layout.dead(shard))


def journal_leave(layout: Layout, shard: int, group: str, consumer: str) -> Hot:
    """Remove ``consumer`` from the shard's group, unless it still holds entries."""
    return SCRIPTS["journal_leave"].call(journal=layout.journal(shard), group=group,
                                         consumer=consumer)


def journal_release(layout: Layout, shard: int, group: str, consumer: str, reclaim: int,
                    ids: Sequence[Arg]) -> Hot:
    """Make the entries ``ids`` that ``consumer`` holds (none: all it holds) reclaimable
    at once (idle for ``reclaim`` ms)."""
    return SCRIPTS["journal_release"].call(journal=layout.journal(shard), group=group,
                                           consumer=consumer, reclaim=reclaim, ids=ids)


def dead_letters(layout: Layout, shard: int, first: str, count: int) -> Hot:
    """At most ``count`` of the shard's dead letters from id ``first`` ("-": the oldest)."""
    return SCRIPTS["dead_letters"].call(dead=layout.dead(shard), first=first, count=count)


def dead_letter(layout: Layout, shard: int, *, unflushed: str, letter: str, action: str,
                member: str) -> Hot:
    """Retry or drop one dead letter (``unflushed``, ``member``: its thread's)."""
    return SCRIPTS["dead_letter"].call(
        dead=layout.dead(shard), journal=layout.journal(shard),
        journal_bytes=layout.journal_bytes(shard), unflushed=unflushed, letter=letter,
        action=action, member=member)


def incarnation(layout: Layout, mode: str, run_id: str, token: str = "", lease: int = 0) -> Hot:
    """Ask whether the Redis process ``run_id`` was checked (taking the lock to check it,
    ``mode`` "check"), or record that it was (``mode`` "done"); see `hot.check_redis`."""
    return SCRIPTS["incarnation"].call(
        incarnation=layout.incarnation(), lock=layout.incarnation_lock(), mode=mode,
        run_id=run_id, token=token, lease=lease)


def incarnation_scan(layout: Layout, token: str, lease: int, cursor: str, count: int) -> Hot:
    """One SCAN step over the prefix's keys for `hot.check_redis` (the store's cached items
    it meets are deleted); replies the next cursor and the thread keys met."""
    return SCRIPTS["incarnation_scan"].call(
        lock=layout.incarnation_lock(), token=token, lease=lease, cursor=cursor,
        pattern=f"{layout.prefix}:*", count=count, store_prefix=f"{layout.prefix}:store:")
