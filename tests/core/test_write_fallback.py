"""A put when Redis fails: the write goes to Postgres alone and marks the hot copy stale."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_durable._core import ops
from langgraph_durable._core.context import Context
from langgraph_durable._core.keys import ThreadKeys, journal_key
from tests.core.script import Script, cold, cold_down, hot, hot_down

THREAD = "thread-1"


def _put(ctx: Context) -> Any:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"x": 1}
    checkpoint["channel_versions"] = {"x": "1"}
    config = {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}
    return checkpoint["id"], ops.put(ctx, config, checkpoint,  # type: ignore[arg-type]
                                     {"source": "input", "step": 0}, {"x": "1"})


def test_write_through_put_with_redis_down_commits_to_postgres_with_a_stale_mark(
        ctx: Context) -> None:
    """put: intent → TierUnavailableError(hot) → one transaction of the checkpoint and the
    thread's stale mark; no further Redis call; the breaker opens; the config is returned."""
    checkpoint_id, op = _put(ctx)
    keys = ThreadKeys("t", THREAD)
    script = Script([
        (hot("intent", [keys.intents]), hot_down()),
        (cold(ctx.statements.put_checkpoint_sql, ctx.statements.mark_hot_stale_sql),
         [None, None]),
    ])
    config = script.run(op)
    assert script.done
    assert config["configurable"] == {"thread_id": THREAD, "checkpoint_ns": "",
                                      "checkpoint_id": checkpoint_id}
    put_stmt, mark = script.requests[1].statements
    assert put_stmt.params["thread_id"] == THREAD
    assert put_stmt.params["checkpoint_id"] == checkpoint_id
    assert mark.params == {"thread_id": THREAD}
    assert ctx.breaker.is_open and ctx.breaker.trips == 1


def test_while_the_breaker_is_open_a_put_skips_redis_entirely(ctx: Context) -> None:
    """Once the breaker is open, a put yields no hot request at all: straight to Postgres,
    with the stale mark."""
    ctx.breaker.failure()
    _, op = _put(ctx)
    script = Script([
        (cold(ctx.statements.put_checkpoint_sql, ctx.statements.mark_hot_stale_sql),
         [None, None]),
    ])
    script.run(op)
    assert script.done


def test_write_through_put_with_both_tiers_up_clears_its_intent_in_redis(ctx: Context) -> None:
    """The healthy path: intent, Postgres commit without a stale mark, then the hot put
    script carrying the intent's token."""
    _, op = _put(ctx)
    keys = ThreadKeys("t", THREAD)
    script = Script([
        (hot("intent", [keys.intents]), 1),
        (cold(ctx.statements.put_checkpoint_sql), [None]),
        (hot("put"), 1),
    ])
    script.run(op)
    assert script.done
    token = script.requests[0].args[0]
    assert script.requests[2].args[0] == token
    assert not ctx.breaker.is_open


def test_write_through_put_with_postgres_down_raises_and_leaves_redis_untouched(
        ctx: Context) -> None:
    """Postgres unreachable in write-through: the error reaches the caller and the hot put
    never runs (the intent alone sends readers to Postgres)."""
    _, op = _put(ctx)
    script = Script([
        (hot("intent"), 1),
        (cold(ctx.statements.put_checkpoint_sql), cold_down()),
    ])
    with pytest.raises(Exception, match="cold tier") as raised:
        script.run(op)
    assert getattr(raised.value, "tier", None) == "cold"
    assert script.done


def test_write_behind_put_with_redis_down_falls_back_to_postgres(
        make_ctx: Callable[..., Context]) -> None:
    """Write-behind: the journaled hot script fails, the breaker opens, and the put is
    committed to Postgres with a stale mark instead (no intent is tried on a dead Redis)."""
    ctx = make_ctx(write_mode="behind")
    _, op = _put(ctx)
    keys = ThreadKeys("t", THREAD)
    script = Script([
        (hot("put_behind"), hot_down()),
        (cold(ctx.statements.put_checkpoint_sql, ctx.statements.mark_hot_stale_sql),
         [None, None]),
    ])
    script.run(op)
    assert script.done
    assert script.requests[0].keys[-1] == journal_key("t")
    assert keys.intents in script.requests[0].keys
