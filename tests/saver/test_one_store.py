"""The two tiers behave as one store: each case here is a fault or a race that once made a
read return an older checkpoint, lost an acknowledged write, brought a deleted thread back
or forked a thread: keys Redis forgot or evicted, deletes and unflushed writes, filters,
interrupts, and two runs on one thread. Separate saver objects stand in for separate
processes (each has its own breaker, decoded cache and mark clock). Requests of several
processes interleaved one at a time are in ``test_one_store_interleavings.py``, a process
that cannot reach Redis in ``test_one_store_redis_out_of_reach.py``."""

from __future__ import annotations

import itertools
import threading
import uuid
from typing import Any

import pytest
import redis
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from langgraph_durable import DurableSaver, ThreadConflictError
from langgraph_durable._core.keys import ThreadKeys
from tests.support.checkpoints import (
    blob_sized,
    cold_ids,
    config_of,
    forget_hot,
    hot_keys_pattern,
    put_after,
    put_line,
    value_checkpoint,
    value_of,
)
from tests.support.graphs import chat_graph
from tests.support.servers import REDIS_URL


def test_read_by_id_never_becomes_latest(make_saver: Any) -> None:
    """With the thread gone from Redis, reading an older checkpoint by id (get_state on a
    past config, the CLI's show/diff) does not make it the thread's latest, for any
    process."""
    writer, other = make_saver(), make_saver()
    thread = f"t-{uuid.uuid4()}"
    configs = put_line(writer, thread, ["v1", "v2", "v3", "v4", "v5"])
    writer.flush()
    forget_hot(writer, thread)
    assert value_of(other, configs[1]) == "v2"
    assert value_of(other, config_of(thread)) == "v5"
    assert value_of(writer, config_of(thread)) == "v5"


def test_reading_unknown_threads_leaves_only_short_lived_keys(make_saver: Any) -> None:
    """A read of a thread that does not exist (a typo, a scan by an attacker) stores
    nothing that outlives a minute in Redis, even with no hot TTL at all."""
    saver = make_saver(hot_ttl=0)
    client = redis.Redis.from_url(REDIS_URL)
    try:
        for n in range(20):
            thread = f"missing-{uuid.uuid4()}-{n}"
            assert saver.get_tuple(config_of(thread)) is None
            pattern = hot_keys_pattern(saver.config.key_prefix, thread)
            found = list(client.scan_iter(match=pattern))
            assert all(0 < client.pttl(key) <= 60_000 for key in found), found
    finally:
        client.close()


def test_evicted_registry_never_serves_deleted_checkpoints(make_saver: Any) -> None:
    """An eviction policy dropped a thread's registry but not its index: delete_thread
    cannot find those keys, and no read serves them afterwards."""
    saver = make_saver()
    thread = f"t-{uuid.uuid4()}"
    put_line(saver, thread, ["v1", "v2"])
    saver.flush()
    client = redis.Redis.from_url(REDIS_URL)
    client.delete(ThreadKeys(saver.config.key_prefix, thread).registry)
    client.close()
    saver.delete_thread(thread)
    for process in (saver, make_saver()):
        assert process.get_tuple(config_of(thread)) is None
    new = put_after(saver, config_of(thread), "again")
    assert value_of(saver, config_of(thread)) == "again"
    assert [t.config["configurable"]["checkpoint_id"] for t in saver.list(config_of(thread))] == [
        new["configurable"]["checkpoint_id"]]


@pytest.mark.parametrize("write_mode", ["behind"])
def test_unflushed_writes_keep_every_key_of_their_namespace(make_saver: Any) -> None:
    """A write-behind put_writes after a flush (which gave the keys their TTL back) removes
    the TTL from the index and blob keys too, not only from the checkpoint hash."""
    saver = make_saver(background_flush=False, hot_ttl=3600)
    thread = f"t-{uuid.uuid4()}"
    (config,) = put_line(saver, thread, [blob_sized("v1")])
    saver.flush()
    keys = ThreadKeys(saver.config.key_prefix, thread)
    client = redis.Redis.from_url(REDIS_URL)
    assert client.pttl(keys.index("")) > 0
    saver.put_writes(config, [("value", "w")], task_id="t1")
    for key in (keys.index(""), keys.blobs(""), keys.registry,
                keys.checkpoint("", config["configurable"]["checkpoint_id"])):
        assert client.pttl(key) == -1, key
    client.close()


