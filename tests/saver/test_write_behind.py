"""Write-behind: acknowledged in Redis, drained to Postgres by flushers, never lost."""

from __future__ import annotations

import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_durable import DurableSaver
from langgraph_durable._core import journal
from langgraph_durable._core.keys import Layout, ThreadKeys
from langgraph_durable._core.requests import Hot
from langgraph_durable.flusher import run_flusher
from tests.support.checkpoints import cold_checkpoints, put_value
from tests.support.graphs import chat_graph
from tests.support.servers import POSTGRES_URL, REDIS_URL

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.parametrize("write_mode", ["behind"])

IDLE = 3600.0  # a flush interval that keeps the in-process flusher from draining


def _run(saver: DurableSaver, turns: int = 2) -> dict[str, Any]:
    config = {"configurable": {"thread_id": f"t-{uuid.uuid4()}"}}
    graph = chat_graph(saver)
    for i in range(turns):
        graph.invoke({"messages": [("user", f"turn {i}")]}, config)
    return config


def test_flush_moves_every_acknowledged_checkpoint(make_saver: Any) -> None:
    """Before flush nothing need be in Postgres; after it, every checkpoint is."""
    saver = make_saver(flush_interval=IDLE)
    config = _run(saver)
    thread = config["configurable"]["thread_id"]
    assert cold_checkpoints(saver.config.schema, thread) == 0
    assert saver.health()["flush"]["unflushed"] > 0
    saver.flush()
    assert cold_checkpoints(saver.config.schema, thread) == 10  # 5 checkpoints a turn
    assert saver.health()["flush"]["unflushed"] == 0


def test_background_flusher_drains_within_its_interval(make_saver: Any) -> None:
    """With the default policy the in-process flusher empties the journal on its own."""
    saver = make_saver(flush_interval=0.05)
    config = _run(saver)
    from langgraph_durable.flusher import wait_until_flushed

    assert wait_until_flushed(saver, timeout=10)
    assert cold_checkpoints(saver.config.schema, config["configurable"]["thread_id"]) == 10


def test_other_process_reads_unflushed_state(make_saver: Any) -> None:
    """A second saver object (another pool, as another process has) reads the writes
    that are still only in Redis, and lists them in order merged with Postgres."""
    saver = make_saver(flush_interval=IDLE)
    config = _run(saver, turns=1)
    saver.flush()
    graph = chat_graph(saver)
    graph.invoke({"messages": [("user", "unflushed turn")]}, config)
    other = make_saver(flush_interval=IDLE)
    state = chat_graph(other).get_state(config)
    assert state.values["messages"][-1].content == "finish #7"
    history = list(other.list(config))
    ids = [t.checkpoint["id"] for t in history]
    assert len(ids) == 10 and ids == sorted(ids, reverse=True)
    assert [t.checkpoint["id"] for t in other.list(config, limit=3)] == ids[:3]
    before = history[2].config
    assert [t.checkpoint["id"] for t in other.list(config, before=before)] == ids[3:]
    assert [t.metadata["step"] for t in other.list(config, filter={"source": "input"})] == [
        t.metadata["step"] for t in history if t.metadata["source"] == "input"]


def test_unflushed_keys_never_expire(make_saver: Any) -> None:
    """Hot keys of unflushed writes have no TTL; once flushed they get hot_ttl back."""
    saver = make_saver(flush_interval=IDLE, hot_ttl=60)
    config = _run(saver, turns=1)
    keys = ThreadKeys(saver.config.key_prefix, config["configurable"]["thread_id"])
    client = redis.Redis.from_url(REDIS_URL)
    members = client.smembers(keys.registry)
    assert members and all(client.pttl(k) == -1 for k in members)
    saver.get_tuple(config)  # a read must not add a TTL either
    assert all(client.pttl(k) == -1 for k in members)
    saver.flush()
    assert all(0 < client.pttl(k) <= 60_000 for k in members)
    assert client.exists(keys.unflushed) == 0
    client.close()


def test_a_read_drains_only_for_its_own_namespaces_entries(make_saver: Any) -> None:
    """A subgraph's first read (a namespace Redis holds nothing of) on a thread whose root
    namespace has unflushed entries reads Postgres without draining them: nothing of that
    namespace is pending. A namespace with unflushed entries of its own whose hot copy was
    evicted still drains first, and the read returns what was acknowledged. (Each put
    follows a read of its namespace, as a run's does: Redis then knows the namespace is
    empty, and its first checkpoint stays in Redis.)"""
    saver = make_saver(flush_interval=IDLE)
    thread = f"t-{uuid.uuid4()}"
    assert saver.get_tuple({"configurable": {"thread_id": thread}}) is None
    put_value(saver, thread, "root")
    assert saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": "sub:1"}}) \
        is None
    assert cold_checkpoints(saver.config.schema, thread) == 0
    assert saver.health()["flush"]["unflushed"] == 1

    assert saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": "sub:2"}}) \
        is None
    put_value(saver, thread, "inner", ns="sub:2")
    client = redis.Redis.from_url(REDIS_URL)
    client.delete(ThreadKeys(saver.config.key_prefix, thread).registry)  # as an eviction
    client.close()
    found = saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": "sub:2"}})
    assert found is not None and found.checkpoint["channel_values"]["value"] == "inner"
    assert cold_checkpoints(saver.config.schema, thread) == 2
    assert saver.health()["flush"]["unflushed"] == 0


