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


def _expired_count(store: DurableStore, ns: tuple[str, ...]) -> int:
    with psycopg.connect(POSTGRES_URL) as conn:
        return int(conn.execute(  # type: ignore[index]
            f'SELECT count(*) FROM "{store.config.schema}".lgd_store_items '
            "WHERE namespace = %s", (list(ns),)).fetchone()[0])


def test_replicas_sweep_once_per_interval(make_store: MakeStore) -> None:
    """With ``every``, a sweep runs only where no replica began one within that long: the
    first of two replicas sweeps, the second is told another did (``None``); once the
    interval passed, it sweeps. A sweep without ``every`` always runs."""
    first, second = make_store(), make_store()
    ns = (f"r{uuid.uuid4().hex[:8]}",)
    for n in range(3):
        first.put(ns, f"k{n}", {"n": n}, ttl=5)
    _expire(first, ns, -1)
    assert first.sweep_ttl(every=60) == 3
    second.put(ns, "late", {"n": 3}, ttl=5)
    _expire(second, ns, -1)
    assert second.sweep_ttl(every=60) is None
    assert first.sweep_ttl(every=60) is None
    assert _expired_count(second, ns) == 1
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'UPDATE "{first.config.schema}".lgd_store_sweeps '
                     "SET swept_at = now() - interval '61 seconds'")
    assert second.sweep_ttl(every=60) == 1
    first.put(ns, "again", {"n": 4}, ttl=5)
    _expire(first, ns, -1)
    assert first.sweep_ttl() == 1


def test_each_replica_runs_a_sweeper_thread_and_expired_items_go(
        make_store: MakeStore) -> None:
    """`start_ttl_sweeper` on two replicas sweeps at once and then every interval: items
    that expire meanwhile are deleted without anyone calling `sweep_ttl`; stopping returns
    True, and `close` stops a sweeper left running."""
    import time

    first, second = make_store(), make_store()
    ns = (f"w{uuid.uuid4().hex[:8]}",)
    for store in (first, second):
        store.start_ttl_sweeper(sweep_interval_minutes=0.5 / 60)
    assert first.start_ttl_sweeper(0.5 / 60) is first.start_ttl_sweeper(0.5 / 60)
    for n in range(4):
        first.put(ns, f"k{n}", {"n": n}, ttl=5)
    _expire(first, ns, -1)
    deadline = time.monotonic() + 10
    while _expired_count(first, ns) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _expired_count(first, ns) == 0
    assert first.stop_ttl_sweeper(timeout=5)
    future = second.start_ttl_sweeper()
    second.close()
    assert future.done()


def test_an_async_sweeper_task_deletes_expired_items_and_stops(make_store: MakeStore) -> None:
    """`astart_ttl_sweeper` is a task of the running loop doing the same."""
    import asyncio

    store = make_store()
    ns = (f"a{uuid.uuid4().hex[:8]}",)

    async def scenario() -> bool:
        task = await store.astart_ttl_sweeper(sweep_interval_minutes=0.5 / 60)
        await store.aput(ns, "k", {"n": 1}, ttl=5)
        _expire(store, ns, -1)
        for _ in range(100):
            if not _expired_count(store, ns):
                break
            await asyncio.sleep(0.1)
        stopped = await store.astop_ttl_sweeper(timeout=5)
        await store.aclose()
        return stopped and task.done()

    assert asyncio.run(scenario())
    assert _expired_count(store, ns) == 0


def test_a_sweep_interval_that_is_no_number_of_minutes_is_refused(store: DurableStore) -> None:
    import pytest

    from langgraph_durable import ConfigurationError

    for bad in (0, -1, "5", True, 8 * 24 * 60):
        with pytest.raises(ConfigurationError, match="sweep_interval_minutes"):
            store.start_ttl_sweeper(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="every"):
        store.sweep_ttl(every=-1)
