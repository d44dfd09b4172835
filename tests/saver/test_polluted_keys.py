"""A key of another type in the saver's prefix (another client wrote a string where a hash
lives, a list where a stream lives) is a damaged copy: the read goes to Postgres, the key
is deleted as if evicted, one WARNING names it, and the thread goes on in both write modes."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable

import psycopg
import pytest
import redis

from langgraph_durable import DurableSaver
from langgraph_durable._core.keys import Layout, ThreadKeys, key_type
from tests.support.checkpoints import (
    aput_value,
    blob_sized,
    config_of,
    put_value,
    twin,
    wait_for_row_lock,
)
from tests.support.servers import POSTGRES_URL, REDIS_URL

Pick = Callable[[DurableSaver, ThreadKeys], str]
# the key polluted, and whether it holds the thread's data (a write-behind write of it
# not flushed yet is lost with it: the other client overwrote it)
KEYS: dict[str, tuple[Pick, bool]] = {
    "versions": (lambda s, k: k.versions, False),
    "registry": (lambda s, k: k.registry, False),
    "index": (lambda s, k: k.index(""), False),
    "intents": (lambda s, k: k.intents, False),
    "blobs": (lambda s, k: k.blobs(""), True),
    "checkpoint": (lambda s, k: k.checkpoint("", _head(s, k.thread_id)), True),
    "journal": (lambda s, k: s.engine.context.layout.journal(0), True),
}


# values stored as blobs, so that the namespace's blob key holds them
FIRST, SECOND, THIRD = (blob_sized(word) for word in ("first", "second", "third"))


def _head(saver: DurableSaver, thread_id: str) -> str:
    found = saver.get_tuple(config_of(thread_id))
    assert found is not None
    return str(found.checkpoint["id"])


def _value(saver: DurableSaver, thread_id: str) -> object:
    found = saver.get_tuple(config_of(thread_id))
    assert found is not None
    return found.checkpoint["channel_values"]["value"]


@pytest.mark.parametrize("kind", list(KEYS))
def test_a_key_of_another_type_is_a_damaged_copy(
    saver: DurableSaver, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Written over with a list, any key of a thread (or its shard's journal) costs a read
    from Postgres, never a raw WRONGTYPE: the thread's reads, writes and flushes go on, its
    acknowledged checkpoints are all there for another saver, and one WARNING names the
    key."""
    thread_id = f"polluted-{uuid.uuid4().hex[:8]}"
    pick, holds_data = KEYS[kind]
    put_value(saver, thread_id, FIRST)
    if holds_data or saver.config.write_mode == "through":
        saver.flush()
    else:  # behind: the second checkpoint is only in Redis when the key goes bad
        put_value(saver, thread_id, SECOND)
    key = pick(saver, saver.engine.context.layout.thread(thread_id))
    client = redis.Redis.from_url(REDIS_URL)
    client.delete(key)
    client.rpush(key, "another client's value")
    caplog.set_level(logging.WARNING, logger="langgraph_durable")

    saver.get_tuple(config_of(thread_id))  # falls back to Postgres (or drains first)
    put_value(saver, thread_id, THIRD)
    assert _value(saver, thread_id) == THIRD
    saver.flush()
    with twin(saver) as other:
        assert _value(other, thread_id) == THIRD
        history = [t.checkpoint["channel_values"]["value"]
                   for t in other.list(config_of(thread_id))]
    expected = [THIRD, FIRST] if holds_data or saver.config.write_mode == "through" else [
        THIRD, SECOND, FIRST]
    assert history == expected
    said = [r.getMessage() for r in caplog.records if key in r.getMessage()]
    if kind == "journal" and saver.config.write_mode == "through":
        assert said == []  # writing through, no script uses the journal
        return
    assert len(said) == 1, said
    assert "another client" in said[0] and "held a list" in said[0]
    assert client.type(key) != b"list"


