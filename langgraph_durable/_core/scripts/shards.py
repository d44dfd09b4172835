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
