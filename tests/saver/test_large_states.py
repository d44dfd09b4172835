"""Large states: compressed in both tiers inside the sealed frame, and bounded at put."""

from __future__ import annotations

import uuid

import psycopg
import pytest
import redis

from langgraph_durable import DurableSaver, SerializationError
from langgraph_durable._core.codec import COMPRESSED
from langgraph_durable._core.keys import ThreadKeys, blob_field
from tests.support.checkpoints import cold_checkpoints, put_value
from tests.support.servers import POSTGRES_URL, REDIS_URL

LARGE = "a line of conversation that repeats, as transcripts do. " * 6000  # ~340 kB


def _stored_blobs(saver: DurableSaver, thread_id: str) -> tuple[bytes, bytes | None]:
    """The frame of the thread's ``value`` channel in Postgres, and in Redis (if hot)."""
    schema, prefix = saver.config.schema, saver.config.key_prefix
    with psycopg.connect(POSTGRES_URL) as conn:
        row = conn.execute(f'SELECT version, blob FROM "{schema}".lgd_blobs '
                           "WHERE thread_id = %s AND channel = 'value'", (thread_id,)).fetchone()
    assert row is not None
    client = redis.Redis.from_url(REDIS_URL)
    try:
        hot = client.hget(ThreadKeys(prefix, thread_id).blobs(""), blob_field("value", row[0]))
    finally:
        client.close()
    return bytes(row[1]), hot  # type: ignore[return-value]


def _body_flags(frame: bytes, saver: DurableSaver) -> int:
    """The first byte of a checksummed or HMAC-sealed frame's body."""
    return frame[1 + (32 if saver.config.secret else 8)]


def _drop_hot_copy(saver: DurableSaver, thread_id: str) -> None:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        registry = ThreadKeys(saver.config.key_prefix, thread_id).registry
        keys = list(client.smembers(registry))  # type: ignore[arg-type]
        client.delete(registry, *keys)
    finally:
        client.close()


@pytest.mark.parametrize("secret", [None, "s" * 32], ids=["checksummed", "hmac"])
def test_large_values_are_compressed_in_both_tiers_and_read_back(
    make_saver: type[DurableSaver], secret: str | None
) -> None:
    """A value above compress_above is stored zstd-compressed (flagged inside the sealed
    body) in Postgres and in Redis, and reads back equal from either tier."""
    saver = make_saver(compress_above=4096, secret=secret)
    thread = f"t-{uuid.uuid4()}"
    put_value(saver, thread, LARGE)
    saver.flush()
    cold, hot = _stored_blobs(saver, thread)
    assert hot == cold
    assert len(cold) < len(LARGE) // 20 and _body_flags(cold, saver) & COMPRESSED
    config = {"configurable": {"thread_id": thread}}
    assert saver.get_tuple(config).checkpoint["channel_values"]["value"] == LARGE  # type: ignore[union-attr]
    _drop_hot_copy(saver, thread)
    reader = make_saver(compress_above=4096, secret=secret)
    assert reader.get_tuple(config).checkpoint["channel_values"]["value"] == LARGE  # type: ignore[union-attr]


def test_frames_stored_uncompressed_still_read_with_compression_on(
    make_saver: type[DurableSaver],
) -> None:
    """Values a saver stored without compression (an older release, or compress_above=0)
    read back through a saver that compresses."""
    old = make_saver(compress_above=0)
    thread = f"t-{uuid.uuid4()}"
    put_value(old, thread, LARGE)
    old.flush()
    cold, _ = _stored_blobs(old, thread)
    assert len(cold) > len(LARGE) and not _body_flags(cold, old) & COMPRESSED
    _drop_hot_copy(old, thread)
    new = make_saver(compress_above=1024)
    config = {"configurable": {"thread_id": thread}}
    assert new.get_tuple(config).checkpoint["channel_values"]["value"] == LARGE  # type: ignore[union-attr]


def test_an_oversized_state_is_refused_at_put_naming_its_channel(
    make_saver: type[DurableSaver],
) -> None:
    """A put whose serialized values exceed max_checkpoint_bytes raises SerializationError
    naming the largest channel and its size, and stores nothing in either tier (however
    well the value would compress)."""
    saver = make_saver(max_checkpoint_bytes=100_000)
    thread = f"t-{uuid.uuid4()}"
    with pytest.raises(SerializationError, match=r"channel 'value' with 3\d\d,\d\d\d bytes") as err:
        put_value(saver, thread, LARGE)
    assert err.value.channel == "value"
    assert "max_checkpoint_bytes (100,000)" in str(err.value)
    saver.flush()
    assert cold_checkpoints(saver.config.schema, thread) == 0
    assert saver.get_tuple({"configurable": {"thread_id": thread}}) is None
    put_value(saver, thread, "small")  # the thread itself is fine
    saver.flush()
    assert cold_checkpoints(saver.config.schema, thread) == 1
