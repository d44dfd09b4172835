"""Checkpoints put, read and counted the way many tests need: one value in one channel (a
root, or a line of them after a parent), what Postgres holds of a thread, a thread's hot
copy forgotten by Redis or taken back to an older snapshot, Postgres refusing a thread, a
statement waiting on a row lock."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields
from typing import Any

import psycopg
import redis
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, empty_checkpoint

from langgraph_durable import DurableSaver
from langgraph_durable._core.keys import ThreadKeys
from langgraph_durable._core.records import INLINE_STR_CHARS
from tests.support.servers import POSTGRES_URL, REDIS_URL


@contextmanager
def twin(saver: DurableSaver) -> Iterator[DurableSaver]:
    """Another saver object on ``saver``'s configuration, as another process opens it: it
    holds none of the copies ``saver`` keeps of what it wrote (its decoded cache), so what
    ``saver`` reads of the twin's writes comes from the tiers."""
    other = DurableSaver(**{f.name: getattr(saver.config, f.name) for f in fields(saver.config)})
    try:
        yield other
    finally:
        other.close()


def blob_sized(text: str) -> str:
    """``text`` lengthened past what a checkpoint holds inline (`records.is_inline`), so
    that it is stored as a blob of its own, in a key (Redis) and a row (Postgres)."""
    return text.ljust(INLINE_STR_CHARS + 1, ".")


def value_checkpoint(saver: DurableSaver, value: object) -> tuple[Checkpoint, ChannelVersions]:
    """A new checkpoint whose only channel ``value`` holds ``value``, and its new versions
    (what ``put`` takes beside it)."""
    checkpoint = empty_checkpoint()
    version = saver.get_next_version(None, None)
    checkpoint["channel_values"] = {"value": value}
    checkpoint["channel_versions"] = {"value": version}
    return checkpoint, {"value": version}


