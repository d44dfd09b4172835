"""Every op of `batch`, sync and async, against real Postgres and Redis."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest
from langgraph.store.base import GetOp, ListNamespacesOp, MatchCondition, PutOp, SearchOp

from langgraph_durable import ConfigurationError, DurableStore


def _root() -> str:
    return f"t{uuid.uuid4().hex[:8]}"


def test_put_get_delete_round_trip(store: DurableStore) -> None:
    """A put is read back with its value and times, a replace keeps created_at, and a
    delete makes the item absent (twice: once from Postgres, once from the cache)."""
    ns = (_root(), "u1")
    store.put(ns, "k", {"a": 1, "nested": {"b": [1, 2]}})
    first = store.get(ns, "k")
    assert first is not None and first.value == {"a": 1, "nested": {"b": [1, 2]}}
    assert store.get(ns, "k") == first  # cached copy equals the row
    store.put(ns, "k", {"a": 2})
    second = store.get(ns, "k")
    assert second is not None and second.value == {"a": 2}
    assert second.created_at == first.created_at and second.updated_at > first.updated_at
    store.delete(ns, "k")
    assert store.get(ns, "k") is None
    assert store.get(ns, "k") is None


def test_async_ops_share_the_sync_store(store: DurableStore) -> None:
    """The same object serves abatch: an async put is read by a sync get and back."""
    ns = (_root(),)

    async def main() -> None:
        await store.aput(ns, "k", {"v": "async"})
        got = await store.aget(ns, "k")
        assert got is not None and got.value == {"v": "async"}
        found = await store.asearch(ns, filter={"v": "async"})
        assert [i.key for i in found] == ["k"]
        assert await store.alist_namespaces(prefix=ns) == [ns]
        await store.adelete(ns, "k")
        assert await store.aget(ns, "k") is None

    asyncio.run(main())
    assert store.get(ns, "k") is None


def test_batch_reads_see_state_before_writes_and_last_put_wins(store: DurableStore) -> None:
    """In one batch, reads see the store before the batch's writes; of two puts to one item
    the last wins; results come back in op order."""
    ns = (_root(),)
    store.put(ns, "k", {"v": 0})
    results = store.batch([
        PutOp(ns, "k", {"v": 1}), GetOp(ns, "k"), PutOp(ns, "k", {"v": 2}),
        SearchOp(ns), ListNamespacesOp(match_conditions=(MatchCondition("prefix", ns),)),
    ])
    assert results[0] is None and results[2] is None
    assert results[1] is not None and results[1].value == {"v": 0}  # type: ignore[union-attr]
    assert [i.value for i in results[3]] == [{"v": 0}]  # type: ignore[union-attr]
    assert results[4] == [ns]
    got = store.get(ns, "k")
    assert got is not None and got.value == {"v": 2}


def test_sibling_namespace_never_matches_a_prefix(store: DurableStore) -> None:
    """Matching is by whole segments: ("a", "bc") is not under ("a", "b"), in search and
    in list_namespaces (the official stores' sibling leak)."""
    root = _root()
    store.put((root, "b"), "k", {"x": 1})
    store.put((root, "bc"), "k", {"x": 2})
    store.put((root, "b", "c"), "k", {"x": 3})
    found = store.search((root, "b"))
    assert sorted(i.value["x"] for i in found) == [1, 3]
    assert store.list_namespaces(prefix=(root, "b")) == [(root, "b"), (root, "b", "c")]


def test_a_prefix_matches_through_the_namespace_index_segment_by_segment(
        store: DurableStore) -> None:
    """A prefix is an index range in byte order, the whole test: segments that extend the
    last one ("b", "b!", "b\u00e9", "b\U0001f600", and "b\x01", its successor itself) or
    sort between it and its successor never match; and in a table of thousands of items
    Postgres reads the range from the index instead of scanning every item."""
    import psycopg

    from langgraph_durable._core.sql.store import search_statement
    from tests.support.servers import POSTGRES_URL

    root = _root()
    for label in ("b", "b!", "b\u00e9", "b\U0001f600", "a", "c", "b\x01", "b\x01\x01"):
        store.put((root, label), "k", {"label": label})
        store.put((root, label, "deeper"), "k", {"label": label + "/deeper"})
    assert sorted(i.value["label"] for i in store.search((root, "b"))) == ["b", "b/deeper"]
    assert sorted(i.value["label"] for i in store.search((root, "b\x01"))) == [
        "b\x01", "b\x01/deeper"]
    assert store.list_namespaces(prefix=(root, "b"), max_depth=2) == [(root, "b")]
    assert sorted(i.value["label"] for i in store.search((root, "b!"))) == ["b!", "b!/deeper"]
    assert store.list_namespaces(prefix=(root, "b\u00e9")) == [
        (root, "b\u00e9"), (root, "b\u00e9", "deeper")]
    store.batch([PutOp((f"{root}-bulk", f"u{n % 300}"), f"k{n}", {"n": n})
                 for n in range(3000)])
    query, params = search_statement(store.config.schema, (f"{root}-bulk", "u7"), None,
                                     10, 0, False)
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'ANALYZE "{store.config.schema}".lgd_store_items')
        plan = "\n".join(row[0] for row in conn.execute(
            psycopg.sql.SQL("EXPLAIN ") + query, params).fetchall())
    assert "lgd_store_items_namespace_c_idx" in plan, plan
    assert len(store.search((f"{root}-bulk", "u7"), limit=100)) == 10


