"""Write-through's update of Redis after the commit is sent without waiting for its reply:
the writer returns as soon as Postgres committed, and the reply is read before the
connection's next use. These tests hold the drivers to that against real servers: the
update lands, a server that lost its scripts gets the source, a failed update is logged
and harms nothing after it, and nothing is left owed at close."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
import redis

from langgraph_durable import DurableSaver
from langgraph_durable._core import writes
from langgraph_durable._core.context import Latencies
from langgraph_durable._core.keys import Layout
from langgraph_durable._core.records import encode_writes, locate
from langgraph_durable._core.requests import Hot
from langgraph_durable._core.scripts import shards
from langgraph_durable._core.scripts import thread as scripts
from langgraph_durable._core.scripts.registry import SCRIPTS
from langgraph_durable._tiers import aio, sync
from langgraph_durable.config import SaverConfig
from tests.support.checkpoints import aput_value, put_value
from tests.support.faults import private_redis
from tests.support.servers import POSTGRES_URL, REDIS_URL


def _landed(redis_url: str, prefix: str, thread_id: str) -> tuple[list[bytes], list[bytes]]:
    """The thread's write intents and its root namespace's index, as Redis holds them."""
    keys = Layout(prefix).thread(thread_id)
    client = redis.Redis.from_url(redis_url)
    try:
        return client.zrange(keys.intents, 0, -1), client.zrange(keys.index(""), 0, -1)
    finally:
        client.close()


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_an_update_sent_without_waiting_lands(namespace: tuple[str, str], flavour: str) -> None:
    """A write-through put returns before reading Redis's reply to its update; the update
    lands all the same: the next read is served by Redis (the intent is gone, the index
    names the new checkpoint) and returns what was put."""
    schema, prefix = namespace
    thread = f"landed-{flavour}"

    async def scenario(saver: DurableSaver) -> Any:
        if flavour == "sync":
            put_value(saver, thread, "one")
            stored = put_value(saver, thread, "two")
            return stored, saver.get_tuple({"configurable": {"thread_id": thread}})
        await aput_value(saver, thread, "one")
        stored = await aput_value(saver, thread, "two")
        return stored, await saver.aget_tuple({"configurable": {"thread_id": thread}})

    with DurableSaver(REDIS_URL, POSTGRES_URL, schema=schema, key_prefix=prefix) as saver:
        saver.setup()
        stored, found = asyncio.run(scenario(saver))
        intents, index = _landed(REDIS_URL, prefix, thread)
    assert found is not None and found.checkpoint["channel_values"]["value"] == "two"
    assert intents == []
    assert index[-1].decode() == stored["configurable"]["checkpoint_id"]


def test_a_server_that_lost_its_scripts_gets_the_source_of_an_update_sent_without_waiting(
    namespace: tuple[str, str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis forgot every script (a restart, ``SCRIPT FLUSH``) between two puts: the update
    sent without waiting is answered ``NOSCRIPT``; the driver sends its source when it
    reads that reply, so the update still lands, with nothing logged."""
    schema, prefix = namespace
    with private_redis(tmp_path) as server:
        saver = DurableSaver(server.url, POSTGRES_URL, schema=schema, key_prefix=prefix)
        saver.setup()
        put_value(saver, "flushed", "one")
        put_value(saver, "flushed", "two")  # every script of a put is cached by now
        raw = redis.Redis.from_url(server.url)
        raw.script_flush()
        caplog.set_level(logging.DEBUG, logger="langgraph_durable")
        stored = put_value(saver, "flushed", "three")
        saver.close()  # reads the owed reply
        intents, index = _landed(server.url, prefix, "flushed")
        raw.close()
    assert intents == []
    assert index[-1].decode() == stored["configurable"]["checkpoint_id"]
    assert not [r for r in caplog.records if "sent without waiting" in r.getMessage()]


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_read_sent_behind_an_owed_update_both_answered_noscript_gets_both_sources(
    namespace: tuple[str, str], tmp_path: Path, flavour: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The next script is sent before the owed reply is read, so the two share a round
    trip. Redis forgot its scripts after the driver last sent them: the owed update and the
    read behind it are both answered ``NOSCRIPT``. The read gets its source and its own
    reply (Postgres's newest checkpoint: the update's intent still stands when it runs),
    the update gets its source after it and lands, and nothing is logged."""
    schema, prefix = namespace
    thread, config = f"noscript-{flavour}", {"configurable": {"thread_id": f"noscript-{flavour}"}}

    async def scenario(saver: DurableSaver, raw: redis.Redis) -> tuple[Any, Any]:
        if flavour == "sync":
            put_value(saver, thread, "one")
            saver.get_tuple(config)  # every script of a put and a read is cached now
            raw.script_flush()
            raw.ping()
            stored = put_value(saver, thread, "two")  # its update is owed, sent as EVALSHA
            return stored, saver.get_tuple(config)
        await aput_value(saver, thread, "one")
        await saver.aget_tuple(config)
        raw.script_flush()
        stored = await aput_value(saver, thread, "two")
        return stored, await saver.aget_tuple(config)

    with private_redis(tmp_path) as server:
        raw = redis.Redis.from_url(server.url)
        saver = DurableSaver(server.url, POSTGRES_URL, schema=schema, key_prefix=prefix)
        saver.setup()
        caplog.set_level(logging.DEBUG, logger="langgraph_durable")
        try:
            stored, found = asyncio.run(scenario(saver, raw))
            intents, index = _landed(server.url, prefix, thread)
            again = saver.get_tuple(config)
        finally:
            saver.close()
            raw.close()
    assert found is not None and found.checkpoint["channel_values"]["value"] == "two"
    assert intents == []
    assert index[-1].decode() == stored["configurable"]["checkpoint_id"]
    assert again is not None and again.config == stored
    assert not [r for r in caplog.records if "sent without waiting" in r.getMessage()]


def _bad_update(layout: Layout) -> Hot:
    """A put script Redis refuses (its arguments are missing): a Lua error in the reply."""
    keys = layout.thread("refused")
    return Hot(SCRIPTS["put"], [keys.intents, keys.index("")], ["token"], wait=False)


def _probe(layout: Layout) -> Hot:
    return shards.marks(layout, 0)


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_refused_update_is_logged_and_the_connection_serves_the_next_request(
    namespace: tuple[str, str], flavour: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An update sent without waiting that Redis refuses is not the error of whatever runs
    next: the driver logs it (script named) when it reads the reply, and the request that
    takes the connection gets its own reply."""
    schema, prefix = namespace
    config = SaverConfig(redis_url=REDIS_URL, postgres_url=POSTGRES_URL, schema=schema,
                         key_prefix=prefix)
    layout = Layout(prefix)
    caplog.set_level(logging.WARNING, logger="langgraph_durable")
    sent = 3

    if flavour == "sync":
        tiers = sync.Tiers(config, Latencies())
        tiers.open()
        try:
            replies = [tiers.hot(_bad_update(layout)) for _ in range(sent)]
            after = tiers.hot(_probe(layout))
        finally:
            tiers.close()
    else:
        async def scenario() -> tuple[list[Any], Any]:
            tiers = aio.Tiers(config, Latencies())
            await tiers.open()
            try:
                replies = [await tiers.hot(_bad_update(layout)) for _ in range(sent)]
                return replies, await tiers.hot(_probe(layout))
            finally:
                await tiers.close()

        replies, after = asyncio.run(scenario())
    assert replies == [None] * sent  # the operation never waits for these
    assert int(after) >= 0  # the marks script's own reply, not a refusal read in its place
    refused = [r for r in caplog.records if "put script" in r.getMessage()]
    assert len(refused) == sent, [r.getMessage() for r in caplog.records]
    assert all(r.levelno == logging.WARNING for r in refused)


def test_special_writes_landing_out_of_order_keep_each_fields_newest(
    namespace: tuple[str, str],
) -> None:
    """Two tasks' put_writes commit at versions v+1 (task a writes its interrupt again, as a
    resumed functional-API task does) and v+2 (task b's interrupt); their updates, sent
    without waiting, land in the other order. Redis then holds each field's newest value:
    a's second interrupt (not its first), and a late copy of a's first write changes
    nothing. Driven with the put_writes script itself, on the real Redis."""
    schema, prefix = namespace
    thread = "special-order"
    with DurableSaver(REDIS_URL, POSTGRES_URL, schema=schema, key_prefix=prefix) as saver:
        saver.setup()
        config = put_value(saver, thread, "x")
        saver.put_writes(config, [("__interrupt__", "a-first")], "task-a")
        ctx = saver.engine.context
        where = locate(config)
        keys = ctx.layout.thread(thread)
        base = 10**12  # newer than any version Postgres handed out

        def update(task: str, value: str, version: int) -> None:
            stored = encode_writes(ctx.codec, where, [("__interrupt__", value)], task, "")

            def op() -> Any:
                token_v = ctx.tokens.new()
                return (yield scripts.put_writes_through(
                    keys, where.checkpoint_ns, config["configurable"]["checkpoint_id"],
                    writes.write_fields(stored), token="", ttl=0, token_v=token_v,
                    version=version, stored=True))

            saver.engine.run(op())

        update("task-b", "b", base + 2)
        update("task-a", "a-second", base + 1)
        update("task-a", "a-first", base)  # a late copy of an older commit
        found = saver.get_tuple(config)
    assert found is not None
    assert dict(((t, c), v) for t, c, v in found.pending_writes) == {
        ("task-a", "__interrupt__"): "a-second", ("task-b", "__interrupt__"): "b"}
