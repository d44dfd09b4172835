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
from typing import Any

import psycopg
from langgraph.store.base import PutOp

from tests.store.conftest import MakeStore
from tests.support.interleave import in_thread, paused_inserts, wait_until_blocked_by
from tests.support.servers import POSTGRES_URL


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
