"""The Redis read tier: gets served from it, coherent across store objects and processes,
and never in the way when Redis is down."""

from __future__ import annotations

import multiprocessing
import uuid
from typing import Any

import redis

from langgraph_durable import DurableStore
from langgraph_durable._core.store import entry_key
from tests.store.conftest import MakeStore
from tests.support.servers import POSTGRES_URL, REDIS_URL


def _ns() -> tuple[str, str]:
    return (f"c{uuid.uuid4().hex[:8]}", "mem")


def test_get_is_served_from_redis_after_the_first_read(store: DurableStore) -> None:
    """A get fills the entry; the next get reads it from Redis (seen by changing the
    cached data behind the store's back)."""
    ns = _ns()
    store.put(ns, "k", {"v": 1})
    store.get(ns, "k")
    key = entry_key(store.config.key_prefix, ns, "k")
    client = redis.Redis.from_url(REDIS_URL)
    data = client.hget(key, "d")
    assert data is not None
    client.hset(key, "d", data.replace(b'"v": 1', b'"v": 42'))
    got = store.get(ns, "k")
    assert got is not None and got.value == {"v": 42}


def test_two_stores_see_each_others_writes_at_once(make_store: MakeStore) -> None:
    """A put or delete through one store object is read by another at once, even when the
    other had the old value cached."""
    one, two = make_store(), make_store()
    ns = _ns()
    one.put(ns, "k", {"v": 1})
    assert two.get(ns, "k").value == {"v": 1}  # type: ignore[union-attr]
    assert two.get(ns, "k").value == {"v": 1}  # type: ignore[union-attr]  # cached now
    one.put(ns, "k", {"v": 2})
    assert two.get(ns, "k").value == {"v": 2}  # type: ignore[union-attr]
    one.delete(ns, "k")
    assert two.get(ns, "k") is None


def test_a_slow_fill_never_puts_back_an_older_version(store: DurableStore) -> None:
    """A fill carrying an older version than the cached one is refused (a reader that read
    Postgres before a write cannot overwrite the write's row in Redis)."""
    from langgraph_durable._core.scripts.registry import SCRIPTS

    ns = _ns()
    store.put(ns, "k", {"v": 1})
    store.put(ns, "k", {"v": 2})
    key = entry_key(store.config.key_prefix, ns, "k")
    client = redis.Redis.from_url(REDIS_URL)
    version = int(client.hget(key, "v"))  # type: ignore[arg-type]
    fill = SCRIPTS["store_fill"]
    old = '{"v": {"v": 1}, "c": "2026-01-01T00:00:00+00:00", "u": "2026-01-01T00:00:00+00:00"}'
    client.hset(key, "t", "read-1")  # the ticket of a read that missed before the put
    assert client.eval(fill.source, 1, key, "read-1", version - 1, old, 60) == 0
    assert store.get(ns, "k").value == {"v": 2}  # type: ignore[union-attr]


def test_a_write_in_flight_keeps_readers_on_postgres(store: DurableStore) -> None:
    """While a write holds an entry, gets read Postgres and do not fill it."""
    from langgraph_durable._core.scripts.registry import SCRIPTS

    ns = _ns()
    store.put(ns, "k", {"v": 1})
    store.get(ns, "k")
    key = entry_key(store.config.key_prefix, ns, "k")
    client = redis.Redis.from_url(REDIS_URL)
    client.eval(SCRIPTS["store_hold"].source, 1, key, 30_000)
    assert client.hget(key, "d") is None
    assert store.get(ns, "k").value == {"v": 1}  # type: ignore[union-attr]
    assert client.hget(key, "d") is None
    assert 0 < client.pttl(key) <= 30_000


def test_gets_and_puts_go_on_when_redis_is_down(namespace: tuple[str, str]) -> None:
    """With Redis unreachable, a store still puts, gets, deletes through Postgres."""
    schema, prefix = namespace
    store = DurableStore("redis://127.0.0.1:1/0", POSTGRES_URL, schema=schema,
                         key_prefix=prefix)
    try:
        store.setup()
        ns = _ns()
        store.put(ns, "k", {"v": 1})
        assert store.get(ns, "k").value == {"v": 1}  # type: ignore[union-attr]
        store.delete(ns, "k")
        assert store.get(ns, "k") is None
    finally:
        store.close()


def _writer(schema: str, prefix: str, ns: list[str], queue: Any, done: Any) -> None:
    store = DurableStore(REDIS_URL, POSTGRES_URL, schema=schema, key_prefix=prefix)
    for n in range(1, 21):
        store.put(tuple(ns), "k", {"n": n})
        queue.put(n)
        done.get()
    store.close()


def test_a_put_in_one_process_is_read_by_another_at_once(make_store: MakeStore,
                                                         namespace: tuple[str, str]) -> None:
    """Another process's put, once it returned, is what this process's get reads (its
    cached copy of the previous value never shows), twenty times over."""
    schema, prefix = namespace
    reader = make_store()
    ns = _ns()
    context = multiprocessing.get_context("spawn")
    queue, done = context.Queue(), context.Queue()
    child = context.Process(target=_writer, args=(schema, prefix, list(ns), queue, done))
    child.start()
    try:
        for _ in range(20):
            n = queue.get(timeout=30)
            assert reader.get(ns, "k").value == {"n": n}  # type: ignore[union-attr]
            assert reader.get(ns, "k").value == {"n": n}  # type: ignore[union-attr]
            done.put(True)
    finally:
        child.join(timeout=30)
    assert child.exitcode == 0
