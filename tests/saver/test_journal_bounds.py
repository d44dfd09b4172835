"""The write-behind journal stays bounded: batches by bytes, the backlog by bytes, the
consumer group by the savers alive; and the "latest" flush policy keeps what a
`DeltaChannel` is rebuilt from."""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

import pytest
import redis

from langgraph_durable import DurableSaver, TierUnavailableError
from langgraph_durable._core import journal
from langgraph_durable._core.keys import Layout
from tests.support.checkpoints import put_value
from tests.support.graphs import delta_graph
from tests.support.servers import POSTGRES_URL, REDIS_URL, drop_prefix

pytestmark = pytest.mark.parametrize("write_mode", ["behind"])

IDLE = 3600.0  # a flush interval that keeps the in-process flusher from draining
MB = 1024 * 1024


def test_a_backlog_of_large_entries_drains_in_byte_bounded_batches(make_saver: Any) -> None:
    """12 checkpoints of 8 MB with ``flush_batch_bytes`` = 16 MB: each batch carries at
    most two of them (the count bound alone would take all twelve in one read), and the
    whole backlog drains."""
    saver = make_saver(flush_interval=IDLE, flush_batch_bytes=16 * MB, background_flush=False)
    threads = [f"big-{uuid.uuid4()}" for _ in range(12)]
    for thread in threads:
        put_value(saver, thread, os.urandom(8 * MB - 16 * 1024))  # 8 MB with its envelope
    state = saver.engine.run(journal.journal_state(saver.engine.context))
    assert state.length == 12 and 95 * MB < state.bytes <= 96 * MB
    assert saver.engine.run(journal.flush_batch(saver.engine.context)) == 2
    started = time.monotonic()
    saver.flush()
    drained = time.monotonic() - started
    state = saver.engine.run(journal.journal_state(saver.engine.context))
    assert state.length == 0 and state.bytes == 0
    print(f"drained 10 x 8 MB in {drained:.2f}s")
    cold = DurableSaver(REDIS_URL, POSTGRES_URL, key_prefix=f"{saver.config.key_prefix}-cold",
                        schema=saver.config.schema)
    try:
        tup = cold.get_tuple({"configurable": {"thread_id": threads[-1]}})
        assert tup is not None
        assert len(tup.checkpoint["channel_values"]["value"]) == 8 * MB - 16 * 1024
    finally:
        cold.close()


def test_a_first_entry_larger_than_the_batch_cap_still_flushes(make_saver: Any) -> None:
    """An entry over ``flush_batch_bytes`` travels alone rather than never."""
    saver = make_saver(flush_interval=IDLE, flush_batch_bytes=1024, background_flush=False)
    thread = f"t-{uuid.uuid4()}"
    put_value(saver, thread, os.urandom(64 * 1024))
    put_value(saver, f"t-{uuid.uuid4()}", "small")
    assert saver.engine.run(journal.flush_batch(saver.engine.context)) == 1
    saver.flush()
    assert saver.health()["flush"]["unflushed"] == 0


def test_writes_are_refused_once_the_journal_holds_max_unflushed_bytes(make_saver: Any) -> None:
    """With Postgres not draining (no flusher), the byte bound refuses the write past it
    with `TierUnavailableError(tier="cold")`, storing nothing; a flush makes room again."""
    saver = make_saver(flush_interval=IDLE, max_unflushed_bytes=5 * MB // 2,
                       background_flush=False)
    for _ in range(3):  # 3 MB held: over the bound
        put_value(saver, f"t-{uuid.uuid4()}", os.urandom(MB))
    refused = f"t-{uuid.uuid4()}"
    with pytest.raises(TierUnavailableError) as info:
        put_value(saver, refused, "one more")
    assert info.value.tier == "cold" and "max_unflushed_bytes" in str(info.value)
    assert saver.get_tuple({"configurable": {"thread_id": refused}}) is None
    assert saver.health()["flush"]["unflushed_bytes"] > 3 * MB
    saver.flush()
    assert saver.health()["flush"]["unflushed_bytes"] == 0
    put_value(saver, refused, "one more")


def _consumers(saver: DurableSaver) -> list[dict[str, Any]]:
    client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        return list(client.xinfo_consumers(Layout(saver.config.key_prefix).journal(0),
                                           journal.GROUP))
    finally:
        client.close()


def test_closed_savers_leave_the_consumer_group(make_saver: Any, namespace: Any) -> None:
    """Opening, writing with and closing 20 savers leaves the group no bigger; a consumer
    that still holds entries stays (they wait to be reclaimed); a consumer idle for ten
    times ``reclaim_after`` with nothing pending is removed by the next idle flusher."""
    schema, prefix = namespace
    base = make_saver(flush_interval=IDLE)
    put_value(base, f"t-{uuid.uuid4()}", "x")
    base.flush()
    before = len(_consumers(base))
    for _ in range(20):
        with DurableSaver(REDIS_URL, POSTGRES_URL, key_prefix=prefix, schema=schema,
                          write_mode="behind", flush_interval=0.01) as saver:
            put_value(saver, f"t-{uuid.uuid4()}", "x")
            saver.flush()
    assert len(_consumers(base)) <= before
    client = redis.Redis.from_url(REDIS_URL)
    key = Layout(prefix).journal(0)
    try:
        put_value(base, f"t-{uuid.uuid4()}", "held")
        client.xreadgroup(journal.GROUP, "crashed-flusher", {key: ">"}, count=1)
        client.xgroup_createconsumer(key, journal.GROUP, "idle-saver")
    finally:
        client.close()
    names = {c["name"] for c in _consumers(base)}
    assert {"crashed-flusher", "idle-saver"} <= names
    sweeper = make_saver(flush_interval=IDLE, reclaim_after=0.02)
    time.sleep(0.3)
    sweeper.flush()  # reclaims the crashed flusher's entry, then finds nothing to do
    sweeper.engine.run(journal.flush_batch(sweeper.engine.context))
    names = {c["name"] for c in _consumers(base)}
    assert "idle-saver" not in names and "crashed-flusher" not in names


def test_latest_policy_keeps_every_delta_channel_entry(namespace: Any, write_mode: str) -> None:
    """A 7-turn delta log flushed with ``flush_policy="latest"`` in one batch reads all
    7 entries from Postgres once Redis is emptied."""
    schema, prefix = namespace
    prefix = f"{prefix}-latest"
    config = {"configurable": {"thread_id": f"t-{uuid.uuid4()}"}}
    with DurableSaver(REDIS_URL, POSTGRES_URL, key_prefix=prefix, schema=schema,
                      write_mode=write_mode, flush_policy="latest", flush_interval=IDLE,
                      background_flush=False) as saver:
        saver.setup()
        graph = delta_graph(saver)
        for _ in range(7):
            graph.invoke({"log": []}, config)
        assert saver.engine.run(journal.journal_state(saver.engine.context)).length > 7
        saver.flush()
    drop_prefix(prefix)
    with DurableSaver(REDIS_URL, POSTGRES_URL, key_prefix=prefix, schema=schema) as saver:
        graph = delta_graph(saver)
        assert graph.get_state(config).values["log"] == [f"entry {i}" for i in range(7)]
        stored = list(saver.list(config))
        assert len(stored) < 7 * 3  # the policy still skipped checkpoints
        for snapshot in graph.get_state_history(config):  # every stored one is whole
            n = len(snapshot.values.get("log", []))
            assert snapshot.values.get("log", []) == [f"entry {i}" for i in range(n)]