def test_latest_policy_keeps_newest_checkpoint_per_batch(make_saver: Any) -> None:
    """'latest' writes only each thread's newest checkpoint of a batch, and it is whole."""
    saver = make_saver(flush_interval=IDLE, flush_policy="latest")
    config = _run(saver, turns=2)
    saver.flush()
    assert cold_checkpoints(saver.config.schema, config["configurable"]["thread_id"]) == 1
    cold_reader = DurableSaver(REDIS_URL, POSTGRES_URL, schema=saver.config.schema,
                               key_prefix=f"{saver.config.key_prefix}-cold")
    try:
        tup = cold_reader.get_tuple(config)
        assert tup is not None
        assert [m.content for m in tup.checkpoint["channel_values"]["messages"]][-1] == (
            "finish #7")
    finally:
        cold_reader.close()


def test_concurrent_flushers_lose_nothing(make_saver: Any) -> None:
    """Three savers' flushers and a standalone worker drain one journal together."""
    savers = [make_saver(flush_interval=0.01) for _ in range(3)]
    stop = threading.Event()
    worker = threading.Thread(target=run_flusher, args=(savers[0],),
                              kwargs={"follow": True, "stop": stop})
    worker.start()
    configs = []
    threads = [threading.Thread(target=lambda s=s: configs.extend(
        _run(s, turns=3) for _ in range(4))) for s in savers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    savers[1].flush()
    stop.set()
    worker.join()
    assert len(configs) == 12
    for config in configs:
        assert cold_checkpoints(savers[0].config.schema, config["configurable"]["thread_id"]) == 15
    client = redis.Redis.from_url(REDIS_URL)
    assert client.xlen(Layout(savers[0].config.key_prefix).journal(0)) == 0
    client.close()


def test_dead_flushers_batch_is_reclaimed(make_saver: Any) -> None:
    """A flusher that took a batch and died before committing: another takes it over."""
    saver = make_saver(flush_interval=IDLE, reclaim_after=0.2)
    config = _run(saver, turns=1)
    dead = make_saver(flush_interval=IDLE)
    op = journal.flush_batch(dead.engine.context)
    taken = dead.engine.tiers().execute(next(op), _no_effect)  # the read: now pending for `dead`
    assert taken
    op.close()  # ... and the process is gone before its transaction
    import time

    time.sleep(0.3)
    saver.flush(timeout=10)
    assert cold_checkpoints(saver.config.schema, config["configurable"]["thread_id"]) == 5


def _no_effect(request: object) -> None:
    """Storage operations yield no tool effects."""
    raise AssertionError(f"unexpected effect {request!r}")


def test_a_script_that_exits_without_close_still_flushes(
    namespace: tuple[str, str], make_saver: Any
) -> None:
    """A script writes behind and ends without close() (the flusher's interval is an hour):
    what it acknowledged is in Postgres once it has exited."""
    schema, prefix = namespace
    make_saver()  # the schema exists
    thread = f"t-{uuid.uuid4()}"
    code = (
        "from langgraph_durable import DurableSaver\n"
        "from tests.support.graphs import chat_graph\n"
        f"s = DurableSaver({REDIS_URL!r}, {POSTGRES_URL!r}, schema={schema!r}, "
        f"key_prefix={prefix!r}, write_mode='behind', flush_interval=3600)\n"
        f"chat_graph(s).invoke({{'messages': [('user', 'hi')]}}, "
        f"{{'configurable': {{'thread_id': {thread!r}}}}})\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert cold_checkpoints(schema, thread) == 5


def test_a_copy_dropped_by_a_late_acknowledgement_never_hides_unflushed_checkpoints(
    make_saver: Any,
) -> None:
    """Flusher ``late`` commits a batch holding C1 and stalls before acknowledging it;
    another flusher takes the batch over and acknowledges it; the run writes C2 behind.
    ``late``'s acknowledgement then finds its entry gone and drops the thread's hot copy
    (it may lack what ``late`` committed), C2's with it, while C2's journal entry still
    waits. Reads of the latest and ``list`` drain that entry and show C2 first, as the
    run was told it was stored."""
    saver = make_saver(flush_interval=IDLE, reclaim_after=0.2)
    thread = f"t-{uuid.uuid4()}"
    first = put_value(saver, thread, "one")
    late = make_saver(flush_interval=IDLE)
    op = journal.flush_batch(late.engine.context)
    request = next(op)
    while not (isinstance(request, Hot) and request.script.name == "flush_ack"):
        # read the batch, commit it
        request = op.send(late.engine.tiers().execute(request, _no_effect))
    threading.Event().wait(0.3)
    saver.flush(timeout=10)  # the batch, taken over and acknowledged
    run = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    assert saver.get_tuple(run) is not None
    child = empty_checkpoint()
    child["channel_values"] = {"value": "two"}
    child["channel_versions"] = {"value": saver.get_next_version(None, None)}
    second = saver.put(first, child, {"source": "loop", "step": 1},
                       dict(child["channel_versions"]))
    with pytest.raises(StopIteration):  # the late acknowledgement
        op.send(late.engine.tiers().execute(request, _no_effect))
    reader = make_saver(flush_interval=IDLE)
    newest = second["configurable"]["checkpoint_id"]
    listed = [t.checkpoint["id"] for t in reader.list(run, limit=2)]
    assert listed == [newest, first["configurable"]["checkpoint_id"]]
    latest = reader.get_tuple(run)
    assert latest is not None and latest.checkpoint["id"] == newest
