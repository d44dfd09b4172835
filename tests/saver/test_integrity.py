"""Checksums: a damaged blob is repaired from the other tier or named precisely."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
import redis
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_durable import CorruptStateError, DurableSaver
from langgraph_durable._core.keys import ThreadKeys
from tests.support.servers import POSTGRES_URL, REDIS_URL, drop_prefix


def _flip(data: bytes) -> bytes:
    return data[:-1] + bytes((data[-1] ^ 0xFF,))


def _seed(saver: DurableSaver) -> dict[str, Any]:
    """One checkpoint in both tiers, written by ``saver``: the tests read it with another
    saver object, as another process would (the writer holds what it sent in its decoded
    cache, so damage done in Redis after the write does not reach its own reads)."""
    thread = f"t-{uuid.uuid4()}"
    checkpoint = empty_checkpoint()
    version = saver.get_next_version(None, None)
    checkpoint["channel_values"] = {"notes": ["a", "b"]}
    checkpoint["channel_versions"] = {"notes": version}
    config = saver.put({"configurable": {"thread_id": thread, "checkpoint_ns": ""}},
                       checkpoint, {"source": "input", "step": -1}, {"notes": version})
    saver.flush()  # write-behind: both tiers hold it from here on
    return config


def _hot_blob_field(saver: DurableSaver, thread: str) -> tuple[redis.Redis, str, bytes]:
    client = redis.Redis.from_url(REDIS_URL)
    key = ThreadKeys(saver.config.key_prefix, thread).blobs("")
    (field,) = client.hkeys(key)
    return client, key, field


def _cold(saver: DurableSaver, query: str, *params: Any) -> list[Any]:
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        cur = conn.execute(query.replace("{schema}", f'"{saver.config.schema}"'), params)
        return cur.fetchall() if cur.description else []


def test_damaged_hot_blob_is_served_and_repaired_from_postgres(make_saver: Any) -> None:
    """A flipped byte in Redis is caught by its checksum; Postgres serves and re-warms."""
    saver: DurableSaver = make_saver()
    config = _seed(make_saver())
    thread = config["configurable"]["thread_id"]
    client, key, field = _hot_blob_field(saver, thread)
    good = client.hget(key, field)
    assert good is not None
    client.hset(key, field, _flip(good))
    tup = saver.get_tuple(config)
    assert tup is not None and tup.checkpoint["channel_values"]["notes"] == ["a", "b"]
    assert client.hget(key, field) == good
    client.close()


def test_damaged_cold_blob_is_repaired_from_redis(make_saver: Any) -> None:
    """A flipped byte in Postgres, read by list(), is rewritten from the good hot copy."""
    saver: DurableSaver = make_saver()
    config = _seed(make_saver())
    thread = config["configurable"]["thread_id"]
    (good,) = _cold(saver, "SELECT blob FROM {schema}.lgd_blobs WHERE thread_id = %s", thread)[0]
    _cold(saver, "UPDATE {schema}.lgd_blobs SET blob = %s WHERE thread_id = %s",
          _flip(good), thread)
    (tup,) = list(saver.list({"configurable": {"thread_id": thread}}))
    assert tup.checkpoint["channel_values"]["notes"] == ["a", "b"]
    assert _cold(saver, "SELECT blob FROM {schema}.lgd_blobs WHERE thread_id = %s",
                 thread)[0][0] == good


def test_damage_in_both_tiers_names_thread_checkpoint_and_channel(make_saver: Any) -> None:
    """With no good copy left, CorruptStateError says exactly what is damaged."""
    saver: DurableSaver = make_saver()
    config = _seed(make_saver())
    thread = config["configurable"]["thread_id"]
    client, key, field = _hot_blob_field(saver, thread)
    client.hset(key, field, _flip(client.hget(key, field) or b""))
    client.close()
    (good,) = _cold(saver, "SELECT blob FROM {schema}.lgd_blobs WHERE thread_id = %s", thread)[0]
    _cold(saver, "UPDATE {schema}.lgd_blobs SET blob = %s WHERE thread_id = %s",
          _flip(good), thread)
    with pytest.raises(CorruptStateError) as info:
        saver.get_tuple(config)
    error = info.value
    assert (error.thread_id, error.checkpoint_ns, error.channel) == (thread, "", "notes")
    assert error.checkpoint_id == config["configurable"]["checkpoint_id"]
    assert thread in str(error) and "notes" in str(error)


def test_damaged_cold_checkpoint_without_hot_copy_raises(make_saver: Any) -> None:
    """Redis emptied and the Postgres checkpoint damaged: a clear error, not garbage."""
    saver: DurableSaver = make_saver()
    config = _seed(make_saver())
    thread = config["configurable"]["thread_id"]
    drop_prefix(saver.config.key_prefix)
    _cold(saver, "UPDATE {schema}.lgd_checkpoints SET checkpoint = "
                 "substring(checkpoint from 1 for 12) WHERE thread_id = %s", thread)
    with pytest.raises(CorruptStateError, match="checkpoint"):
        saver.get_tuple(config)
