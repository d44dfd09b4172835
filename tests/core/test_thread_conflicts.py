"""One history per thread: a put that extends the head it read commits only if that head
is still the namespace's head, and otherwise raises `ThreadConflictError`."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_durable._core import ops
from langgraph_durable._core.context import Context
from langgraph_durable._core.journal.entries import decode
from langgraph_durable._core.keys import Layout, ThreadKeys
from langgraph_durable._core.lineage import RUN_KEY
from langgraph_durable._core.scripts.registry import Reply
from langgraph_durable.errors import ThreadConflictError
from tests.core.script import Script, arg, cold, hot

THREAD = "thread-1"
PARENT = "1f0-parent"


def _put_on_head(ctx: Context) -> tuple[str, Any]:
    """A put from a checkpoint this process read as the latest of its namespace (the
    lineage says so): its checkpoint id and the operation."""
    ctx.lineage.caller(None).read(THREAD, "", PARENT, latest=True)
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"x": 2}
    checkpoint["channel_versions"] = {"x": "2"}
    config = {"configurable": {"thread_id": THREAD, "checkpoint_ns": "",
                               "checkpoint_id": PARENT}}
    return checkpoint["id"], ops.put(ctx, config, checkpoint,  # type: ignore[arg-type]
                                     {"source": "loop", "step": 1}, {"x": "2"})


def _refused_put(ctx: Context, head: dict[str, Any]) -> list[Any]:
    """A write-through put whose compare-and-set stores nothing: intent, the put statement
    (no row), the intent released, then the head query, answered with ``head``."""
    keys = ThreadKeys("t", THREAD)
    return [
        (hot("intent", [keys.intents, keys.unflushed, keys.versions]), 0),
        (cold(ctx.statements.put_checkpoint_sql), [[]]),
        (hot("release", [keys.intents, keys.versions]), 1),
        (cold(ctx.statements.head_sql), [[head]]),
    ]


def test_write_through_put_on_a_moved_head_raises_and_releases_its_intent(
        ctx: Context) -> None:
    """Write-through: the put statement is a compare-and-set on the head row (``cas``);
    when it returns no row nothing was stored, so the intent is cleared with ``release``
    (not the hot put), the head is looked up, Redis is told it (a copy of the namespace
    that ends before it lost it), and ThreadConflictError names the thread,
    the parent the run read, the head it found and the run that wrote it."""
    _, op = _put_on_head(ctx)
    keys = ThreadKeys("t", THREAD)
    script = Script([
        *_refused_put(ctx, {"head": "1f0-other", "run_id": "run-9"}),
        (hot("stale_index", [keys.registry, keys.index("")]), 0),
    ])
    with pytest.raises(ThreadConflictError) as raised:
        script.run(op)
    assert script.done
    assert list(script.requests[4].args) == ["1f0-other"]
    put_stmt = script.requests[1].statements[0]
    assert put_stmt.fetch and put_stmt.params["cas"] is True
    assert put_stmt.params["parent_id"] == PARENT
    assert list(script.requests[2].args) == [script.requests[0].args[0]]
    assert script.requests[3].statements[0].params == {"thread_id": THREAD,
                                                       "checkpoint_ns": "",
                                                       "checkpoint_id": PARENT}
    error = raised.value
    assert (error.thread_id, error.checkpoint_ns) == (THREAD, "")
    assert (error.expected, error.head, error.run_id) == (PARENT, "1f0-other", "run-9")
    assert PARENT in str(error) and "1f0-other" in str(error)


def test_a_put_extending_a_deleted_history_removes_what_came_first_and_says_deleted(
        ctx: Context) -> None:
    """The put's compare-and-set fails and the head query says the parent's history was
    deleted: before raising, the put's own checkpoint joins the deleted history (the
    record first, then the removal of writes that came before it, in one transaction with
    the tombstone and the rebuild of the thread's heads above it, and the hot copy
    dropped), and the error says deleted."""
    checkpoint_id, op = _put_on_head(ctx)
    st = ctx.statements
    script = Script([
        *_refused_put(ctx, {"head": None, "run_id": None, "deleted": True}),
        (hot("intent"), 0),
        (cold(st.lock_heads_table_sql, st.tombstone_sql, st.lock_heads_sql,
              st.extend_deleted_sql, st.forget_deleted_sql, st.lock_heads_sql,
              st.rebuild_heads_sql),
         [None, [{"version": 40}], None, None, None, None, None]),
        (hot("drop_thread"), 0),
    ])
    with pytest.raises(ThreadConflictError) as raised:
        script.run(op)
    assert script.done
    forget = script.requests[5].statements
    assert forget[2].params == {"thread_ids": [THREAD]}
    assert forget[3].params == forget[4].params == {
        "thread_id": THREAD, "checkpoint_ns": "", "checkpoint_id": checkpoint_id}
    assert raised.value.deleted and raised.value.expected == PARENT
    assert "deleted while this run worked" in str(raised.value)


def test_write_behind_put_on_a_moved_head_raises_with_the_head_redis_found(
        make_ctx: Callable[..., Context]) -> None:
    """Write-behind: the journaled script checks the head in Redis (its head flag is
    set) and replies ``[CONFLICT, head]``; the run id comes from Postgres, but the head
    named is the one Redis found (Postgres may not have it yet)."""
    ctx = make_ctx(write_mode="behind")
    _, op = _put_on_head(ctx)
    script = Script([
        (hot("put_behind"), [Reply.CONFLICT, b"1f0-redis-head"]),
        (cold(ctx.statements.head_sql), [[{"head": "1f0-older", "run_id": None}]]),
    ])
    with pytest.raises(ThreadConflictError) as raised:
        script.run(op)
    assert script.done
    assert arg(script.requests[0], "head") == "1"
    error = raised.value
    assert (error.thread_id, error.expected, error.head) == (THREAD, PARENT, "1f0-redis-head")
    assert error.run_id is None


def test_write_behind_put_on_the_head_is_one_journaled_script(
        make_ctx: Callable[..., Context]) -> None:
    """Write-behind on the current head: one script, with the head check on, the journal
    and its byte counter as the last keys and, after the arguments, the entry's payload (the
    checkpoint's journal entry), unflushed member, entry bound and byte bound; no Postgres
    request. The returned config carries the new head for the next put."""
    ctx = make_ctx(write_mode="behind")
    checkpoint_id, op = _put_on_head(ctx)
    keys = ThreadKeys("t", THREAD)
    script = Script([(hot("put_behind"), b"1-0")])
    config = script.run(op)
    assert script.done
    request = script.requests[0]
    assert request.keys[0] == keys.intents
    assert list(request.keys[-2:]) == [Layout("t").journal(0), Layout("t").journal_bytes(0)]
    assert request.args[0] == "" and request.args[1] == -1, "no intent; no TTL until flushed"
    assert request.args[11] == "1" and request.args[13] == "0", "extends the head; no writes"
    blob_pairs = int(request.args[14])
    assert len(request.args) == 15 + 2 * blob_pairs + 4, "the script finds its entry there"
    payload, member, bound, byte_bound = request.args[-4:]
    entry = decode([b"1-0", [b"d", payload]])
    assert (entry.kind, entry.thread_id, entry.ns, entry.checkpoint_id) == (
        "c", THREAD, "", checkpoint_id)
    assert member == keys.unflushed_member("", checkpoint_id)
    assert (bound, byte_bound) == (ctx.config.max_unflushed, ctx.config.max_unflushed_bytes)
    assert config["configurable"] == {"thread_id": THREAD, "checkpoint_ns": "",
                                      "checkpoint_id": checkpoint_id}, "nothing invented"
    assert ctx.lineage.caller(None).extends(THREAD, "", checkpoint_id), "the next put extends it"


def _put_from(ctx: Context, parent: str, run: object | None = None) -> Any:
    """A put whose parent is ``parent``, made inside the LangGraph run ``run`` (its runtime
    object rides in the config, as LangGraph passes it) or outside any run."""
    checkpoint = empty_checkpoint()
    configurable: dict[str, Any] = {"thread_id": THREAD, "checkpoint_ns": "",
                                    "checkpoint_id": parent}
    if run is not None:
        configurable["__pregel_runtime"] = run
    return ops.put(ctx, {"configurable": configurable}, checkpoint,  # type: ignore[arg-type]
                   {"source": "loop", "step": 1}, {})


def _cas_of(ctx: Context, op: Any) -> bool:
    """Whether the write-through put statement compares its parent with the head."""
    keys = ThreadKeys("t", THREAD)
    script = Script([
        (hot("intent", [keys.intents, keys.unflushed, keys.versions]), 0),
        (cold(ctx.statements.put_checkpoint_sql),
         [[{"version": 2, "head": "x", "has_writes": False}]]),
        (hot("put"), None),
    ])
    script.run(op)
    return bool(script.requests[1].statements[0].params["cas"])


def test_a_put_from_a_checkpoint_read_by_id_forks_even_from_the_head(ctx: Context) -> None:
    """An explicit checkpoint id is a fork the caller asked for: the put is not compared,
    even when the same caller had read that checkpoint as the latest before, or checks it
    against the latest after (``update_state`` reads by id, then the latest with a config
    naming ``checkpoint_id`` without a value, then writes)."""
    marks = ctx.lineage.caller(None)
    marks.read(THREAD, "", PARENT, latest=True)
    marks.read(THREAD, "", PARENT, latest=False, check=True)  # its config names the id
    marks.read(THREAD, "", PARENT, latest=True, check=True)
    assert _cas_of(ctx, _put_from(ctx, PARENT)) is False


def test_a_later_read_of_the_latest_extends_a_checkpoint_once_read_by_id(
        ctx: Context) -> None:
    """A read by id in an earlier call (a UI showing the head) does not make a later
    ``update_state`` without an id a fork: its own read of the latest decides."""
    marks = ctx.lineage.caller(None)
    marks.read(THREAD, "", PARENT, latest=False)
    marks.read(THREAD, "", PARENT, latest=True)
    assert _cas_of(ctx, _put_from(ctx, PARENT)) is True


def test_runs_are_told_apart_by_the_runtime_langgraph_passes(ctx: Context) -> None:
    """A live run that read the head keeps its compare-and-set when a call outside it (or
    another run) addresses the same checkpoint by id in the same process; its later puts
    extend its own checkpoints."""
    run = object()
    marks = ctx.lineage.caller({"configurable": {"thread_id": THREAD, RUN_KEY: run}})
    marks.read(THREAD, "", PARENT, latest=True)
    ctx.lineage.caller(None).read(THREAD, "", PARENT, latest=False)  # update_state(by id)
    assert _cas_of(ctx, _put_from(ctx, PARENT, run)) is True
    assert _cas_of(ctx, _put_from(ctx, PARENT)) is False
    marks.wrote(THREAD, "", "1f0-child")
    assert _cas_of(ctx, _put_from(ctx, "1f0-child", run)) is True


def test_calls_outside_a_run_are_told_apart_by_their_thread(ctx: Context) -> None:
    """Two threads calling the saver outside any run keep their own marks: one's read of
    the latest does not turn the other's fork (a read by id) into a compared put."""
    forking = ctx.lineage.caller(None)
    forking.read(THREAD, "", PARENT, latest=False)
    other = threading.Thread(
        target=lambda: ctx.lineage.caller(None).read(THREAD, "", PARENT, latest=True))
    other.start()
    other.join()
    assert _cas_of(ctx, _put_from(ctx, PARENT)) is False


def test_a_put_from_a_checkpoint_this_process_never_read_is_not_compared(
        ctx: Context) -> None:
    """A direct put (no read before it) is the caller's choice, as with every other saver;
    a caller's marks past its size are forgotten, oldest first, which only drops a compare."""
    assert _cas_of(ctx, _put_from(ctx, PARENT)) is False
    marks = ctx.lineage.caller(None)
    marks.size = 2
    for checkpoint_id in ("a", "b", "c"):
        marks.read(THREAD, "", checkpoint_id, latest=True)
    assert not marks.extends(THREAD, "", "a")
    assert marks.extends(THREAD, "", "c")
