"""A saver made and used before ``fork()`` (gunicorn ``--preload``, Celery's prefork pool,
``multiprocessing`` with the fork start method) works in the child: its own connections,
its own lease heartbeats, its own lease-owner identity."""

from __future__ import annotations

import multiprocessing
import os
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from langgraph_durable import DurableSaver, ToolCallInProgressError, durable_tool
from tests.support.checkpoints import cold_checkpoints, put_value
from tests.support.servers import POSTGRES_URL

LEASE = 1.0


def _backends() -> set[int]:
    """Every Postgres backend pid that exists now."""
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        return {row[0] for row in conn.execute("SELECT pid FROM pg_stat_activity")}


def _backend_of(saver: DurableSaver) -> int:
    """The backend pid of the connection the saver's blocking pool lends now."""
    with saver.engine.tiers().pool.connection() as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    return int(row["pg_backend_pid"])


def test_a_long_tool_in_a_forked_child_keeps_its_lease_on_its_own_connections(
        saver: DurableSaver) -> None:
    """The parent used the saver (a tracked call started its heartbeat thread; a put opened
    its pools), then forked. In the child, a tracked call runs over four leases long: another
    process that asks for the same call meanwhile gets `ToolCallInProgressError` (the
    child's heartbeats keep the lease), not an uncertain call to take over. The child talks
    to Postgres on connections of its own, its call is recorded once, and the parent's
    saver keeps working."""
    fork = multiprocessing.get_context("fork")
    started, release = fork.Event(), fork.Event()
    replies: Any = fork.SimpleQueue()

    @durable_tool(saver=saver, lease=LEASE)
    def ship(order: str) -> str:
        """Ships an order; slow."""
        started.set()
        release.wait(20)
        return f"shipped {order}"

    @durable_tool(saver=saver, lease=LEASE)
    def note(text: str) -> str:
        """Quick."""
        return text

    thread = uuid.uuid4().hex
    config: Any = {"configurable": {"thread_id": thread}}
    assert note.invoke({"type": "tool_call", "name": "note", "args": {"text": "hi"},
                        "id": "n1"}, config).content == "hi"
    put_value(saver, thread, "before fork")
    before_fork = _backends()
    call = {"type": "tool_call", "name": "ship", "args": {"order": "A-7"}, "id": "s1"}

    def child() -> None:
        replies.put(_backend_of(saver))
        replies.put(ship.invoke(call, config).content)

    proc = fork.Process(target=child)
    proc.start()
    try:
        assert started.wait(30), "the child never started its tool call"
        time.sleep(4 * LEASE)
        impatient = durable_tool(ship.inner, saver=saver, wait=0.0)
        with pytest.raises(ToolCallInProgressError):
            impatient.invoke(call, config)
    finally:
        release.set()
        proc.join(30)
    assert proc.exitcode == 0
    assert replies.get() not in before_fork  # a connection the child opened itself
    assert replies.get() == "shipped A-7"
    record = saver.ledger.get(saver.ledger.key_for(thread, "s1"))
    assert record is not None and (record.status, record.attempts) == ("succeeded", 1)
    assert record.lease_owner != saver.engine.owner  # the child was an owner of its own
    put_value(saver, thread, "after fork")
    state = saver.get_tuple(config)
    assert state is not None and state.checkpoint["channel_values"]["value"] == "after fork"


@pytest.mark.parametrize("write_mode", ["behind"])
def test_a_forked_child_flushes_its_writes_after_its_parent_is_gone(
        saver: DurableSaver, namespace: tuple[str, str], tmp_path: Path) -> None:
    """Write-behind: a process writes (its flusher thread starts), forks, and exits at once.
    The child's write reaches Postgres without anyone calling flush: the child runs a
    flusher of its own."""
    schema, _ = namespace
    fork = multiprocessing.get_context("fork")
    verdict = tmp_path / "verdict"
    thread = uuid.uuid4().hex

    def parent() -> None:
        put_value(saver, thread + "-parent", "parent")
        if os.fork():
            os._exit(0)  # the parent and its flusher thread are gone
        found = 0
        try:
            put_value(saver, thread, "child")
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not found:
                time.sleep(0.1)
                found = cold_checkpoints(schema, thread)
        finally:
            written = verdict.with_suffix(".tmp")
            written.write_text(str(found))
            written.rename(verdict)
            os._exit(0)

    proc = fork.Process(target=parent)
    proc.start()
    proc.join(30)
    deadline = time.monotonic() + 30
    while not verdict.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert verdict.read_text() == "1"


@pytest.mark.parametrize("write_mode", ["through", "behind"])
def test_a_forked_childs_writes_are_never_taken_for_its_parents(saver: DurableSaver) -> None:
    """Parent and child write the same checkpoint's pending writes after a fork, in the
    same order of their own calls. The parent holds the checkpoint decoded (read after
    its own write); when the child's write lands, the parent's next read returns it: the
    child's write gave the checkpoint a cache token of its own, never one the parent also
    hands out."""
    fork = multiprocessing.get_context("fork")
    thread = uuid.uuid4().hex
    config = put_value(saver, thread, "root")
    saver.get_tuple(config)
    go: Any = fork.Event()

    def child() -> None:
        go.wait(20)
        saver.put_writes(config, [("value", "child's")], "child-task")

    proc = fork.Process(target=child)
    proc.start()
    try:
        saver.put_writes(config, [("value", "parent's")], "parent-task")
        assert saver.get_tuple(config) is not None  # now held decoded
    finally:
        go.set()
        proc.join(30)
    assert proc.exitcode == 0
    found = saver.get_tuple(config)
    assert found is not None
    assert sorted(task for task, _, _ in found.pending_writes) == ["child-task", "parent-task"]
