"""Redis keeps a bounded recent history per thread; older checkpoints come from Postgres."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis

from langgraph_durable import DurableSaver
from langgraph_durable._core.keys import ThreadKeys
from tests.support.graphs import chat_graph
from tests.support.servers import REDIS_URL


def test_hot_tier_keeps_a_bounded_history(make_saver: Any) -> None:
    """With hot_checkpoints=5, Redis never holds more than 10 checkpoints of a namespace
    nor blob versions only trimmed checkpoints used; every checkpoint still reads back
    whole, the old ones from Postgres."""
    saver: DurableSaver = make_saver(hot_checkpoints=5)
    config = {"configurable": {"thread_id": f"t-{uuid.uuid4()}"}}
    graph = chat_graph(saver)
    # durability "sync": under "async" a task's writes may commit before their checkpoint's
    # put and land in Redis after it, and such a put leaves the namespace to Postgres, so
    # the index starts again at the next put (docs/failure-model.md), fewer than 5 in it
    for i in range(8):  # 40 checkpoints
        graph.invoke({"messages": [("user", f"turn {i}")]}, config, durability="sync")
    saver.flush()  # write-behind trims only what has reached Postgres: flush, write again
    graph.invoke({"messages": [("user", "turn 8")]}, config, durability="sync")
    keys = ThreadKeys(saver.config.key_prefix, config["configurable"]["thread_id"])
    client = redis.Redis.from_url(REDIS_URL)
    assert 5 <= client.zcard(keys.index("")) <= 10
    assert client.hlen(keys.blobs("")) <= 10 * 3  # a few channels per checkpoint at most
    client.close()

    history = list(saver.list(config))
    assert len(history) == 45
    for tup in history:  # by id: recent ones from Redis, trimmed ones from Postgres
        again = saver.get_tuple(tup.config)
        assert again is not None
        assert again.checkpoint["channel_values"] == tup.checkpoint["channel_values"]
        assert again.pending_writes == tup.pending_writes
    out = graph.invoke({"messages": [("user", "last")]}, config)
    assert len(out["messages"]) == 40


@pytest.mark.parametrize("write_mode", ["behind"])
def test_unflushed_checkpoints_are_never_trimmed(make_saver: Any) -> None:
    """In write-behind mode a checkpoint still waiting for the flusher stays in Redis
    (with its blobs) however far past the bound the thread goes."""
    saver: DurableSaver = make_saver(hot_checkpoints=2, flush_interval=3600)
    config = {"configurable": {"thread_id": f"t-{uuid.uuid4()}"}}
    graph = chat_graph(saver)
    for i in range(4):  # 20 checkpoints, none flushed
        graph.invoke({"messages": [("user", f"turn {i}")]}, config)
    keys = ThreadKeys(saver.config.key_prefix, config["configurable"]["thread_id"])
    client = redis.Redis.from_url(REDIS_URL)
    assert client.zcard(keys.index("")) == 20
    history = list(saver.list(config))  # all from Redis: nothing is in Postgres yet
    assert len(history) == 20
    assert all(t.checkpoint["channel_values"] for t in history[:-1])
    saver.flush()
    graph.invoke({"messages": [("user", "after flush")]}, config)
    # the 20 flushed ones are gone; the 5 new, unflushed ones stay
    assert 5 <= client.zcard(keys.index("")) <= 7
    assert len(list(saver.list(config))) == 25
    client.close()
