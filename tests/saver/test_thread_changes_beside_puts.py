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
from langgraph_durable._tiers.sync import Tiers
from tests.support.checkpoints import put_value, wait_for_row_lock
from tests.support.servers import POSTGRES_URL


class Aside(threading.Thread):
    """``fn()`` on a thread of its own; ``error`` is what it raised (``None``: nothing)."""

    def __init__(self, fn: Any) -> None:
        super().__init__(daemon=True)
        self.fn = fn
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.fn()
        except BaseException as exc:  # the test reads it
            self.error = exc


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


def test_a_put_that_starts_a_namespace_during_a_change_waits_for_it_and_stays_the_head(
    make_saver: type[DurableSaver], namespace: tuple[str, str]
) -> None:
    """A run's put refused because its thread was deleted cleans up in one transaction that
    ends by rebuilding the thread's heads. While it waits (here on the deleted history's
    record, held by the test), a new run starts the thread again: its root N1 would create
    a head row no lock of the cleanup holds, so it waits for the cleanup to commit, and
    then is the head. (Committed meanwhile, a child of N1 could be set back to N1 by the
    rebuild: see the next test.)"""
    schema, _ = namespace
    run, operator, other = (make_saver(write_mode="through") for _ in range(3))
    thread = f"rebuild-race-{uuid.uuid4()}"
    first = put_value(run, thread, "one")
    runtime = object()  # the run that read "one" as the head, and extends it
    assert run.get_tuple({"configurable": {"thread_id": thread, RUN_KEY: runtime}})
    operator.delete_thread(thread)
    outcome: dict[str, Any] = {}

    def refused_put() -> None:
        child = empty_checkpoint()
        config = {"configurable": {**first["configurable"], RUN_KEY: runtime}}  # type: ignore[dict-item]
        try:
            run.put(config, child, {"source": "loop", "step": 1}, {})  # type: ignore[arg-type]
            outcome["error"] = None
        except BaseException as exc:  # the test reads it
            outcome["error"] = exc

    def new_run() -> None:
        outcome["n1"] = put_value(other, thread, "new run")["configurable"]["checkpoint_id"]  # type: ignore[index]

    table = f'"{schema}"'
    with psycopg.connect(POSTGRES_URL) as holding, psycopg.connect(
            POSTGRES_URL, autocommit=True) as watching:
        holding.execute(f"SELECT 1 FROM {table}.lgd_deleted WHERE thread_id = %s FOR UPDATE",
                        (thread,))
        refusing = threading.Thread(target=refused_put)
        refusing.start()
        wait_for_row_lock(watching, schema, "lgd_deleted")  # the cleanup waits on the record
        starting = threading.Thread(target=new_run)
        starting.start()
        wait_for_row_lock(watching, schema)  # N1's head row waits for the cleanup's commit
        assert "n1" not in outcome
        holding.commit()
        refusing.join(30)
        starting.join(30)
    assert not refusing.is_alive() and not starting.is_alive()
    error = outcome["error"]
    assert isinstance(error, ThreadConflictError) and error.deleted, error
    with psycopg.connect(POSTGRES_URL) as conn:
        head = conn.execute(f"SELECT head FROM {table}.lgd_heads WHERE thread_id = %s",
                            (thread,)).fetchone()
    assert head == (outcome["n1"],)