@pytest.mark.parametrize("write_mode", ["behind"])
def test_an_unflushed_put_keeps_every_key_of_its_namespace(make_saver: Any) -> None:
    """A write-behind put after a flush (which gave the keys their TTL back) removes the
    TTL from every key it touches: the index, the blob hash, the registry, the versions
    hash, and the checkpoint's hash also when it was there before the put (its pending
    writes came first, as LangGraph's "async" durability may save them, and were
    flushed)."""
    saver = make_saver(background_flush=False, hot_ttl=3600)
    thread = f"t-{uuid.uuid4()}"
    (parent,) = put_line(saver, thread, [blob_sized("v1")])
    checkpoint, versions = value_checkpoint(saver, blob_sized("v2"))
    saver.put_writes(config_of(thread, checkpoint["id"]), [("value", "w")], task_id="t1")
    saver.flush()
    keys = ThreadKeys(saver.config.key_prefix, thread)
    touched = (keys.index(""), keys.blobs(""), keys.registry, keys.versions,
               keys.checkpoint("", checkpoint["id"]))
    client = redis.Redis.from_url(REDIS_URL)
    assert all(client.pttl(key) > 0 for key in touched)
    saver.put(parent, checkpoint, {"source": "loop", "step": 1}, versions)
    for key in touched:
        assert client.pttl(key) == -1, key
    client.close()
    found = saver.get_tuple(config_of(thread))
    assert found is not None and found.checkpoint["id"] == checkpoint["id"]
    assert found.pending_writes == [("t1", "value", "w")]


@pytest.mark.parametrize("write_mode", ["through"])
def test_delete_by_a_write_through_saver_drains_the_journal_first(make_saver: Any) -> None:
    """A write-through saver (the CLI's default) deletes a thread that a write-behind saver
    wrote and has not flushed: the later flush does not bring it back."""
    behind = make_saver(write_mode="behind", background_flush=False)
    through = make_saver(write_mode="through")
    thread = f"t-{uuid.uuid4()}"
    put_line(behind, thread, ["v1", "v2"])
    through.delete_thread(thread)
    behind.flush()
    assert cold_ids(behind.config.schema, thread) == set()
    assert behind.get_tuple(config_of(thread)) is None


@pytest.mark.parametrize("write_mode", ["behind"])
def test_list_filter_matches_the_same_before_and_after_flush(make_saver: Any) -> None:
    """Metadata filters are jsonb containment for unflushed checkpoints too."""
    saver = make_saver(background_flush=False)
    thread = f"t-{uuid.uuid4()}"
    put_after(saver, config_of(thread), "v1", {"tags": ["vip", "eu"], "user": {"tier": 2}})
    filters = [{"tags": ["vip"]}, {"user": {"tier": 2}}, {"tags": ["us"]}, {"step": 1}]

    def matches() -> list[int]:
        return [len(list(saver.list(config_of(thread), filter=f))) for f in filters]

    before = matches()
    saver.flush()
    assert before == matches() == [1, 1, 0, 0]


class _Asks(TypedDict, total=False):
    answers: list[str]


def _two_questions(saver: DurableSaver) -> Any:
    def ask(state: _Asks) -> dict[str, Any]:
        first = interrupt("first?")
        second = interrupt("second?")
        return {"answers": [first, second]}

    builder = StateGraph(_Asks)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    return builder.compile(checkpointer=saver)


