"""Pending writes saved before their checkpoint (LangGraph's `durability="async"` may send
a task's writes before the put of the checkpoint they belong to): whatever Redis lost or a
delete removed meanwhile, every process reads the writes Postgres holds once the
checkpoint is put, no fewer and no more.

Postgres tells the put whether it holds writes of the checkpoint; a put that finds none of
them in Redis leaves the namespace to a read from Postgres. A writes' update whose intent's
mark Redis lost (a drop of the thread among what went) starts no copy of a checkpoint Redis
does not hold.
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest

from langgraph_durable._core import ops
from tests.support.checkpoints import forget_hot, put_value, value_checkpoint
from tests.support.interleave import (
    Stepped,
    in_thread,
    paused_inserts,
    script,
    wait_until_blocked_by,
)
from tests.support.servers import POSTGRES_URL


def _cold_writes(schema: str, thread: str) -> list[Any]:
    with psycopg.connect(POSTGRES_URL) as conn:
        return conn.execute(f'SELECT checkpoint_ns, checkpoint_id, task_id, channel FROM '
                            f'"{schema}".lgd_writes WHERE thread_id = %s', (thread,)).fetchall()


def _put_and_read(writer: Any, others: dict[str, Any], checkpoint: Any, versions: Any,
                  sub: dict[str, Any]) -> dict[str, Any]:
    """The run puts the checkpoint its writes came before (a root of "child"); the pending
    writes each process then reads of it."""
    writer.put({"configurable": {"thread_id": sub["configurable"]["thread_id"],
                                 "checkpoint_ns": "child"}},
               checkpoint, {"source": "input", "step": -1}, versions)
    seen = {}
    for name, process in {"writer": writer, **others}.items():
        tup = process.get_tuple(sub)
        assert tup is not None
        seen[name] = tup.pending_writes
    return seen


@pytest.mark.parametrize("write_mode", ["through", "behind"])
def test_writes_removed_by_a_delete_are_not_brought_back_by_their_late_update(
        make_saver: Any, namespace: tuple[str, str]) -> None:
    """The delete draws its tombstone and waits for ns ""'s head row (a row lock the test
    holds); a run's first writes to a new namespace ("child", writes before their
    checkpoint) commit meanwhile (no row the delete holds, no table lock) with a version
    above the tombstone, their Redis update held back; the delete then sees and removes
    them, commits and drops the thread's copy; the writes' update lands; the run puts
    their checkpoint. Every process must read what Postgres holds."""
    schema = namespace[0]
    deleter, writer = make_saver(), make_saver()
    thread = f"t-{uuid.uuid4()}"
    put_value(deleter, thread, "v1")  # ns "" has a head row the delete locks
    if deleter.config.write_mode == "behind":
        deleter.flush()
    checkpoint, versions = value_checkpoint(writer, "child-root")
    sub = {"configurable": {"thread_id": thread, "checkpoint_ns": "child",
                            "checkpoint_id": checkpoint["id"]}}
    w = Stepped(writer, ops.put_writes(writer.engine.context, sub,
                                       [("value", "pending-of-deleted")], "task-1", ""))
    with psycopg.connect(POSTGRES_URL) as blocker:
        # the delete draws its tombstone, then waits for ns ""'s head row
        blocker.execute(f'SELECT 1 FROM "{schema}".lgd_heads WHERE thread_id = %s '
                        "AND checkpoint_ns = '' FOR UPDATE", (thread,))
        deleting = in_thread(lambda: deleter.delete_thread(thread))
        try:
            wait_until_blocked_by(blocker)
            # a namespace's first write: no head row the delete holds; it commits now,
            # its Redis update held back
            writing = in_thread(lambda: w.until(script("put_writes")))
            writing.thread.join(timeout=2)
            committed_first = bool(_cold_writes(schema, thread))
        finally:
            blocker.rollback()
        deleting.joined()
        writing.joined()
    removed = not _cold_writes(schema, thread)  # the delete removed the writes
    w.finish()  # the writes' update lands after the delete's drop
    seen = _put_and_read(writer, {"deleter": deleter, "new": make_saver()}, checkpoint,
                         versions, sub)
    listed = [t.pending_writes for t in writer.list(
        {"configurable": {"thread_id": thread, "checkpoint_ns": "child"}})]
    cold = [("task-1", "value", "pending-of-deleted")] if _cold_writes(schema, thread) else []
    assert all(w == cold for w in seen.values()), (
        f"writes committed while the delete waited: {committed_first}, removed by it: "
        f"{removed}; Postgres holds {cold}; read: {seen}; list: {listed}")


@pytest.mark.parametrize("write_mode", ["through"])
def test_writes_that_commit_after_a_delete_with_an_older_version_are_read(
        make_saver: Any, namespace: tuple[str, str]) -> None:
    """A namespace's first writes draw their version, then stop before they insert the
    head row; the thread's delete runs whole (its tombstone above the writes' version);
    the writes commit (Postgres keeps them: nothing of the delete names them), their
    update is refused (older than the tombstone); the run puts their checkpoint. The
    writes were acknowledged and Postgres holds them: every process must read them."""
    schema = namespace[0]
    deleter, writer = make_saver(), make_saver()
    thread = f"t-{uuid.uuid4()}"
    put_value(deleter, thread, "v1")
    checkpoint, versions = value_checkpoint(writer, "child-root")
    sub = {"configurable": {"thread_id": thread, "checkpoint_ns": "child",
                            "checkpoint_id": checkpoint["id"]}}
    pausing = paused_inserts(f'"{schema}".lgd_heads',
                             f"NEW.thread_id = '{thread}' AND NEW.head IS NULL")
    with pausing as pause:
        writes = in_thread(lambda: writer.put_writes(
            sub, [("value", "pending")], task_id="task-1"))
        try:
            pause.reached()  # version drawn, no head row yet
            deleting = in_thread(lambda: deleter.delete_thread(thread))
            deleting.thread.join(timeout=2)
            deleted_first = not deleting.thread.is_alive()
        finally:
            pause.release()
            writes.joined()
        deleting.joined()
    cold = _cold_writes(schema, thread)
    seen = _put_and_read(writer, {"deleter": deleter, "new": make_saver()}, checkpoint,
                         versions, sub)
    expected = [("task-1", "value", "pending")] if cold else []
    assert all(w == expected for w in seen.values()), (
        f"the delete committed before the writes: {deleted_first}; Postgres holds {cold}; "
        f"read: {seen}")


@pytest.mark.parametrize("write_mode", ["through", "behind"])
def test_writes_before_their_checkpoint_survive_a_lost_hot_copy(make_saver: Any) -> None:
    """A run saves writes of a new namespace's first checkpoint, then Redis loses the
    thread's keys (their TTL, an eviction, a restart), then the checkpoint is put: its
    namespace is read from Postgres, writes included (before, the put started a fresh
    index in Redis without them, as simulation seed behind 171 found)."""
    writer = make_saver()
    thread = f"t-{uuid.uuid4()}"
    put_value(writer, thread, "v1")
    if writer.config.write_mode == "behind":
        writer.flush()
    checkpoint, versions = value_checkpoint(writer, "child-root")
    sub = {"configurable": {"thread_id": thread, "checkpoint_ns": "child",
                            "checkpoint_id": checkpoint["id"]}}
    writer.put_writes(sub, [("value", "pending")], task_id="task-1")
    if writer.config.write_mode == "behind":
        writer.flush()
    forget_hot(writer, thread)  # the thread's keys expired / were evicted
    writer.put({"configurable": {"thread_id": thread, "checkpoint_ns": "child"}},
               checkpoint, {"source": "input", "step": -1}, versions)
    seen = {name: s.get_tuple(sub).pending_writes  # type: ignore[union-attr]
            for name, s in (("writer", writer), ("new", make_saver()))}
    assert all(w == [("task-1", "value", "pending")] for w in seen.values()), seen


@pytest.mark.parametrize("write_mode", ["through"])
def test_a_put_racing_its_checkpoints_writes_is_read_with_them(make_saver: Any) -> None:
    """The common race under `durability="async"`: a task's writes commit before their
    checkpoint's put, and their update (sent without waiting) lands after the put's. Every
    process reads the checkpoint with its writes, before and after the update lands (the
    put cannot tell an update in flight from writes Redis lost, so it leaves the namespace
    to Postgres until the next put starts its index again)."""
    writer = make_saver()
    thread = f"t-{uuid.uuid4()}"
    checkpoint, versions = value_checkpoint(writer, "root")
    config = {"configurable": {"thread_id": thread, "checkpoint_ns": "",
                               "checkpoint_id": checkpoint["id"]}}
    writes = Stepped(writer, ops.put_writes(writer.engine.context, config,
                                            [("value", "pending")], "task-1", ""))
    writes.until(script("put_writes"))  # committed; the update not sent yet
    writer.put({"configurable": {"thread_id": thread, "checkpoint_ns": ""}},
               checkpoint, {"source": "input", "step": -1}, versions)
    for landed in (False, True):
        if landed:
            writes.finish()  # the writes' update lands
        for process in (writer, make_saver()):
            tup = process.get_tuple(config)
            assert tup is not None and tup.pending_writes == [("task-1", "value", "pending")]