def test_a_root_that_commits_just_before_the_rebuild_keeps_its_child_the_head(
    make_saver: type[DurableSaver], namespace: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A prune of a thread with no head yet: both of its row locks find nothing. Between the
    second lock and the rebuild, another run's root N1 commits (the row it starts is one no
    lock of the prune holds), and the put of N2, N1's child, holds that row when the
    rebuild, whose snapshot saw N1 but not N2, reaches it. N2 stays the head. (The rebuild
    waited for the row and then set the head back to N1, so a second child of N1 was
    acknowledged: the fork the real-process checker found under write-behind.) The prune
    is held at that point by the test; the window is a statement wide otherwise."""
    schema, _ = namespace
    saver, other = make_saver(write_mode="through"), make_saver(write_mode="through")
    source = f"rebuild-source-{uuid.uuid4()}"
    thread = f"rebuild-race-{uuid.uuid4()}"
    put_value(other, source, "one")  # a stored row to copy N1 and N2 from
    rebuild = saver.engine.context.statements.rebuild_heads_sql
    at_rebuild, go = threading.Event(), threading.Event()
    execute = Tiers._execute

    def paused(conn: psycopg.Connection[Any], statement: Any) -> Any:
        if statement.query is rebuild and thread in statement.params["thread_ids"]:
            at_rebuild.set()
            go.wait(30)
        return execute(conn, statement)

    monkeypatch.setattr(Tiers, "_execute", staticmethod(paused))
    table = f'"{schema}"'
    n1, n2 = empty_checkpoint()["id"], empty_checkpoint()["id"]
    copy = (f"INSERT INTO {table}.lgd_checkpoints (thread_id, checkpoint_ns, checkpoint_id, "
            "parent_checkpoint_id, run_id, checkpoint, channel_versions, metadata) "
            "SELECT %s, checkpoint_ns, %s, %s, run_id, checkpoint, channel_versions, metadata "
            f"FROM {table}.lgd_checkpoints WHERE thread_id = %s")
    n2_holds, commit_n2 = threading.Event(), threading.Event()

    def new_run() -> None:
        """N1 as a root put commits it (its checkpoint and a new head row), then N2's put
        moves the head and holds the row until the test lets it commit."""
        with psycopg.connect(POSTGRES_URL) as conn:
            conn.execute(copy, (thread, n1, None, source))
            conn.execute(f"INSERT INTO {table}.lgd_heads (thread_id, checkpoint_ns, head, "
                         f"version) VALUES (%s, '', %s, nextval('{table}.lgd_version_seq'))",
                         (thread, n1))
            conn.commit()
            conn.execute(copy, (thread, n2, n1, source))
            conn.execute(f"UPDATE {table}.lgd_heads SET head = %s, version = "
                         f"nextval('{table}.lgd_version_seq') WHERE thread_id = %s",
                         (n2, thread))
            n2_holds.set()
            commit_n2.wait(30)

    pruning = Aside(lambda: saver.prune([thread]))
    pruning.start()
    assert at_rebuild.wait(30), "the prune never reached its rebuild"
    running = Aside(new_run)
    running.start()
    # the new run's first write waits for the prune to commit; without that, N2 holds its
    # row now, and the rebuild is let go to wait for it
    held = n2_holds.wait(1.0)
    go.set()
    if held:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as watching:
            wait_for_row_lock(watching, schema)
    commit_n2.set()
    pruning.join(30)
    running.join(30)
    assert not pruning.is_alive() and not running.is_alive()
    assert (pruning.error, running.error) == (None, None)
    with psycopg.connect(POSTGRES_URL) as conn:
        head = conn.execute(f"SELECT head FROM {table}.lgd_heads WHERE thread_id = %s",
                            (thread,)).fetchone()
    assert head == (n2,), f"the head went back to the root {n1}: {head}"
    assert not held, "the new run's first write went on while the prune held the heads"


def test_a_transaction_postgres_rolls_back_to_break_a_deadlock_runs_again(
    make_saver: type[DurableSaver], namespace: tuple[str, str]
) -> None:
    """A prune waits for a checkpoint row another transaction holds, which in turn waits for
    the heads the prune holds: Postgres breaks the deadlock by rolling the prune back (it
    waited first). The prune runs again once the other transaction is through and
    succeeds, and the saver goes on (a deadlock is no unavailable Postgres: before, the
    prune raised `TierUnavailableError` and every call failed for a breaker cooldown)."""
    schema, _ = namespace
    saver = make_saver(write_mode="through")
    thread = f"deadlock-{uuid.uuid4()}"
    old = put_value(saver, thread, "one")["configurable"]["checkpoint_id"]  # type: ignore[index]
    new = put_value(saver, thread, "two")["configurable"]["checkpoint_id"]  # type: ignore[index]
    table = f'"{schema}"'
    with psycopg.connect(POSTGRES_URL) as other, psycopg.connect(
            POSTGRES_URL, autocommit=True) as watching:
        other.execute(f"SELECT 1 FROM {table}.lgd_checkpoints WHERE thread_id = %s "
                      "AND checkpoint_id = %s FOR UPDATE", (thread, old))
        pruning = Aside(lambda: saver.prune([thread]))
        pruning.start()
        wait_for_row_lock(watching, schema, "lgd_checkpoints")  # the prune's delete waits
        # the other transaction now waits for the heads the prune holds: a deadlock
        other.execute(f"UPDATE {table}.lgd_heads SET written_at = now() WHERE thread_id = %s",
                      (thread,))
        other.commit()
        pruning.join(30)
    assert not pruning.is_alive()
    assert pruning.error is None, pruning.error
    assert [t.checkpoint["id"] for t in saver.list({"configurable": {"thread_id": thread}})] \
        == [new]
