"""Applying stale marks: each thread written while Redis was bypassed loses its hot copy,
with the mark's version as tombstone, and Redis records the highest mark it applied."""

from __future__ import annotations

from langgraph_durable._core import hot as hot_tier
from langgraph_durable._core.context import Context
from langgraph_durable._core.keys import Layout, ThreadKeys
from tests.core.script import Script, cold, hot, hot_down


def _drop(ctx: Context, thread_id: str, version: int) -> tuple[list[str], list[object]]:
    """The keys and arguments of the drop a mark of ``thread_id`` causes."""
    keys = ThreadKeys("t", thread_id)
    return [keys.intents, keys.registry, keys.versions, keys.unflushed], [
        "", version, ctx.ttl_ms, "1"]


def test_pending_marks_drop_each_thread_with_its_tombstone_then_record_the_seq(
        ctx: Context) -> None:
    """apply_marks: the highest mark Redis applied (``marks`` with nothing to set), then
    the newest mark in Postgres (Redis first, so a process's first call reaches Redis
    while its first Postgres connection is made), the marks after it, one ``drop_thread``
    per mark carrying the mark's version as tombstone, then ``marks`` raised to the last
    applied seq; the next page is empty, old marks are forgotten, and it returns how many
    threads it dropped."""
    st = ctx.statements
    watermark = Layout("t").marks(0)
    script = Script([
        (hot("marks", [watermark]), 10),
        (cold(st.newest_mark_sql), [[{"seq": 12}]]),
        (cold(st.pending_marks_sql), [[{"seq": 11, "thread_id": "a", "version": 301},
                                       {"seq": 12, "thread_id": "b", "version": 305}]]),
        (hot("drop_thread", _drop(ctx, "a", 301)[0]), 4),
        (hot("drop_thread", _drop(ctx, "b", 305)[0]), 0),
        (hot("marks", [watermark]), 12),
        (cold(st.pending_marks_sql), [[]]),
        (cold(st.forget_marks_sql), [None]),
    ])
    assert script.run(hot_tier.apply_marks(ctx)) == 2
    assert script.done
    read, newest, first_page, drop_a, drop_b, record, second_page, _ = script.requests
    assert newest.statements[0].fetch
    assert list(read.args) == [""]
    assert first_page.statements[0].params == {"after": 10}
    assert list(drop_a.args) == _drop(ctx, "a", 301)[1]
    assert list(drop_b.args) == _drop(ctx, "b", 305)[1]
    assert list(record.args) == [12]
    assert second_page.statements[0].params == {"after": 12}


def test_a_redis_that_applied_the_newest_mark_costs_two_requests(ctx: Context) -> None:
    """The usual poll: Redis already applied the newest mark (or starts from it, being
    new), so apply_marks stops after one ``marks`` call and the newest-mark query."""
    script = Script([
        (hot("marks", [Layout("t").marks(0)]), 12),
        (cold(ctx.statements.newest_mark_sql), [[{"seq": 12}]]),
    ])
    assert script.run(hot_tier.apply_marks(ctx)) == 0
    assert script.done


def test_a_poll_that_cannot_reach_redis_opens_the_breaker_and_waits_an_interval(
        ctx: Context) -> None:
    """poll_marks with Redis failing: the caller's operation goes on (no error), the
    breaker opens and the next poll is one interval away, not due at once."""
    script = Script([
        (hot("marks"), hot_down()),
    ])
    script.run(hot_tier.poll_marks(ctx))
    assert script.done
    assert ctx.breaker.is_open and not ctx.marks.due()
