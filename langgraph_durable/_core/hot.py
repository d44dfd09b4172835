"""Hot-tier plumbing shared by every operation: calls that tolerate a Redis outage, the
write-through intent protocol, and the recovery that runs before Redis is trusted again.

Write-through protocol for every mutation of a thread (put, put_writes, delete, copy,
prune): announce an intent in Redis, commit in Postgres, then apply the change to Redis
and clear the intent in one script. A reader that finds an intent reads Postgres, so Redis
never serves a state older than an acknowledged one, whichever step a crash interrupts.
When Redis cannot be reached the write goes to Postgres alone and, in the same
transaction, marks the thread's hot copy stale; the marks are applied before Redis is
trusted again (`recover_hot`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import Any

from langgraph_durable._core.context import Context
from langgraph_durable._core.keys import (
    ThreadKeys,
    journal_key,
)
from langgraph_durable._core.requests import Cold, Hot, Op, Statement
from langgraph_durable.errors import TierUnavailableError

logger = logging.getLogger("langgraph_durable")


def try_hot(ctx: Context, request: Hot) -> Op[Any]:
    """Run a hot request if the breaker allows; ``None`` when Redis is bypassed or fails."""
    if not ctx.breaker.allows():
        return None
    try:
        result = yield request
    except TierUnavailableError as exc:
        if exc.tier != "hot":
            raise
        if not ctx.breaker.is_open:
            logger.warning("hot tier unavailable, serving from Postgres alone: %s", exc.__cause__)
        ctx.breaker.failure()
        return None
    return result


def announce(ctx: Context, keys: ThreadKeys) -> Op[str | None]:
    """Record a write intent; returns its token, or ``None`` if Redis is bypassed."""
    token = uuid.uuid4().hex
    done = yield from try_hot(
        ctx, Hot("intent", [keys.intents], [token, ctx.deadline_ms, ctx.intent_ttl_ms])
    )
    return token if done is not None else None


def stale_mark(ctx: Context, thread_id: str) -> Statement:
    return Statement(ctx.statements.mark_hot_stale_sql, {"thread_id": thread_id})


def commit(
    ctx: Context, token: str | None, thread_ids: Sequence[str], statements: Sequence[Statement]
) -> Op[list[Any]]:
    """Commit statements; if Redis was bypassed, mark the threads' hot copies stale too."""
    marks = [] if token is not None else [stale_mark(ctx, t) for t in thread_ids]
    result: list[Any] = yield Cold((*statements, *marks))
    return result


def recover_hot(ctx: Context) -> Op[bool]:
    """Probe Redis after an outage; before trusting it again, drop the hot copy of every
    thread written while it was bypassed (Redis may have come back with older data).

    Returns whether the hot tier is usable again; on failure the breaker stays open.
    """
    try:
        yield Hot("journal_state", [journal_key(ctx.config.key_prefix)], [])
        dropped = 0
        while rows := (yield Cold.one(ctx.statements.take_hot_stale_sql, {}, fetch=True))[0]:
            for row in rows:
                keys = ThreadKeys(ctx.config.key_prefix, row["thread_id"])
                yield Hot("drop_thread", [keys.intents, keys.registry, keys.unflushed], [""])
            yield Cold.one(
                ctx.statements.clear_hot_stale_sql,
                {
                    "thread_ids": [r["thread_id"] for r in rows],
                    "before": max(r["at"] for r in rows),
                },
            )
            dropped += len(rows)
    except TierUnavailableError as exc:
        logger.debug("hot tier still unavailable: %s", exc)
        ctx.breaker.failure()
        return False
    logger.warning(
        "hot tier back; dropped the hot copy of %d threads written while it was unavailable",
        dropped,
    )
    ctx.breaker.recovered()
    return True


def connect(ctx: Context) -> Op[bool]:
    """Open a hot-tier connection now (at setup), so the first read after a restart costs
    one round trip; returns whether Redis answered. A dead Redis is not an error here."""
    state = yield from try_hot(ctx, Hot("journal_state", [journal_key(ctx.config.key_prefix)], []))
    return state is not None