def test_search_limit_offset_and_order(store: DurableStore) -> None:
    """Search returns newest first, pages with limit and offset."""
    ns = (_root(),)
    for n in range(5):
        store.put(ns, f"k{n}", {"n": n})
    page = store.search(ns, limit=2, offset=1)
    assert [i.key for i in page] == ["k3", "k2"]
    assert len(store.search(ns, limit=10)) == 5


def test_list_namespaces_suffix_wildcards_depth_and_paging(store: DurableStore) -> None:
    """Prefix and suffix conditions with "*" matching one segment, max_depth cutting and
    deduplicating, limit/offset after that, sorted."""
    root = _root()
    for ns in [(root, "u1", "mem"), (root, "u2", "mem"), (root, "u2", "docs"), (root, "u3")]:
        store.put(ns, "k", {"x": 1})
    assert store.list_namespaces(prefix=(root, "*", "mem")) == [
        (root, "u1", "mem"), (root, "u2", "mem")]
    assert store.list_namespaces(prefix=(root,), suffix=("mem",)) == [
        (root, "u1", "mem"), (root, "u2", "mem")]
    assert store.list_namespaces(prefix=(root,), suffix=("*", "docs")) == [(root, "u2", "docs")]
    assert store.list_namespaces(prefix=(root,), max_depth=2) == [
        (root, "u1"), (root, "u2"), (root, "u3")]
    assert store.list_namespaces(prefix=(root,), max_depth=2, limit=1, offset=1) == [
        (root, "u2")]


def test_from_conn_string_sets_up_and_closes(namespace: tuple[str, str]) -> None:
    """from_conn_string yields a store that is set up and works."""
    from tests.support.servers import POSTGRES_URL, REDIS_URL

    schema, prefix = namespace
    with DurableStore.from_conn_string(REDIS_URL, POSTGRES_URL, schema=schema,
                                       key_prefix=prefix) as store:
        store.put(("fc",), "k", {"v": 1})
        got = store.get(("fc",), "k")
        assert got is not None and got.value == {"v": 1}


def test_a_store_made_from_a_saver_shares_its_connections(namespace: tuple[str, str]) -> None:
    """``DurableStore(saver=...)`` runs on the saver's pools, schema and prefix, sync and
    async; closing the store leaves the saver working; anything else beside ``saver``
    is refused."""
    from langgraph_durable import DurableSaver
    from tests.support.servers import POSTGRES_URL, REDIS_URL

    schema, prefix = namespace
    saver = DurableSaver(REDIS_URL, POSTGRES_URL, schema=schema, key_prefix=prefix)
    saver.setup()
    store = DurableStore(saver=saver, cache_ttl=60)
    assert store.engine is saver.engine and store.config.schema == schema
    ns = (_root(),)
    store.put(ns, "k", {"v": 1})
    assert asyncio.run(store.aget(ns, "k")).value == {"v": 1}  # type: ignore[union-attr]
    alone = DurableStore(REDIS_URL, POSTGRES_URL, schema=schema, key_prefix=prefix)
    assert alone.get(ns, "k").value == {"v": 1}  # type: ignore[union-attr]
    alone.close()
    tiers = saver.engine.tiers()
    store.close()
    assert saver.engine.tiers() is tiers and not tiers.pool.closed  # the saver's, still open
    assert saver.engine.run(saver_probe()) == 1
    saver.close()
    with pytest.raises(ConfigurationError, match="schema"):
        DurableStore(saver=saver, schema="other")


def saver_probe() -> Iterator[object]:
    """An operation that asks Postgres for 1 (the saver's pool still lends connections)."""
    from psycopg import sql

    from langgraph_durable._core.requests import Cold

    rows = (yield Cold.one(sql.SQL("SELECT 1 AS one"), {}, fetch=True))[0]
    return rows[0]["one"]
