"""TTL: expired items are never returned, reads refresh when asked, the sweep is bounded."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg

from langgraph_durable import DurableStore
from langgraph_durable._core.store import sweep
from tests.store.conftest import MakeStore
from tests.support.servers import POSTGRES_URL


def _expire(store: DurableStore, ns: tuple[str, ...], seconds_from_now: float) -> None:
    """Move the items of ``ns`` to expire ``seconds_from_now`` (negative: in the past)."""
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'UPDATE "{store.config.schema}".lgd_store_items SET expires_at = '
                     "now() + make_interval(secs => %s) WHERE namespace = %s",
                     (seconds_from_now, list(ns)))


def _expires_at(store: DurableStore, ns: tuple[str, ...], key: str) -> object:
    with psycopg.connect(POSTGRES_URL) as conn:
        row = conn.execute(f'SELECT expires_at FROM "{store.config.schema}".lgd_store_items '
                           "WHERE namespace = %s AND key = %s", (list(ns), key)).fetchone()
    return row[0] if row else None


def test_expired_items_are_never_returned(store: DurableStore) -> None:
    """Once past its expiry an item is gone from get (even one read just before, so a
    cached copy would have served it), search and list_namespaces, before any sweep."""
    ns = (f"e{uuid.uuid4().hex[:8]}",)
    store.put(ns, "k", {"v": 1}, ttl=5)
    assert store.get(ns, "k") is not None
    _expire(store, ns, -1)
    assert store.get(ns, "k") is None
    assert store.search(ns) == []
    assert store.list_namespaces(prefix=ns) == []


def test_default_ttl_and_refresh_on_read(make_store: MakeStore) -> None:
    """default_ttl applies to a put without ttl; a get refreshes the expiry unless
    refresh_ttl=False; a search refreshes what it returns."""
    store = make_store(ttl={"default_ttl": 10, "refresh_on_read": True})
    ns = (f"r{uuid.uuid4().hex[:8]}",)
    store.put(ns, "k", {"v": 1})
    assert _expires_at(store, ns, "k") is not None
    _expire(store, ns, 30)
    before = _expires_at(store, ns, "k")
    store.get(ns, "k", refresh_ttl=False)
    assert _expires_at(store, ns, "k") == before
    store.get(ns, "k")
    refreshed = _expires_at(store, ns, "k")
    assert refreshed > before  # type: ignore[operator]
    _expire(store, ns, 30)
    store.search(ns)
    assert _expires_at(store, ns, "k") > before  # type: ignore[operator]


def test_put_without_ttl_clears_expiry(make_store: MakeStore) -> None:
    """ttl=None on a store with a default TTL stores an item that never expires."""
    store = make_store(ttl={"default_ttl": 10})
    ns = (f"n{uuid.uuid4().hex[:8]}",)
    store.put(ns, "k", {"v": 1}, ttl=None)
    assert _expires_at(store, ns, "k") is None


def _one_statement(schema: str, batch: int) -> Any:
    """The sweep's first statement alone: how many rows it deleted."""
    op = sweep(schema, batch)
    request = next(op)
    rows = yield request
    return len(rows[0])


def test_sweep_deletes_in_bounded_statements(store: DurableStore) -> None:
    """sweep_ttl deletes every expired item, at most batch per statement, and leaves live
    ones."""
    ns = (f"s{uuid.uuid4().hex[:8]}",)
    for n in range(7):
        store.put(ns, f"k{n}", {"n": n}, ttl=5)
    _expire(store, ns, -1)
    store.put(ns, "live", {"n": 99}, ttl=5)
    with psycopg.connect(POSTGRES_URL) as conn:
        expired = conn.execute(f'SELECT count(*) FROM "{store.config.schema}".lgd_store_items '
                               "WHERE expires_at <= now()").fetchone()[0]  # type: ignore[index]
    assert expired >= 7
    one = store.engine.run(_one_statement(store.config.schema, 3))
    assert one == 3
    assert store.sweep_ttl(batch=3) == expired - 3
    assert [i.key for i in store.search(ns)] == ["live"]
    assert store.sweep_ttl(batch=3) == 0