def value_put_args(saver: DurableSaver, thread_id: str, value: object, ns: str,
               metadata: dict[str, object] | None) -> tuple[Any, ...]:
    """The arguments of a ``put`` of one root checkpoint whose channel ``value`` holds
    ``value`` (``metadata`` added to its own)."""
    checkpoint, versions = value_checkpoint(saver, value)
    return ({"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}, checkpoint,
            {"source": "input", "step": -1, **(metadata or {})}, versions)


def put_value(saver: DurableSaver, thread_id: str, value: object, *, ns: str = "",
              metadata: dict[str, object] | None = None) -> dict[str, object]:
    """Put one checkpoint whose only channel ``value`` holds ``value``; returns its config.

    It is a root (no parent). Written behind, it follows a read of its namespace, as a
    run's first write does: a root of a namespace Redis does not hold stays in Redis only
    once a read found the namespace empty (else it goes through Postgres)."""
    args = value_put_args(saver, thread_id, value, ns, metadata)
    if saver.config.write_mode == "behind":
        saver.get_tuple(args[0])
    return saver.put(*args)  # type: ignore[return-value]


async def aput_value(saver: DurableSaver, thread_id: str, value: object, *, ns: str = "",
                     metadata: dict[str, object] | None = None) -> dict[str, object]:
    """Async twin of `put_value` (``aput``)."""
    args = value_put_args(saver, thread_id, value, ns, metadata)
    if saver.config.write_mode == "behind":
        await saver.aget_tuple(args[0])
    return await saver.aput(*args)  # type: ignore[return-value]


def config_of(thread: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    """The config of ``thread``'s root namespace: its latest checkpoint, or
    ``checkpoint_id``."""
    configurable: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def put_after(saver: DurableSaver, config: dict[str, Any], value: str,
              metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    """One checkpoint whose channel ``value`` holds ``value``; ``config`` names the parent."""
    checkpoint, versions = value_checkpoint(saver, value)
    return saver.put(config, checkpoint, {"source": "loop", "step": 0, **(metadata or {})},
                     versions)


def put_line(saver: DurableSaver, thread: str, values: list[str]) -> list[dict[str, Any]]:
    """One checkpoint per value, each the child of the one before; their configs."""
    configs, parent = [], config_of(thread)
    for value in values:
        parent = put_after(saver, parent, value)
        configs.append(parent)
    return configs


def value_of(saver: DurableSaver, config: dict[str, Any]) -> Any:
    """The channel ``value`` of the checkpoint ``config`` reads (None: no checkpoint)."""
    tup = saver.get_tuple(config)
    return tup.checkpoint["channel_values"]["value"] if tup else None


def hot_keys_pattern(prefix: str, thread: str) -> str:
    """The ``SCAN`` pattern of every hot key of ``thread`` (its hash tag's braces escaped)."""
    return ThreadKeys(prefix, thread).base.replace("{", "[{]").replace("}", "[}]") + "*"


def _snapshot_keys(client: redis.Redis, prefix: str, thread: str) -> list[bytes]:
    """The thread's hot keys and the applied-marks record of its (single node's) shard."""
    return [*client.scan_iter(match=hot_keys_pattern(prefix, thread)), f"{prefix}:marks".encode()]


def snapshot_hot(client: redis.Redis, prefix: str, thread: str) -> dict[bytes, Any]:
    """The thread's hot keys and the applied-marks record as ``DUMP`` gives them (``None``
    for one absent), as an older snapshot of Redis holds them."""
    return {key: client.dump(key) for key in _snapshot_keys(client, prefix, thread)}


def restore_hot(client: redis.Redis, prefix: str, thread: str,
                snapshot: dict[bytes, Any]) -> None:
    """Redis back at ``snapshot`` for the thread (`snapshot_hot`): its keys and the
    applied-marks record as they were, and no others."""
    for key in _snapshot_keys(client, prefix, thread):
        client.delete(key)
    for key, dump in snapshot.items():
        if dump is not None:
            client.restore(key, 0, dump, replace=True)


def forget_hot(saver: DurableSaver, thread: str) -> None:
    """Every hot key of the thread gone, as after its TTL or a Redis restart."""
    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter(match=hot_keys_pattern(saver.config.key_prefix, thread)):
        client.delete(key)
    client.close()


def cold_checkpoints(schema: str, thread_id: str) -> int:
    """How many checkpoints of a thread Postgres holds."""
    with psycopg.connect(POSTGRES_URL) as conn:
        row = conn.execute(f'SELECT count(*) FROM "{schema}".lgd_checkpoints '
                           "WHERE thread_id = %s", (thread_id,)).fetchone()
    assert row is not None
    return int(row[0])


def cold_ids(schema: str, thread: str) -> set[str]:
    """The ids of a thread's checkpoints Postgres holds."""
    with psycopg.connect(POSTGRES_URL) as conn:
        rows = conn.execute(f'SELECT checkpoint_id FROM "{schema}".lgd_checkpoints '
                            "WHERE thread_id = %s", (thread,)).fetchall()
    return {r[0] for r in rows}


@contextmanager
def refusing(saver: DurableSaver, thread: str) -> Iterator[None]:
    """Postgres refuses checkpoints of ``thread`` (a constraint) while inside."""
    table = f'"{saver.config.schema}".lgd_checkpoints'
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f"ALTER TABLE {table} ADD CONSTRAINT lgd_test_refuse "
                     f"CHECK (thread_id <> '{thread}')")
    try:
        yield
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f"ALTER TABLE {table} DROP CONSTRAINT lgd_test_refuse")


def wait_for_row_lock(conn: psycopg.Connection[Any], schema: str,
                      table: str = "lgd_heads") -> None:
    """Until another session waits for a row lock on ``table`` of the schema (a statement
    of the saver's that reached rows a transaction of the test holds)."""
    for _ in range(500):
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND pid <> pg_backend_pid() AND query LIKE %s",
            (f'%"{schema}".{table}%',)).fetchone()
        if row and row[0]:
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"no statement waited for the {table} rows the test holds")
