"""The in-process decoded cache: never stale across processes, never shared with callers."""

from __future__ import annotations

import uuid
from typing import Any

from langgraph_durable import DurableSaver
from tests.support.graphs import chat_graph


def test_cache_serves_repeat_reads_and_sees_other_writers(make_saver: Any) -> None:
    """A second read is served from the cache; a write by another saver object (as by
    another process) is visible to the very next read."""
    reader: DurableSaver = make_saver()
    writer: DurableSaver = make_saver()
    config = {"configurable": {"thread_id": f"t-{uuid.uuid4()}"}}
    chat_graph(writer).invoke({"messages": [("user", "one")]}, config)
    writer.flush()
    first = reader.get_tuple(config)
    hits = reader.engine.context.cache.hits
    again = reader.get_tuple(config)
    assert reader.engine.context.cache.hits == hits + 1
    assert again == first

    chat_graph(writer).invoke({"messages": [("user", "two")]}, config)
    latest = reader.get_tuple(config)
    assert latest is not None and first is not None
    assert latest.checkpoint["id"] > first.checkpoint["id"]
    assert latest.checkpoint["channel_values"]["messages"][-1].content == "finish #7"

    writer.put_writes(latest.config, [("messages", "pending")], "task-x")
    with_write = reader.get_tuple(config)
    assert with_write is not None and with_write.pending_writes == [
        ("task-x", "messages", "pending")]


def test_callers_cannot_mutate_the_cache(saver: DurableSaver) -> None:
    """Mutating a returned tuple's values changes nothing for the next reader: neither the
    first read's (the cache then holds what Redis sent) nor a later one's (a decoded
    copy)."""
    config = {"configurable": {"thread_id": f"t-{uuid.uuid4()}"}}
    chat_graph(saver).invoke({"messages": [("user", "one")]}, config)
    mine = saver.get_tuple(config)
    for _ in range(3):
        assert mine is not None
        mine.checkpoint["channel_values"]["messages"][0].content = "tampered"
        mine.checkpoint["channel_values"]["messages"].clear()
        mine.metadata["step"] = 999
        mine = saver.get_tuple(config)
        assert mine is not None
        assert mine.checkpoint["channel_values"]["messages"][0].content == "one"
        assert mine.metadata["step"] != 999


def test_a_repeat_read_makes_its_copy_while_redis_answers(saver: DurableSaver,
                                                           monkeypatch: Any) -> None:
    """A read that holds a copy of the checkpoint asks Redis whether it is current and
    makes the caller's fresh copy while the answer is on its way: each read gets a copy
    made in flight (decoded from the record the run's last put left, then unpickled),
    all equal and none of them the same object. A copy made in flight for a
    checkpoint another writer replaced meanwhile is not used."""
    from langgraph_durable._core.context import TupleCache

    made: list[bool] = []
    load = TupleCache.load

    def spy(self: TupleCache, *args: Any) -> Any:
        made.append(len(args) > 4 and args[4] is not None)
        return load(self, *args)

    monkeypatch.setattr(TupleCache, "load", spy)
    config = {"configurable": {"thread_id": f"t-{uuid.uuid4()}"}}
    chat_graph(saver).invoke({"messages": [("user", "one")]}, config)
    reads = [saver.get_tuple(config) for _ in range(4)]
    assert made == [True] * 4  # the first one decodes what the run's last put sent
    assert all(r == reads[0] for r in reads)
    assert len({id(r.checkpoint) for r in reads if r is not None}) == 4

    chat_graph(saver).invoke({"messages": [("user", "two")]}, config)
    latest = saver.get_tuple(config)
    assert latest is not None and reads[0] is not None
    assert latest.checkpoint["id"] > reads[0].checkpoint["id"]
    assert latest.checkpoint["channel_values"]["messages"][-1].content == "finish #7"


def test_a_read_after_this_processs_put_is_what_redis_holds(make_saver: Any) -> None:
    """The read that follows a put of this process (an invoke's start) is answered "same"
    and decoded from what the put sent: it equals what another process reads from Redis,
    through a graph's steps (each put reuses its parent's blobs for the channels it did not
    change), a fork made by `update_state`, and pending writes added since."""
    mine: DurableSaver = make_saver()
    other: DurableSaver = make_saver()
    config = {"configurable": {"thread_id": f"t-{uuid.uuid4()}"}}
    graph = chat_graph(mine)
    for turn in ("one", "two"):
        graph.invoke({"messages": [("user", turn)]}, config)
        hits = mine.engine.context.cache.hits
        assert mine.get_tuple(config) == other.get_tuple(config)
        assert mine.engine.context.cache.hits == hits + 1  # answered "same"
    history = list(graph.get_state_history(config))
    forked = graph.update_state(history[3].config, {"messages": [("user", "edited")]})
    assert mine.get_tuple(forked) == other.get_tuple(forked)
    mine.put_writes(forked, [("messages", "pending")], "task-x")
    assert mine.get_tuple(forked) == other.get_tuple(forked)
    assert mine.get_tuple(config) == other.get_tuple(config)