def test_several_interrupts_in_one_node_resume_in_both_modes(saver: DurableSaver) -> None:
    """A node that calls interrupt() twice stores two writes to the same special channel in
    one put_writes: both write modes keep the last and resume to the end."""
    graph = _two_questions(saver)
    config = {"configurable": {"thread_id": f"t-{uuid.uuid4()}"}}
    graph.invoke({"answers": []}, config)
    graph.invoke(Command(resume="a"), config)
    out = graph.invoke(Command(resume="b"), config)
    assert out["answers"] == ["a", "b"]
    thread = config["configurable"]["thread_id"]
    latest = saver.get_tuple(config_of(thread))
    assert latest is not None
    saver.put_writes(latest.config, [("__interrupt__", "x"), ("__interrupt__", "y")],
                     task_id="twice")
    tup = saver.get_tuple(latest.config)
    assert tup is not None
    assert [(t, c, v) for t, c, v in tup.pending_writes if t == "twice"] == [
        ("twice", "__interrupt__", "y")]


def test_saver_never_draws_from_uuid4(saver: DurableSaver, monkeypatch: pytest.MonkeyPatch) -> None:
    """Applications patch uuid.uuid4 for deterministic ids (LangGraph's own tests do); the
    saver's internal tokens must not consume it."""
    calls: list[int] = []
    real = uuid.uuid4
    monkeypatch.setattr(uuid, "uuid4", lambda: calls.append(1) or real())
    thread = f"t-{real()}"
    (config,) = put_line(saver, thread, ["v1"])
    saver.put_writes(config, [("value", "w")], task_id="t1")
    saver.get_tuple(config_of(thread))
    saver.flush()
    forget_hot(saver, thread)
    saver.get_tuple(config_of(thread))
    saver.delete_thread(thread)
    assert calls == []


def test_second_writer_on_a_stale_head_gets_thread_conflict(make_saver: Any) -> None:
    """Two runs read the same head; the first commits; the second cannot commit on top of
    the head it read (ThreadConflictError names thread and heads) and the thread keeps one
    line. A put from an explicitly addressed checkpoint still forks, as asked."""
    first_run, second_run = make_saver(), make_saver()
    thread = f"t-{uuid.uuid4()}"
    (root,) = put_line(first_run, thread, ["v1"])
    first_run.flush()
    seen_a = first_run.get_tuple(config_of(thread))
    seen_b = second_run.get_tuple(config_of(thread))
    assert seen_a is not None and seen_b is not None
    winner = put_after(first_run, seen_a.config, "a")
    with pytest.raises(ThreadConflictError) as raised:
        put_after(second_run, seen_b.config, "b")
    assert raised.value.thread_id == thread
    assert raised.value.expected == root["configurable"]["checkpoint_id"]
    assert raised.value.head == winner["configurable"]["checkpoint_id"]
    assert value_of(second_run, config_of(thread)) == "a"
    fork = second_run.get_tuple(root)  # explicit checkpoint id: a fork the caller asked for
    assert fork is not None
    put_after(second_run, fork.config, "fork")
    assert value_of(first_run, config_of(thread)) == "fork"


def test_two_graph_runs_on_one_thread_never_fork_it(make_saver: Any) -> None:
    """Two processes invoke one thread at once: one gets ThreadConflictError, and every
    checkpoint the thread holds descends from the one before it (no fork)."""
    savers = [make_saver(), make_saver()]
    thread = f"t-{uuid.uuid4()}"
    config = {"configurable": {"thread_id": thread}}
    chat_graph(savers[0]).invoke({"messages": [("user", "hello")]}, config)
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def run(saver: DurableSaver) -> None:
        graph = chat_graph(saver)
        barrier.wait()
        try:
            graph.invoke({"messages": [("user", "again")]}, config)
            outcomes.append("ok")
        except ThreadConflictError:
            outcomes.append("conflict")

    workers = [threading.Thread(target=run, args=(s,)) for s in savers]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert "ok" in outcomes
    for saver in savers:
        saver.flush()
    history = list(savers[0].list({"configurable": {"thread_id": thread, "checkpoint_ns": ""}}))
    for newer, older in itertools.pairwise(history):
        assert newer.parent_config is not None
        assert newer.parent_config["configurable"]["checkpoint_id"] == (
            older.config["configurable"]["checkpoint_id"])
