"""A namespace's version orders its commits as Postgres commits them, also when a statement
drew its version before it took the head row: a reader whose Postgres snapshot predates a
write never loads that older copy into Redis after the write landed there.

A statement that starts a namespace (``INSERT ... SELECT nextval(...)`` into ``lgd_heads``)
draws its version before it checks for a conflicting row; a trigger stops it right there
(`paused_inserts`) while another writer starts the namespace and commits, so the stopped
statement meets that row and takes the ``ON CONFLICT ... DO UPDATE`` path.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import psycopg
import pytest
import redis

from langgraph_durable._core import journal, ops
from langgraph_durable._core.keys import ThreadKeys
from langgraph_durable._core.requests import Cold
from tests.support.checkpoints import (
    config_of,
    forget_hot,
    put_after,
    put_value,
    value_checkpoint,
    value_of,
)
from tests.support.interleave import Stepped, in_thread, paused_inserts, script
from tests.support.servers import POSTGRES_URL, REDIS_URL


def _pausing(schema: str, thread: str, head: str | None) -> Any:
    """Inserts of ``thread``'s head rows with ``head`` (``None``: a namespace's first
    pending writes) stop once their version is drawn."""
    when = f"NEW.thread_id = '{thread}' AND NEW.head IS NOT DISTINCT FROM " + (
        "NULL" if head is None else f"'{head}'")
    return paused_inserts(f'"{schema}".lgd_heads', when)


def _head_version(schema: str, thread: str) -> int:
    with psycopg.connect(POSTGRES_URL) as conn:
        row = conn.execute(f'SELECT version FROM "{schema}".lgd_heads '
                           "WHERE thread_id = %s AND checkpoint_ns = ''", (thread,)).fetchone()
    assert row is not None
    return int(row[0])


def _no_intent_left(prefix: str, thread: str) -> None:
    """Until the thread's intents are gone (the writers' updates, sent without waiting,
    landed)."""
    client = redis.Redis.from_url(REDIS_URL)
    try:
        deadline = time.monotonic() + 10
        while client.zcard(ThreadKeys(prefix, thread).intents):
            assert time.monotonic() < deadline, "a writer's update never landed"
            time.sleep(0.01)
    finally:
        client.close()


@pytest.mark.parametrize("write_mode", ["through"])
def test_a_warm_read_between_two_first_writes_never_hides_the_later_commit(
        make_saver: Any, namespace: tuple[str, str]) -> None:
    """A run's first pending writes to checkpoint C1 (LangGraph's durability "async": they
    may come before C1) draw their version, then stop before they insert the head row;
    the put of C1 starts the namespace (a larger version) and commits; a reader misses
    (the writes' intent), reads C1 without the writes from Postgres and is slow to warm;
    the writes commit (onto the put's head row) and land in Redis, then the reader's warm
    lands. The writes were acknowledged, so every process must read C1 with them."""
    schema = namespace[0]
    writes_saver, put_saver = make_saver(), make_saver()
    reader = make_saver()
    thread = f"t-{uuid.uuid4()}"
    checkpoint, versions = value_checkpoint(put_saver, "v1")
    c1 = config_of(thread, checkpoint["id"])
    with _pausing(schema, thread, None) as pause:
        writes = in_thread(lambda: writes_saver.put_writes(
            c1, [("value", "pending")], task_id="task-1"))
        try:
            pause.reached()  # the writes' version is drawn; no head row yet
            put_saver.put({"configurable": {"thread_id": thread, "checkpoint_ns": ""}},
                          checkpoint, {"source": "input", "step": -1}, versions)
            put_version = _head_version(schema, thread)
            read = Stepped(reader, ops.get_tuple(reader.engine.context, config_of(thread)))
            read.until(script("warm"))  # busy (the writes' intent): C1 read from Postgres
        finally:
            pause.release()
            writes.joined()
    writes_version = _head_version(schema, thread)
    _no_intent_left(reader.config.key_prefix, thread)
    read.finish()  # the warm of C1 as read before the writes committed
    seen = {}
    for name, process in (("reader", reader), ("writer", writes_saver), ("put", put_saver),
                          ("new", make_saver())):
        tup = process.get_tuple(config_of(thread))
        assert tup is not None
        seen[name] = tup.pending_writes
    assert all(w == [("task-1", "value", "pending")] for w in seen.values()), (
        f"head version after the put {put_version}, after the writes {writes_version}; "
        f"pending writes read: {seen}")


@pytest.mark.parametrize("write_mode", ["behind"])
def test_a_warm_read_during_a_flush_never_hides_the_flushed_checkpoint(
        make_saver: Any, namespace: tuple[str, str]) -> None:
    """A flusher takes v2 (a child of v1) from the journal; Redis is then emptied (the
    journal and the thread's copy with it); the flush draws its version and stops before it
    takes the head row. Meanwhile the run's next pending writes to v2 go through Postgres
    (Redis holds nothing of the namespace) and commit, and a reader misses, reads v1 from
    Postgres (no entry left to drain) and is slow to warm. The flush commits v2 and its
    acknowledgement lands, then the reader's warm. v2 was acknowledged and is in Postgres:
    every process must read it, and the run must be able to extend it."""
    schema = namespace[0]
    flusher = make_saver(background_flush=False)
    writer, reader = make_saver(background_flush=False), make_saver(background_flush=False)
    thread = f"t-{uuid.uuid4()}"
    first = put_value(flusher, thread, "v1")
    flusher.flush()
    second = put_after(flusher, first, "v2")  # journaled, not in Postgres yet
    ctx = flusher.engine.context
    batch = Stepped(flusher, journal.flush_batch(ctx))
    batch.until(lambda request: isinstance(request, Cold))  # taken from the journal
    forget_hot(flusher, thread)
    shard = ctx.layout.shard(thread)
    client = redis.Redis.from_url(REDIS_URL)
    client.delete(ctx.layout.journal(shard), ctx.layout.journal_bytes(shard))  # emptied
    client.close()
    with _pausing(schema, thread, second["configurable"]["checkpoint_id"]) as pause:
        flushing = in_thread(batch.finish)
        try:
            pause.reached()  # the flush's version is drawn; the head row not taken
            writer.put_writes(second, [("value", "next")], task_id="task-2")  # via Postgres
            writes_version = _head_version(schema, thread)
            read = Stepped(reader, ops.get_tuple(reader.engine.context, config_of(thread)))
            read.until(script("warm"))  # a miss, then v1 from Postgres
        finally:
            pause.release()
            flushing.joined()
    flush_version = _head_version(schema, thread)
    assert read.finish().checkpoint["channel_values"]["value"] == "v1"  # read before v2
    seen = {name: value_of(process, config_of(thread)) for name, process in (
        ("reader", reader), ("writer", writer), ("flusher", flusher),
        ("new", make_saver(background_flush=False)))}
    assert set(seen.values()) == {"v2"}, (
        f"head version after the writes {writes_version}, after the flush {flush_version}; "
        f"latest read: {seen}")
