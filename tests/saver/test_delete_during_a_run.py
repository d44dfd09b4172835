"""A thread deleted while a run is mid-step stays deleted: the run gets one clear error at
its next write (``put_writes`` or ``put``), a `ThreadConflictError` that says the thread
was deleted, and nothing it writes after the delete is stored, in either tier. The thread
id stays usable: a new run on it starts afresh."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Generator
from typing import Any

import psycopg
import pytest
import redis
from langchain_core.messages import AIMessage
from langgraph.graph import END, START, MessagesState, StateGraph

from langgraph_durable import DurableSaver, ThreadConflictError
from langgraph_durable._core.journal import flushing
from langgraph_durable._core.journal.entries import GROUP, Entry, genuine
from langgraph_durable._core.keys import Layout
from langgraph_durable._core.scripts import shards
from tests.support.checkpoints import (
    config_of,
    put_after,
    put_value,
    value_put_args,
    wait_for_row_lock,
)
from tests.support.cli_runner import cli_for
from tests.support.servers import POSTGRES_URL, REDIS_URL

TABLES = ("lgd_checkpoints", "lgd_writes", "lgd_blobs", "lgd_heads")


def _stored(schema: str, prefix: str, thread: str) -> dict[str, int]:
    """Rows of the thread per table in Postgres, and (``redis``) the thread's keys in
    Redis that hold state: everything but its versions hash, the tombstone."""
    counts = {}
    with psycopg.connect(POSTGRES_URL) as conn:
        for table in TABLES:
            row = conn.execute(f'SELECT count(*) FROM "{schema}".{table} WHERE thread_id = %s',
                               (thread,)).fetchone()
            assert row is not None
            counts[table] = int(row[0])
    keys = Layout(prefix).thread(thread)
    client = redis.Redis.from_url(REDIS_URL)
    try:
        pattern = keys.base + ":*"
        found = [k.decode() for k in client.scan_iter(match=pattern, count=1000)]
    finally:
        client.close()
    counts["redis"] = len([k for k in found if k not in (keys.versions, keys.unflushed)])
    return counts


def test_writes_of_a_run_whose_thread_was_deleted_are_refused_and_not_stored(
    make_saver: type[DurableSaver], namespace: tuple[str, str], write_mode: str
) -> None:
    """The run wrote checkpoint C1 and one task's writes; an operator deletes the thread;
    the run's next task writes to C1 and its next checkpoint (child of C1) are refused
    with a ThreadConflictError that says the thread was deleted, and neither tier holds
    anything of the thread afterwards (a flush included)."""
    schema, prefix = namespace
    run, operator = make_saver(), make_saver(write_mode="through")
    thread = f"deleted-mid-step-{uuid.uuid4()}"
    first = put_value(run, thread, "one")
    run.put_writes(first, [("value", "a")], "task-a")
    operator.delete_thread(thread)

    with pytest.raises(ThreadConflictError) as late_writes:
        run.put_writes(first, [("value", "b")], "task-b")
    assert late_writes.value.deleted and "deleted" in str(late_writes.value)
    with pytest.raises(ThreadConflictError) as late_put:
        _, child, metadata, versions = value_put_args(run, thread, "two", "", {"source": "loop",
                                                                              "step": 1})
        run.put(first, child, metadata, versions)
    assert late_put.value.deleted and "deleted" in str(late_put.value)
    run.flush()

    assert _stored(schema, prefix, thread) == dict.fromkeys((*TABLES, "redis"), 0)
    config = {"configurable": {"thread_id": thread}}
    assert run.get_tuple(config) is None and list(run.list(config)) == []
    listed = cli_for(namespace)("threads", "--limit", "1000")
    assert listed.exit_code == 0 and thread not in listed.stdout, listed.output


def test_a_deleted_thread_id_starts_afresh_even_when_writes_come_before_their_checkpoint(
    make_saver: type[DurableSaver], namespace: tuple[str, str]
) -> None:
    """After the delete, a new run on the same id works: its first checkpoint's writes may
    reach the saver before that checkpoint (LangGraph's ``durability="async"``) and are
    kept, since that checkpoint is newer than anything the delete removed."""
    run = make_saver()
    thread = f"deleted-reused-{uuid.uuid4()}"
    put_value(run, thread, "old")
    make_saver().delete_thread(thread)
    config = {"configurable": {"thread_id": thread}}
    assert run.get_tuple(config) is None
    root = value_put_args(run, thread, "new", "", None)
    early = {"configurable": {"thread_id": thread, "checkpoint_ns": "",
                              "checkpoint_id": root[1]["id"]}}
    run.put_writes(early, [("value", "early")], "task-early")
    stored = run.put(*root)
    found = run.get_tuple(stored)
    assert found is not None and found.checkpoint["channel_values"]["value"] == "new"
    assert [(t, c, v) for t, c, v in found.pending_writes] == [("task-early", "value", "early")]


def test_a_graph_whose_thread_is_deleted_while_a_node_runs_fails_with_one_clear_error(
    make_saver: type[DurableSaver], namespace: tuple[str, str]
) -> None:
    """What a LangGraph user sees: a node is running when the thread is deleted; the
    invoke raises ThreadConflictError (deleted), and nothing of the run is left."""
    schema, prefix = namespace
    saver = make_saver()
    running, release = threading.Event(), threading.Event()

    def slow(state: MessagesState) -> dict[str, Any]:
        running.set()
        assert release.wait(30)
        return {"messages": [AIMessage(content="late")]}

    builder = StateGraph(MessagesState)
    builder.add_node("slow", slow)
    builder.add_node("after", lambda state: {"messages": [AIMessage(content="after")]})
    builder.add_edge(START, "slow")
    builder.add_edge("slow", "after")
    builder.add_edge("after", END)
    graph = builder.compile(checkpointer=saver)
    thread = f"deleted-graph-{uuid.uuid4()}"
    config = {"configurable": {"thread_id": thread}}
    failure: list[BaseException] = []

    def invoke() -> None:
        try:
            graph.invoke({"messages": [("user", "hi")]}, config)
        except BaseException as exc:
            failure.append(exc)

    worker = threading.Thread(target=invoke)
    worker.start()
    assert running.wait(30)
    make_saver(write_mode="through").delete_thread(thread)
    release.set()
    worker.join(60)
    assert len(failure) == 1 and isinstance(failure[0], ThreadConflictError), failure
    assert failure[0].deleted
    saver.flush()
    assert _stored(schema, prefix, thread) == dict.fromkeys((*TABLES, "redis"), 0)
    assert graph.get_state(config).values == {}


@pytest.mark.parametrize("write", ["put", "put_writes"])
def test_a_write_that_waits_for_a_delete_in_progress_is_refused_when_it_commits(
    make_saver: type[DurableSaver], namespace: tuple[str, str], write: str
) -> None:
    """A write whose statement began before a delete committed, and waited for the head
    row the delete locked: once the delete commits, the write finds that row gone and
    stores nothing (it once inserted the head afresh, which left an acknowledged child of a
    deleted checkpoint). The delete's own statements run in a transaction held open here."""
    from langgraph_durable._core.sql import Statements

    schema, _ = namespace
    run = make_saver(write_mode="through")
    thread = f"delete-race-{uuid.uuid4()}"
    first = put_value(run, thread, "one")
    statements = Statements(schema)
    outcome: dict[str, BaseException | None] = {}

    def write_now() -> None:
        try:
            if write == "put":
                _, child, metadata, versions = value_put_args(
                    run, thread, "two", "", {"source": "loop", "step": 1})
                run.put(first, child, metadata, versions)
            else:
                run.put_writes(first, [("value", "late")], "task-late")
            outcome["error"] = None
        except BaseException as exc:  # the test reads it
            outcome["error"] = exc

    with psycopg.connect(POSTGRES_URL) as deleting, psycopg.connect(
            POSTGRES_URL, autocommit=True) as watching:
        ids = {"thread_ids": [thread]}
        deleting.execute(statements.lock_heads_sql, ids)
        deleting.execute(statements.delete_threads_sql, ids)
        writer = threading.Thread(target=write_now)
        writer.start()
        wait_for_row_lock(watching, schema)
        deleting.commit()
        writer.join(30)
    assert not writer.is_alive()
    error = outcome["error"]
    assert isinstance(error, ThreadConflictError) and error.deleted, error
    stored = _stored(schema, namespace[1], thread)
    assert {t: stored[t] for t in TABLES} == dict.fromkeys(TABLES, 0)


@pytest.mark.parametrize("write_mode", ["behind"])
def test_a_batch_committed_after_its_thread_was_deleted_brings_nothing_back(
    make_saver: type[DurableSaver], namespace: tuple[str, str], write_mode: str
) -> None:
    """Written behind, a flusher takes a batch of the thread's entries and stalls (a paused
    process) past reclaim_after; a delete's drain takes the batch over, commits it, and the
    delete goes on. When the stalled flusher wakes and commits the batch, the deleted
    thread stays deleted: no checkpoint, blob or head of it comes back (before: the thread
    read back at its last checkpoint)."""
    schema, prefix = namespace
    saver = make_saver(reclaim_after=0.5, background_flush=False)
    thread = f"late-batch-{uuid.uuid4()}"
    first = put_value(saver, thread, "one")
    put_after(saver, first, "two")
    ctx = saver.engine.context

    def take_batch() -> Generator[Any, Any, list[Entry]]:
        raw = yield shards.flush_read(ctx.layout, 0, group=GROUP, consumer="stalled",
                                      count=100, reclaim=60_000, cap=1 << 25, forget=0)
        return [genuine(ctx, r) for r in raw]

    batch = saver.engine.run(take_batch())
    assert batch, "the thread's entries wait in the journal"
    time.sleep(0.6)  # idle past reclaim_after: the delete's drain takes them over
    saver.delete_thread(thread)
    saver.engine.run(flushing._commit(ctx, batch, []))  # the stalled flusher wakes

    assert saver.get_tuple(config_of(thread)) is None
    assert _stored(schema, prefix, thread) == dict.fromkeys((*TABLES, "redis"), 0)
