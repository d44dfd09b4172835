"""A thread's hot copy one apply behind Postgres: Redis applied a write-through put's
update and then lost it, as a Redis Cluster primary does when it comes back from an older
AOF, or its replica is promoted before it received that update (the saver checks a
single node that restarts, not a cluster's nodes: docs/failure-model.md, "Redis
Cluster"). The copy is served until the thread is next written; these tests hold the
saver to that bound: the next write of the thread, whoever makes it, ends the stale reads.

The loss is made on the shared Redis, in this module's own prefix: the thread's keys (and
its shard's applied-marks record) are saved with ``DUMP`` before the put and put back
with ``RESTORE`` after it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from langgraph_durable import DurableSaver, ThreadConflictError
from tests.support.checkpoints import (
    config_of,
    put_after,
    put_line,
    restore_hot,
    snapshot_hot,
    value_of,
)
from tests.support.servers import REDIS_URL


@pytest.fixture
def write_mode() -> str:
    """Write-through: a write-behind put's only copy before its flush is in Redis, and one
    Redis loses is lost (docs/failure-model.md)."""
    return "through"


@pytest.fixture
def client() -> Iterator[redis.Redis]:
    conn = redis.Redis.from_url(REDIS_URL)
    try:
        yield conn
    finally:
        conn.close()


def _lost_apply(client: redis.Redis, saver: DurableSaver) -> tuple[str, list[Any]]:
    """A thread with v1 and v2 in both tiers, then v3 put (acknowledged, in Postgres) and
    its update lost in Redis: the thread and its three configs."""
    thread = f"t-{uuid.uuid4()}"
    first, second = put_line(saver, thread, ["v1", "v2"])
    snapshot = snapshot_hot(client, saver.config.key_prefix, thread)
    third = put_after(saver, second, "v3")
    restore_hot(client, saver.config.key_prefix, thread, snapshot)
    return thread, [first, second, third]


def test_a_run_that_read_the_stale_copy_conflicts_and_the_thread_moves_on(
        make_saver: Any, client: redis.Redis) -> None:
    """A run reads v2 from the stale copy (the documented window) and its put conflicts
    with Postgres's head, v3. The conflict ends the window: the next read, in this
    process and in another, is v3, and a turn from it is stored; the thread is not stuck
    conflicting on every turn until its hot copy expires."""
    saver: DurableSaver = make_saver()
    thread, (_, second, third) = _lost_apply(client, saver)
    assert value_of(saver, config_of(thread)) in ("v2", "v3")
    with pytest.raises(ThreadConflictError) as raised:
        put_after(saver, second, "v3b")
    assert raised.value.head == third["configurable"]["checkpoint_id"]
    other: DurableSaver = make_saver()
    assert value_of(saver, config_of(thread)) == "v3"
    assert value_of(other, config_of(thread)) == "v3"
    latest = saver.get_tuple(config_of(thread))
    assert latest is not None
    put_after(saver, latest.config, "v4")
    assert [t.checkpoint["channel_values"]["value"] for t in other.list(config_of(thread))] == [
        "v4", "v3", "v2", "v1"]


def test_writes_to_the_lost_checkpoint_end_the_stale_reads(
        make_saver: Any, client: redis.Redis) -> None:
    """The run that put v3 goes on and writes to it (a task's pending writes): Postgres
    holds v3 and Redis has no copy of it though its newest is v2, so from that write on
    every process reads v3, with the writes."""
    saver: DurableSaver = make_saver()
    thread, (_, _, third) = _lost_apply(client, saver)
    saver.put_writes(third, [("value", "w")], "task-1", "")
    other: DurableSaver = make_saver()
    for reader in (saver, other):
        found = reader.get_tuple(config_of(thread))
        assert found is not None
        assert found.checkpoint["channel_values"]["value"] == "v3"
        assert [(task, channel) for task, channel, _ in found.pending_writes] == [
            ("task-1", "value")]
