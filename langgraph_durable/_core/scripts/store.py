"""Calls of the long-term memory store's scripts on one item's cache entry: one builder
per script, keys and arguments by the names of its header (see `registry`)."""

from __future__ import annotations

from langgraph_durable._core.requests import Hot
from langgraph_durable._core.scripts.registry import SCRIPTS


def get(entry: str, ticket: str, lease_ms: int) -> Hot:
    """The entry's version and data, unless a write holds it or nothing is cached; on a
    miss the entry keeps ``ticket`` for the read's fill (an entry made for it alone lives
    ``lease_ms``)."""
    return SCRIPTS["store_get"].call(entry=entry, ticket=ticket, lease_ms=lease_ms)


def fill(entry: str, ticket: str, version: int, data: str, ttl: int) -> Hot:
    """Cache a row read from Postgres if the read's ``ticket`` is still there, no write
    holds the entry and its version is newer."""
    return SCRIPTS["store_fill"].call(entry=entry, ticket=ticket, version=version, data=data,
                                      ttl=ttl)


def hold(entry: str, hold_ms: int) -> Hot:
    """Keep readers off the entry while a write commits."""
    return SCRIPTS["store_hold"].call(entry=entry, hold_ms=hold_ms)


def wrote(entry: str, version: int, data: str, ttl: int) -> Hot:
    """Release a committed write's hold and cache its row unless a newer one is."""
    return SCRIPTS["store_wrote"].call(entry=entry, version=version, data=data, ttl=ttl)
