"""Concurrent writes to one item: whatever order Postgres commits them in, the read tier
ends up serving the last one committed (or nothing, and reads go to Postgres), never an
earlier one.

Each test stops one writer at an exact point with a lock the test holds: a row lock (a
batch's second put waits for it, its first put inserted but not committed) or a trigger
that holds an insert before its conflict check (`paused_inserts`: the version the
statement drew is fixed by then, the row lock not yet taken).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import psycopg
import redis
from langgraph.store.base import GetOp, Item, PutOp

from langgraph_durable import DurableStore
from langgraph_durable._core import store as core
from langgraph_durable._core.requests import HotBatch
from langgraph_durable._core.store import entry_key
from tests.store.conftest import MakeStore
from tests.support.faults import private_redis
from tests.support.interleave import Stepped, in_thread, paused_inserts, wait_until_blocked_by
from tests.support.servers import POSTGRES_URL, REDIS_URL


def _ns() -> tuple[str, str]:
    return (f"o{uuid.uuid4().hex[:8]}", "mem")


def _pausing(namespace: tuple[str, str]) -> Any:
    """Inserts of values holding a "pause" key stop once their version is drawn."""
    return paused_inserts(f"{namespace[0]}.lgd_store_items", "NEW.value ? 'pause'")


def test_an_update_that_drew_its_version_first_but_committed_last_is_what_is_read(
        make_store: MakeStore, namespace: tuple[str, str]) -> None:
    """Put B draws its version, then put A commits before B takes the row: B commits last,
    so every store reads B (from Postgres, or from Redis once filled), not A."""
    late, early, reader = make_store(), make_store(), make_store()
    ns = _ns()
    late.put(ns, "k", {"v": 0})
    assert reader.get(ns, "k").value == {"v": 0}  # type: ignore[union-attr]  # cached
    with _pausing(namespace) as pause:
        late_put = in_thread(lambda: late.put(ns, "k", {"v": "late", "pause": 1}))
        pause.reached()
        early.put(ns, "k", {"v": "early"})
        pause.release()
        late_put.joined()
    for store in (reader, early, late, reader):
        assert store.get(ns, "k").value == {"v": "late", "pause": 1}  # type: ignore[union-attr]


def test_an_insert_after_a_delete_it_waited_for_is_what_is_read(
        make_store: MakeStore, namespace: tuple[str, str]) -> None:
    """Put B draws its version, a delete takes and removes the row, then B inserts the item
    anew: B is the last write, so no store reads the item as deleted."""
    late, deleter, reader = make_store(), make_store(), make_store()
    ns = _ns()
    late.put(ns, "k", {"v": 0})
    assert reader.get(ns, "k").value == {"v": 0}  # type: ignore[union-attr]
    with _pausing(namespace) as pause:
        late_put = in_thread(lambda: late.put(ns, "k", {"v": "late", "pause": 1}))
        pause.reached()
        deleter.delete(ns, "k")
        assert reader.get(ns, "k") is None
        pause.release()
        late_put.joined()
    for store in (reader, deleter, late, reader):
        assert store.get(ns, "k").value == {"v": "late", "pause": 1}  # type: ignore[union-attr]


def test_a_delete_that_found_nothing_does_not_hide_an_insert_committed_after_it(
        make_store: MakeStore, namespace: tuple[str, str]) -> None:
    """A batch inserts an item and waits (its next put needs a row the test holds); a
    delete of the item finds nothing (the insert is not committed) and returns; then the
    batch commits: the item is there, and every store reads it."""
    writer, deleter, reader = make_store(), make_store(), make_store()
    ns = _ns()
    writer.put(ns, "z", {"v": 0})
    schema = namespace[0]
    with psycopg.connect(POSTGRES_URL) as blocker:
        blocker.execute(f"SELECT 1 FROM {schema}.lgd_store_items "
                        "WHERE namespace = %s AND key = 'z' FOR UPDATE", (list(ns),))
        batch = in_thread(lambda: writer.batch(
            [PutOp(ns, "k", {"v": "inserted"}), PutOp(ns, "z", {"v": 1})]))
        wait_until_blocked_by(blocker)
        deleter.delete(ns, "k")
        assert reader.get(ns, "k") is None
        blocker.commit()
        batch.joined()
    for store in (reader, deleter, writer, reader):
        assert store.get(ns, "k").value == {"v": "inserted"}  # type: ignore[union-attr]
    assert reader.get(ns, "z").value == {"v": 1}  # type: ignore[union-attr]


def test_a_fill_of_a_row_read_before_a_put_never_lands_after_the_entry_went(
        make_store: MakeStore) -> None:
    """A reader misses, reads v1 from Postgres and stalls before its fill; a put of v2
    returns; its entry goes (its TTL ran out, an eviction, a restarted Redis's check: here
    deleted); then the stalled fill lands. It must be refused: every store reads v2."""
    reader, writer = make_store(), make_store()
    ns = _ns()
    writer.put(ns, "k", {"v": 1})
    key = entry_key(reader.config.key_prefix, ns, "k")
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.delete(key)  # nothing cached: the next get misses
        get = Stepped(reader, core.batch(reader.engine.context, reader.cache, [GetOp(ns, "k")]))
        get.until(lambda request: isinstance(request, HotBatch)
                  and request.requests[0].script.name == "store_fill")  # v1 read
        writer.put(ns, "k", {"v": 2})
        client.delete(key)  # the put's entry went
        (read,) = get.finish()
        assert isinstance(read, Item) and read.value == {"v": 1}  # as read before the put
    finally:
        client.close()
    for store in (reader, writer, make_store()):
        assert store.get(ns, "k").value == {"v": 2}  # type: ignore[union-attr]


def test_a_put_holds_the_entry_before_it_commits_even_when_redis_lost_its_scripts(
        tmp_path: Path, namespace: tuple[str, str]) -> None:
    """Redis lost its script cache (a restart, a failover, ``SCRIPT FLUSH``) after a
    writer's first put: its next put's hold meets ``NOSCRIPT``. The hold is still in Redis
    before the commit (readers go to Postgres meanwhile), and once the put returned every
    store reads its value."""
    schema, prefix = namespace
    with private_redis(tmp_path) as server:
        stores = [DurableStore(server.url, POSTGRES_URL, schema=schema, key_prefix=prefix)
                  for _ in range(3)]
        writer, reader, late = stores
        admin = redis.Redis(port=server.port)
        try:
            writer.setup()
            ns = _ns()
            writer.put(ns, "k", {"v": 1})  # the writer's process calls its scripts by SHA now
            assert reader.get(ns, "k").value == {"v": 1}  # type: ignore[union-attr]
            admin.script_flush()
            with _pausing(namespace) as pause:
                put = in_thread(lambda: writer.put(ns, "k", {"v": 2, "pause": 1}))
                pause.reached()  # the put's statement waits: not committed
                entry = admin.hgetall(entry_key(prefix, ns, "k"))
                assert entry.get(b"h") == b"1" and b"d" not in entry, entry
                assert reader.get(ns, "k").value == {"v": 1}  # type: ignore[union-attr]
                pause.release()
                put.joined()
            for store in (reader, writer, late):
                assert store.get(ns, "k").value == {"v": 2, "pause": 1}  # type: ignore[union-attr]
        finally:
            admin.close()
            for store in stores:
                store.close()