@pytest.mark.parametrize("write_mode", ["through"])
def test_a_write_whose_intent_another_client_overwrote_is_read_at_once_elsewhere(
    make_saver: type[DurableSaver], namespace: tuple[str, str]
) -> None:
    """Written through, a put announces its intent, commits, then updates Redis without
    waiting. Another client overwrites the thread's intents key while the commit waits:
    the intent is gone and the update fails (WRONGTYPE), so Redis still holds the
    checkpoint before as the head. Another process reads the acknowledged checkpoint, not
    that one: the repaired key stands in for the intents it lost until the write
    deadline, so reads go to Postgres (before, the repair deleted the key and the read
    was served the older checkpoint, as the real-process checker found)."""
    schema, _ = namespace
    writer, reader = make_saver(write_mode="through"), make_saver(write_mode="through")
    thread_id = f"polluted-intent-{uuid.uuid4().hex[:8]}"
    put_value(writer, thread_id, FIRST)
    assert _value(reader, thread_id) == FIRST  # served from Redis
    intents = writer.engine.context.layout.thread(thread_id).intents
    client = redis.Redis.from_url(REDIS_URL)
    failed: list[BaseException] = []

    def put_second() -> None:
        try:
            put_value(writer, thread_id, SECOND)
        except BaseException as exc:  # the test reads it
            failed.append(exc)

    with psycopg.connect(POSTGRES_URL) as holding, psycopg.connect(
            POSTGRES_URL, autocommit=True) as watching:
        holding.execute(f'SELECT 1 FROM "{schema}".lgd_heads WHERE thread_id = %s FOR UPDATE',
                        (thread_id,))
        putting = threading.Thread(target=put_second)
        putting.start()
        wait_for_row_lock(watching, schema)  # announced, its commit waits
        client.delete(intents)
        client.set(intents, "another client's value")
    putting.join(30)
    assert not putting.is_alive() and failed == []
    assert client.type(intents) == b"string"  # the update after the commit failed on it
    assert _value(reader, thread_id) == SECOND
    assert _value(writer, thread_id) == SECOND
    put_value(writer, thread_id, THIRD)
    assert _value(reader, thread_id) == THIRD


def test_every_kind_of_key_is_known_by_its_name() -> None:
    """The type each key of a prefix holds is read from its name, in both layouts; a
    checkpoint id that ends like another kind of key (``:k``) is still a checkpoint."""
    for layout in (Layout("app"), Layout("app", shards=4)):
        keys = layout.thread("t1")
        assert key_type("app", keys.registry) == "set"
        assert key_type("app", keys.intents) == "zset"
        assert key_type("app", keys.versions) == "hash"
        assert key_type("app", keys.unflushed) == "hash"
        assert key_type("app", keys.index("ns")) == "zset"
        assert key_type("app", keys.blobs("ns")) == "hash"
        assert key_type("app", keys.checkpoint("", "x:k")) == "hash"
        assert key_type("app", layout.journal(1 % layout.shards)) == "stream"
        assert key_type("app", layout.journal_bytes(0)) == "string"
        assert key_type("app", layout.marks(0)) == "string"
        assert key_type("app", layout.dead(0)) == "stream"
    assert key_type("app", "other:{dDE}:k") is None
    assert key_type("app", "app:{dDE}:zzz") is None


async def test_the_asyncio_driver_repairs_a_key_of_another_type(
    saver: DurableSaver, caplog: pytest.LogCaptureFixture
) -> None:
    """The asyncio driver treats a key of another type as the blocking one does: the read
    goes on, the next write lands, one WARNING names the key."""
    thread_id = f"polluted-{uuid.uuid4().hex[:8]}"
    await aput_value(saver, thread_id, "first")
    await saver.aflush()
    key = saver.engine.context.layout.thread(thread_id).versions
    client = redis.Redis.from_url(REDIS_URL)
    client.delete(key)
    client.set(key, "another client's value")
    caplog.set_level(logging.WARNING, logger="langgraph_durable")
    await saver.aget_tuple(config_of(thread_id))
    await aput_value(saver, thread_id, "second")
    found = await saver.aget_tuple(config_of(thread_id))
    assert found is not None and found.checkpoint["channel_values"]["value"] == "second"
    await saver.aflush()
    assert client.type(key) == b"hash"
    assert len([r for r in caplog.records if key in r.getMessage()]) == 1
