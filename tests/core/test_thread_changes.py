"""Changes to whole threads (delete, copy): one transaction that first takes a tombstone
version, then the hot copies dropped with it — or, with Redis bypassed, stale marks."""

from __future__ import annotations

from langgraph_durable._core import ops
from langgraph_durable._core.context import Context
from langgraph_durable._core.keys import ThreadKeys
from langgraph_durable._core.sql.ledger import statements as ledger_statements
from tests.core.script import Script, cold, empty_journal, hot, hot_down


def test_delete_drops_the_hot_copy_with_the_transactions_tombstone(ctx: Context) -> None:
    """delete_thread: drain the journal (empty), intent, drain again (a write-behind write
    made in between; from the intent on they go through Postgres), then one transaction of the
    tombstone, the thread's head rows locked (a write in flight commits first, and is
    deleted too), the rows and the thread's ledger — no heads rebuilt, the thread is gone —
    and ``drop_thread`` with the intent's token and that tombstone, so no copy read before
    the delete can bring the thread back to Redis."""
    st = ctx.statements
    keys = ThreadKeys("t", "a")
    script = Script([
        empty_journal("t"),
        (hot("intent", [keys.intents, keys.unflushed, keys.versions]), 0),
        empty_journal("t"),
        (cold(st.tombstone_sql, st.lock_heads_sql, st.delete_threads_sql,
              ledger_statements("s").delete_threads), [[{"version": 40}], None, None, None]),
        (hot("drop_thread", [keys.intents, keys.registry, keys.versions, keys.unflushed]), 3),
    ])
    script.run(ops.delete_threads(ctx, ["a"]))
    assert script.done
    assert script.requests[3].statements[1].params == {"thread_ids": ["a"]}
    assert script.requests[3].statements[2].params == {"thread_ids": ["a"]}
    assert list(script.requests[4].args) == [script.requests[1].args[0], 40, ctx.ttl_ms, ""]


def test_delete_with_redis_down_marks_the_thread_stale_in_the_same_transaction(
        ctx: Context) -> None:
    """Redis fails at the intent: the delete still commits, and its transaction adds the
    thread's stale mark and a version bump, so every process drops its hot copy; no drop
    is tried here, and this process applies the marks before its next operation."""
    st = ctx.statements
    ctx.marks.checked()
    script = Script([
        empty_journal("t"),
        (hot("intent"), hot_down()),
        (cold(st.tombstone_sql, st.lock_heads_sql, st.delete_threads_sql,
              ledger_statements("s").retire_threads,
              st.mark_hot_stale_sql, st.bump_thread_sql, st.order_marks_sql,
              st.renumber_marks_sql),
         [[{"version": 41}], None, None, None, None, None, None, None]),
    ])
    script.run(ops.delete_threads(ctx, ["a"], keep_ledger=True))
    assert script.done
    _, _, _, _, mark, bump, _, _ = script.requests[2].statements
    assert mark.params == {"thread_id": "a"} and bump.params == {"thread_id": "a"}
    assert ctx.breaker.is_open and ctx.marks.due()


def test_copy_rebuilds_the_targets_heads_and_drops_only_the_target(ctx: Context) -> None:
    """copy_thread: the target's rows and ledger are written and its namespaces get their
    heads (and new versions) back in the same transaction; only the target's hot copy is
    dropped — the source's stays valid."""
    st = ctx.statements
    target = ThreadKeys("t", "b")
    script = Script([
        empty_journal("t"),
        (hot("intent", [target.intents, target.unflushed, target.versions]), 0),
        (cold(st.lock_heads_table_sql, st.tombstone_sql, st.lock_heads_sql,
              st.copy_thread_sql, ledger_statements("s").copy_thread, st.lock_heads_sql,
              st.rebuild_heads_sql),
         [None, [{"version": 50}], None, None, None, None, None]),
        (hot("drop_thread", [target.intents, target.registry, target.versions,
                          target.unflushed]), 0),
    ])
    script.run(ops.copy_thread(ctx, "a", "b"))
    assert script.done
    _, _, lock, copy, _, relock, heads = script.requests[2].statements
    assert lock.params == relock.params == {"thread_ids": ["b"]}
    assert copy.params == {"source": "a", "target": "b", "up_to": None}
    assert heads.params == {"thread_ids": ["b"]}
    assert script.requests[3].args[1] == 50
