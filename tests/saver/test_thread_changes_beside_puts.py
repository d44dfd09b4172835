"""A change to whole threads (`delete_for_runs`, a copy, a prune, the cleanup of a put
refused in a deleted history) gives each namespace its head back at its end. A put that
commits while such a change runs stays the head, so a run that read the checkpoint before
it cannot extend that checkpoint a second time."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_durable import DurableSaver, ThreadConflictError
from langgraph_durable._core.lineage import RUN_KEY
from tests.support.checkpoints import put_value, wait_for_row_lock
from tests.support.servers import POSTGRES_URL


def test_a_put_committed_during_delete_for_runs_stays_the_head(
    make_saver: type[DurableSaver], namespace: tuple[str, str]
) -> None:
    """Thread: C1 (run "old") and C2, the head, which a run reads. Another process's put of
    C3, a child of C2, holds its transaction open while `delete_for_runs(["old"])` starts;
    then it commits. The heads are rebuilt from what is committed once the put is in, so
    C3 stays the head and the run's put of its own child of C2 is refused. (Rebuilt from a
    snapshot taken before the put committed, the head went back to C2 and both children
    of C2 were acknowledged: a fork.)"""
    schema, _ = namespace
    saver = make_saver()
    thread = f"rebuild-race-{uuid.uuid4()}"
    put_value(saver, thread, "one", metadata={"run_id": "old"})
    second = put_value(saver, thread, "two", metadata={"run_id": "main"})
    c2 = second["configurable"]["checkpoint_id"]  # type: ignore[index]
    saver.flush()  # write-behind: both in Postgres, where the other process's put lands
    run: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": "", RUN_KEY: object()}
    read = saver.get_tuple({"configurable": dict(run)})
    assert read is not None and read.checkpoint["id"] == c2
    c3 = empty_checkpoint()["id"]
    outcome: dict[str, BaseException | None] = {}

    def change() -> None:
        try:
            saver.delete_for_runs(["old"])
            outcome["error"] = None
        except BaseException as exc:  # the test reads it
            outcome["error"] = exc

    table = f'"{schema}"'
    with psycopg.connect(POSTGRES_URL) as putting, psycopg.connect(
            POSTGRES_URL, autocommit=True) as watching:
        # what a put of C3 does in Postgres: its checkpoint row, and the head moved to it
        putting.execute(
            f"INSERT INTO {table}.lgd_checkpoints (thread_id, checkpoint_ns, checkpoint_id, "
            "parent_checkpoint_id, run_id, checkpoint, channel_versions, metadata) "
            "SELECT thread_id, checkpoint_ns, %s, checkpoint_id, run_id, checkpoint, "
            f"channel_versions, metadata FROM {table}.lgd_checkpoints "
            "WHERE thread_id = %s AND checkpoint_id = %s", (c3, thread, c2))
        putting.execute(f"UPDATE {table}.lgd_heads SET head = %s WHERE thread_id = %s",
                        (c3, thread))
        changing = threading.Thread(target=change)
        changing.start()
        wait_for_row_lock(watching, schema)
        putting.commit()
        changing.join(30)
    assert not changing.is_alive()
    assert outcome["error"] is None, outcome["error"]
    with psycopg.connect(POSTGRES_URL) as conn:
        head = conn.execute(f"SELECT head FROM {table}.lgd_heads WHERE thread_id = %s",
                            (thread,)).fetchone()
    assert head == (c3,)
    child = empty_checkpoint()
    with pytest.raises(ThreadConflictError) as refused:
        saver.put({"configurable": {**run, "checkpoint_id": c2}}, child,
                  {"source": "loop", "step": 1}, {})
    assert refused.value.head == c3


def test_a_put_that_starts_a_namespace_during_a_change_stays_the_head(
    make_saver: type[DurableSaver], namespace: tuple[str, str]
) -> None:
    """A run's put refused because its thread was deleted cleans up in one transaction that
    ends by rebuilding the thread's heads. While it waits (here on the deleted history's
    record, held by the test), a new run starts the thread again: N1, its root, commits and
    creates the head row the transaction's first lock never saw, and the put of N2, N1's
    child, holds that row when the rebuild comes. N2 stays the head. (Rebuilt from a
    snapshot taken before N2 committed, the head went back to N1.)"""
    schema, _ = namespace
    run, operator, other = (make_saver(write_mode="through") for _ in range(3))
    thread = f"rebuild-race-{uuid.uuid4()}"
    first = put_value(run, thread, "one")
    runtime = object()  # the run that read "one" as the head, and extends it
    assert run.get_tuple({"configurable": {"thread_id": thread, RUN_KEY: runtime}})
    operator.delete_thread(thread)
    outcome: dict[str, BaseException | None] = {}

    def refused_put() -> None:
        child = empty_checkpoint()
        config = {"configurable": {**first["configurable"], RUN_KEY: runtime}}  # type: ignore[dict-item]
        try:
            run.put(config, child, {"source": "loop", "step": 1}, {})  # type: ignore[arg-type]
            outcome["error"] = None
        except BaseException as exc:  # the test reads it
            outcome["error"] = exc

    table = f'"{schema}"'
    with psycopg.connect(POSTGRES_URL) as holding, psycopg.connect(
            POSTGRES_URL) as putting, psycopg.connect(POSTGRES_URL, autocommit=True) as watching:
        holding.execute(f"SELECT 1 FROM {table}.lgd_deleted WHERE thread_id = %s FOR UPDATE",
                        (thread,))
        refusing = threading.Thread(target=refused_put)
        refusing.start()
        wait_for_row_lock(watching, schema, "lgd_deleted")  # the cleanup waits on the record
        n1 = put_value(other, thread, "new run")["configurable"]["checkpoint_id"]  # type: ignore[index]
        n2 = empty_checkpoint()["id"]
        putting.execute(
            f"INSERT INTO {table}.lgd_checkpoints (thread_id, checkpoint_ns, checkpoint_id, "
            "parent_checkpoint_id, run_id, checkpoint, channel_versions, metadata) "
            "SELECT thread_id, checkpoint_ns, %s, checkpoint_id, run_id, checkpoint, "
            f"channel_versions, metadata FROM {table}.lgd_checkpoints "
            "WHERE thread_id = %s AND checkpoint_id = %s", (n2, thread, n1))
        putting.execute(f"UPDATE {table}.lgd_heads SET head = %s WHERE thread_id = %s",
                        (n2, thread))
        holding.commit()
        wait_for_row_lock(watching, schema)
        putting.commit()
        refusing.join(30)
    assert not refusing.is_alive()
    error = outcome["error"]
    assert isinstance(error, ThreadConflictError) and error.deleted, error
    with psycopg.connect(POSTGRES_URL) as conn:
        head = conn.execute(f"SELECT head FROM {table}.lgd_heads WHERE thread_id = %s",
                            (thread,)).fetchone()
    assert head == (n2,)
