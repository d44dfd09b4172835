"""Values and ids Postgres cannot store are refused when written, in both write modes:
an acknowledged write is always one Postgres will take."""

from __future__ import annotations

import math
import os
import uuid
from typing import Any

import psycopg
import pytest

from langgraph_durable import (
    ConfigurationError,
    DurableSaver,
    SerializationError,
    WriteRejectedError,
)
from langgraph_durable._core.keys import MAX_ID_BYTES, MAX_NAME_BYTES
from tests.support.checkpoints import cold_checkpoints, put_value
from tests.support.servers import POSTGRES_URL


@pytest.mark.parametrize(("metadata", "where"), [
    ({"temperature": math.nan}, "metadata['temperature']"),
    ({"limits": {"max": math.inf}}, "metadata['limits']['max']"),
    ({"scores": [1.0, -math.inf]}, "metadata['scores'][1]"),
    ({"tags": ["ok", "a\x00b"]}, "metadata['tags'][1]"),
    ({"nested": {"a\x00b": 1}}, "a key of metadata['nested']"),
    ({"note": "half \ud800 pair"}, "metadata['note']"),
])
def test_metadata_postgres_refuses_is_refused_at_put(
    saver: DurableSaver, metadata: dict[str, Any], where: str
) -> None:
    """NaN, Infinity, NUL and unpaired surrogates in metadata (LangGraph copies
    configurable scalars into it) raise `SerializationError` naming the key, and nothing
    is stored in either tier."""
    thread = f"t-{uuid.uuid4()}"
    with pytest.raises(SerializationError) as info:
        put_value(saver, thread, "v", metadata=metadata)
    assert where in str(info.value)
    assert info.value.thread_id == thread
    assert saver.get_tuple({"configurable": {"thread_id": thread}}) is None
    saver.flush()
    assert cold_checkpoints(saver.config.schema, thread) == 0


def test_metadata_that_only_looks_like_it_holds_a_nul_is_stored(saver: DurableSaver) -> None:
    """A backslash before "u0000" is text JSON can carry (its escape holds no NUL): the
    put is stored and the metadata reads back unchanged from both tiers."""
    thread = f"t-{uuid.uuid4()}"
    note = "JSON writes NUL as \\u0000, and \\\\u0000 is no NUL"
    config = put_value(saver, thread, "v", metadata={"note": note})
    found = saver.get_tuple(config)
    assert found is not None and found.metadata["note"] == note
    saver.flush()
    assert cold_checkpoints(saver.config.schema, thread) == 1
    cold = DurableSaver(saver.config.redis_url, saver.config.postgres_url,
                        key_prefix=f"{saver.config.key_prefix}-cold", schema=saver.config.schema)
    try:
        found = cold.get_tuple(config)
        assert found is not None and found.metadata["note"] == note
    finally:
        cold.close()


def test_ids_over_the_limit_are_refused_and_ids_at_it_are_stored(saver: DurableSaver) -> None:
    """A random thread id or namespace of `MAX_ID_BYTES` bytes (no compression helps it
    fit Postgres' btree) round-trips through both tiers; one byte more is a
    `ConfigurationError` that names the field and the limit, before anything is stored."""
    thread = os.urandom(MAX_ID_BYTES // 2).hex()
    ns = os.urandom(MAX_ID_BYTES // 2).hex()
    assert len(thread.encode()) == MAX_ID_BYTES
    config = put_value(saver, thread, "v", ns=ns)
    saver.put_writes(config, [("c" * MAX_NAME_BYTES, "w")], "t" * MAX_NAME_BYTES)
    saver.flush()
    assert cold_checkpoints(saver.config.schema, thread) == 1
    cold = DurableSaver(saver.config.redis_url, saver.config.postgres_url,
                        key_prefix=f"{saver.config.key_prefix}-cold", schema=saver.config.schema)
    try:
        tup = cold.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ns}})
        assert tup is not None and tup.pending_writes == [
            ("t" * MAX_NAME_BYTES, "c" * MAX_NAME_BYTES, "w")]
    finally:
        cold.close()
    too_long = os.urandom(1500).hex()[: MAX_ID_BYTES + 1]
    for thread_id, ns in ((too_long, ""), (f"t-{uuid.uuid4()}", too_long)):
        with pytest.raises(ConfigurationError, match=f"at most {MAX_ID_BYTES} bytes"):
            put_value(saver, thread_id, "v", ns=ns)
    with pytest.raises(ConfigurationError, match="task_id"):
        saver.put_writes(config, [("c", "w")], "t" * (MAX_NAME_BYTES + 1))
    with pytest.raises(ConfigurationError, match="channel name"):
        saver.put_writes(config, [("c" * (MAX_NAME_BYTES + 1), "w")], "task")
    saver.flush()
    assert cold_checkpoints(saver.config.schema, too_long) == 0


@pytest.mark.parametrize("write_mode", ["through"])
def test_a_row_postgres_rejects_is_a_rejection_not_an_outage(saver: DurableSaver) -> None:
    """When Postgres refuses a write-through row (here a constraint an operator added),
    `put` raises `WriteRejectedError` with the sqlstate, not "Postgres unavailable", and
    the thread stays writable and readable."""
    thread = f"reject-{uuid.uuid4()}"
    table = f'"{saver.config.schema}".lgd_checkpoints'
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f"ALTER TABLE {table} ADD CONSTRAINT lgd_test_reject "
                     f"CHECK (thread_id <> '{thread}')")
    try:
        with pytest.raises(WriteRejectedError) as info:
            put_value(saver, thread, "v")
        assert info.value.sqlstate == "23514"
        assert "rejected" in str(info.value)
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f"ALTER TABLE {table} DROP CONSTRAINT lgd_test_reject")
    put_value(saver, thread, "v")
    assert saver.get_tuple({"configurable": {"thread_id": thread}}) is not None


def test_metadata_nested_too_deep_is_refused_at_put(saver: DurableSaver) -> None:
    """Metadata nested 5,000 levels deep (past what the JSON encoder can walk) raises a
    SerializationError that says so, not Python's RecursionError, and stores nothing: the
    thread has no checkpoint in either tier."""
    deep: dict[str, Any] = {}
    inner = deep
    for _ in range(5000):
        inner["next"] = {}
        inner = inner["next"]
    thread = f"deep-{uuid.uuid4()}"
    with pytest.raises(SerializationError, match="nested too deep"):
        put_value(saver, thread, "v", metadata={"deep": deep})
    assert saver.get_tuple({"configurable": {"thread_id": thread}}) is None
    saver.flush()
    assert cold_checkpoints(saver.config.schema, thread) == 0
    put_value(saver, thread, "after", metadata={"deep": {"a": {"b": 1}}})
    found = saver.get_tuple({"configurable": {"thread_id": thread}})
    assert found is not None and found.metadata["deep"] == {"a": {"b": 1}}
