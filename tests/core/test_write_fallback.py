"""A put when a tier fails: write-through goes to Postgres alone and marks the hot copy
stale; write-behind refuses rather than write Postgres under entries only Redis holds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_durable._core import ops
from langgraph_durable._core.context import Context
from langgraph_durable._core.keys import ThreadKeys
from langgraph_durable._core.scripts.registry import Reply
from langgraph_durable.errors import TierUnavailableError
from tests.core.script import Script, cold, cold_down, hot, hot_down

THREAD = "thread-1"


def _put(ctx: Context) -> tuple[str, Any]:
    """A put of a first checkpoint (no parent, no head read): its id and the operation."""
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"x": 1}
    checkpoint["channel_versions"] = {"x": "1"}
    config = {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}
    return checkpoint["id"], ops.put(ctx, config, checkpoint,  # type: ignore[arg-type]
                                     {"source": "input", "step": 0}, {"x": "1"})


def test_write_through_put_with_redis_down_commits_to_postgres_with_a_stale_mark(
        ctx: Context) -> None:
    """put: intent → TierUnavailableError(hot) → one transaction of the thread's head rows
    locked (a mark bumps them all, so it takes them first, in order), the checkpoint, the
    thread's stale mark and a new version of its namespaces; no further Redis call; the
    breaker opens, this process applies the marks next, and the config is returned."""
    checkpoint_id, op = _put(ctx)
    keys = ThreadKeys("t", THREAD)
    st = ctx.statements
    ctx.marks.checked()
    script = Script([
        (hot("intent", [keys.intents, keys.unflushed, keys.versions]), hot_down()),
        (cold(st.lock_heads_for_writes_sql, st.lock_heads_sql, st.put_checkpoint_sql,
              st.mark_hot_stale_sql,
              st.bump_thread_sql, st.order_marks_sql, st.renumber_marks_sql),
         [None, None, [{"version": 9, "head": "x", "has_writes": False}], None, None, None, None]),
    ])
    config = script.run(op)
    assert script.done
    assert config["configurable"] == {"thread_id": THREAD, "checkpoint_ns": "",
                                      "checkpoint_id": checkpoint_id}
    _, lock, put_stmt, mark, bump, _, renumber = script.requests[1].statements
    assert lock.params == {"thread_ids": [THREAD]}
    assert put_stmt.fetch
    assert put_stmt.params["thread_id"] == THREAD
    assert put_stmt.params["checkpoint_id"] == checkpoint_id
    assert put_stmt.params["cas"] is False
    assert mark.params == {"thread_id": THREAD} and bump.params == {"thread_id": THREAD}
    assert renumber.params == {"thread_ids": [THREAD]}  # numbered last, in commit order
    assert ctx.breaker.is_open and ctx.breaker.trips == 1
    assert ctx.marks.due()


def test_while_the_breaker_is_open_a_put_skips_redis_entirely(ctx: Context) -> None:
    """Once the breaker is open, a put yields no hot request at all: straight to Postgres,
    with the stale mark and the version bump."""
    ctx.breaker.failure()
    _, op = _put(ctx)
    st = ctx.statements
    script = Script([
        (cold(st.lock_heads_for_writes_sql, st.lock_heads_sql, st.put_checkpoint_sql,
              st.mark_hot_stale_sql,
              st.bump_thread_sql, st.order_marks_sql, st.renumber_marks_sql),
         [None, None, [{"version": 9, "head": "x", "has_writes": False}], None, None, None, None]),
    ])
    script.run(op)
    assert script.done


@pytest.mark.parametrize("has_writes", [False, True])
def test_write_through_put_with_both_tiers_up_applies_the_committed_version(
        ctx: Context, has_writes: bool) -> None:
    """The healthy path: intent, Postgres commit without a stale mark (its row carries the
    namespace's new version, and whether Postgres holds writes that came before the
    checkpoint), then the hot put script carrying the intent's token, that version and
    that answer, so a copy read before this commit can never replace it, and a copy
    without those writes is never served."""
    checkpoint_id, op = _put(ctx)
    keys = ThreadKeys("t", THREAD)
    script = Script([
        (hot("intent", [keys.intents, keys.unflushed, keys.versions]), 0),
        (cold(ctx.statements.put_checkpoint_sql),
         [[{"version": 7, "head": checkpoint_id, "has_writes": has_writes}]]),
        (hot("put", [keys.intents, keys.index(""), keys.blobs(""),
                     keys.checkpoint("", checkpoint_id), keys.registry, keys.unflushed,
                     keys.versions]), 1),
    ])
    script.run(op)
    assert script.done
    token = script.requests[0].args[0]
    args = script.requests[2].args
    assert args[0] == token
    assert args[10] == 7, "the committed version"
    assert args[11] == "1", "committed as the namespace's head: Redis may start its index"
    assert args[12] == keys.version_field("")
    assert args[13] == ("1" if has_writes else "0"), "Postgres holds writes of it"
    assert not ctx.breaker.is_open


def test_write_through_put_with_postgres_down_raises_and_leaves_redis_untouched(
        ctx: Context) -> None:
    """Postgres unreachable in write-through: the error reaches the caller and the hot put
    never runs (the intent alone sends readers to Postgres)."""
    _, op = _put(ctx)
    script = Script([
        (hot("intent"), 0),
        (cold(ctx.statements.put_checkpoint_sql), cold_down()),
    ])
    with pytest.raises(TierUnavailableError) as raised:
        script.run(op)
    assert raised.value.tier == "cold"
    assert script.done


def test_write_behind_put_with_redis_down_fails_closed(
        make_ctx: Callable[..., Context]) -> None:
    """Write-behind: the journaled hot script fails, the breaker opens, and the put raises
    TierUnavailableError(tier="hot") without any Postgres request (Redis may hold entries
    Postgres lacks; writing Postgres could fork the thread). While the breaker stays open,
    the next put raises before any request at all."""
    ctx = make_ctx(write_mode="behind")
    _, op = _put(ctx)
    script = Script([(hot("put_behind"), hot_down())])
    with pytest.raises(TierUnavailableError) as raised:
        script.run(op)
    assert raised.value.tier == "hot" and THREAD in str(raised.value)
    assert script.done and ctx.breaker.is_open
    _, again = _put(ctx)
    with pytest.raises(TierUnavailableError, match="hot"):
        next(again)


def test_write_behind_put_sent_through_postgres_fails_closed_when_its_intent_cannot_be_set(
        make_ctx: Callable[..., Context]) -> None:
    """Write-behind: the script sends the put through Postgres (a write-through write of the
    thread is in flight), then Redis cannot be reached for the intent. The put raises
    TierUnavailableError(tier="hot") without committing: with no intent, another saver's
    write-behind write of the thread would extend the same head in Redis, unordered with
    this commit, and fork the thread."""
    ctx = make_ctx(write_mode="behind")
    _, op = _put(ctx)
    keys = ThreadKeys("t", THREAD)
    script = Script([
        (hot("put_behind"), [Reply.COLD]),
        (hot("intent", [keys.intents, keys.unflushed, keys.versions]), hot_down()),
    ])
    with pytest.raises(TierUnavailableError) as raised:
        script.run(op)
    assert raised.value.tier == "hot" and THREAD in str(raised.value)
    assert script.done
