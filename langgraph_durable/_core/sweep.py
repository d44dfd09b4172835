"""Retention sweeps: delete what a `Retention` policy no longer keeps, from both tiers.

A sweep drains the write-behind journal, then walks the threads in id order, a batch at a
time (`Retention.batch`), each batch a few short transactions:

1. One read says of each thread of the batch whether it is idle, aged or too long.
2. Each thread to change is claimed in Redis (fence.lua): an intent, taken only when
   no live writer holds one and no write-behind entry of it waits for a flush; a busy
   thread is left for the next sweep. While the claim is held, readers go to Postgres and
   write-behind writers write through Postgres, so the Postgres row locks order them with
   the sweep; another sweeper finds the claim and skips the thread.
3. Idle threads go in one transaction that locks their head rows (``SKIP LOCKED``) and
   checks the policy again under the locks: a thread written meanwhile stays. Threads
   that are only pruned (``max_age``, ``keep_last``) go through the same keep-set as
   ``prune``: each namespace keeps its latest checkpoint, the checkpoints the policy
   keeps, and every ancestor their `DeltaChannel` values need.
4. The hot copy of every changed thread is dropped with a tombstone version taken in the
   same transaction (the path ``delete_thread`` uses), which releases the claim.

A sweep needs Redis: without it, it cannot see a write-behind writer at work, and it
raises `TierUnavailableError` rather than delete under one.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from typing import Any, TypeVar

from langgraph_durable._core.context import Context, SweepReport
from langgraph_durable._core.hot import drop_many, try_hot
from langgraph_durable._core.prune import keep_set, prune_scan, prune_statements
from langgraph_durable._core.requests import Cold, HotBatch, Op, Statement
from langgraph_durable._core.scripts.thread import fence, release
from langgraph_durable._core.sql.sweep import statements
from langgraph_durable._core.writes import drain_journal, mutate_threads
from langgraph_durable.config import Retention, seconds
from langgraph_durable.errors import TierUnavailableError

T = TypeVar("T")


def sweep(ctx: Context, retention: Retention, *, dry_run: bool = False) -> Op[SweepReport]:
    """Apply ``retention`` to every thread of the schema (see the module's docstring).

    Raises:
        TierUnavailableError: Redis or Postgres cannot be reached (what was swept before
            stays swept; nothing is half-deleted).
    """
    started = time.monotonic()
    report = SweepReport(dry_run=dry_run)
    if retention.active:
        if not dry_run:
            if not ctx.breaker.allows():
                raise _needs_redis()
            yield from drain_journal(ctx)
        after = ""
        while rows := (yield Cold((_batch(ctx, retention, after),)))[0]:
            after = rows[-1]["thread_id"]
            report.threads_examined += len(rows)
            spared = retention.keep_interrupted
            idle = [r for r in rows if r["idle"] and not (spared and r["interrupted"])]
            gone = {r["thread_id"] for r in idle}
            pruned = [
                r["thread_id"]
                for r in rows
                if (r["aged"] or r["long"]) and r["thread_id"] not in gone
            ]
            if dry_run:
                report.threads_deleted += len(idle)
                report.checkpoints += sum(r["checkpoints"] for r in idle)
                if pruned:
                    yield from _plan_prunes(ctx, retention, pruned, report)
                continue
            if idle:
                yield from _delete_idle(ctx, retention, [r["thread_id"] for r in idle], report)
            if pruned:
                yield from _prune(ctx, retention, pruned, report)
    report.seconds = time.monotonic() - started
    ctx.sweeps.add(report)
    return report


def _needs_redis() -> TierUnavailableError:
    return TierUnavailableError(
        "Redis (hot tier) is unavailable: a sweep needs it to see writers at work on a "
        "thread before it deletes any of it; it runs again once Redis is back",
        tier="hot",
    )


def _batch(ctx: Context, retention: Retention, after: str) -> Statement:
    return Statement(
        statements(ctx.config.schema).batch,
        {
            "after": after,
            "limit": retention.batch,
            "max_idle": _secs(retention.max_idle),
            "max_age": _secs(retention.max_age),
            "keep_last": retention.keep_last,
        },
        fetch=True,
    )


def _secs(value: Any) -> float | None:
    return None if value is None else seconds(value)


def _claim(ctx: Context, thread_ids: Sequence[str], report: SweepReport) -> Op[dict[str, str]]:
    """Claim each thread in Redis (one round trip); returns the claimed ones with their
    tokens."""
    now_ms, deadline = int(time.time() * 1000), ctx.deadline_ms
    tokens = {thread_id: secrets.token_hex(16) for thread_id in thread_ids}
    fences = []
    for thread_id, token in tokens.items():
        keys = ctx.layout.thread(thread_id)
        fences.append(fence(keys, token, deadline, now_ms))
    got = yield from try_hot(ctx, HotBatch(tuple(fences)))
    if got is None:  # some may have been taken: they expire with the deadline
        raise _needs_redis()
    claimed = {t: tok for (t, tok), ok in zip(tokens.items(), got, strict=True) if int(ok)}
    report.threads_busy += len(tokens) - len(claimed)
    return claimed


def _release(ctx: Context, claimed: dict[str, str]) -> Op[None]:
    if claimed:
        releases = tuple(release(ctx.layout.thread(t), token) for t, token in claimed.items())
        yield from try_hot(ctx, HotBatch(releases))
    return None


def _guarded(ctx: Context, claimed: dict[str, str], op: Op[T]) -> Op[T]:
    """Run ``op`` under the claims; a failure releases them (nothing was deleted)."""
    try:
        return (yield from op)
    except Exception:
        yield from _release(ctx, claimed)
        raise


def _delete_idle(
    ctx: Context, retention: Retention, thread_ids: Sequence[str], report: SweepReport
) -> Op[None]:
    claimed = yield from _claim(ctx, thread_ids, report)
    if not claimed:
        return None
    delete = Statement(
        statements(ctx.config.schema).delete_idle,
        {
            "thread_ids": list(claimed),
            "max_idle": _secs(retention.max_idle),
            "keep_interrupted": retention.keep_interrupted,
            "keep_ledger": retention.keep_ledger,
        },
        fetch=True,
    )
    tombstone_sql = Statement(ctx.statements.tombstone_sql, {}, fetch=True)
    result = yield from _guarded(ctx, claimed, _commit(tombstone_sql, delete))
    tombstone = int(result[0][0]["version"])
    row = result[1][0]
    deleted = set(row["threads"] or ())
    report.threads_deleted += len(deleted)
    report.threads_busy += len(claimed) - len(deleted)
    report.checkpoints += row["checkpoints"]
    report.writes += row["writes"]
    report.blobs += row["blobs"]
    report.ledger += row["ledger"]
    report.bytes += int(row["bytes"])
    dropped = [(ctx.layout.thread(t), claimed.pop(t)) for t in deleted]
    yield from drop_many(ctx, dropped, tombstone)
    yield from _release(ctx, claimed)  # those written since the batch looked
    return None


def _commit(*statements: Statement) -> Op[list[Any]]:
    result: list[Any] = yield Cold(statements)
    return result


def _roots(retention: Retention) -> Any:
    """The checkpoints of a namespace a sweep keeps (besides what their delta channels
    need): its latest, and those that no set policy expires."""

    def roots(checkpoints: dict[str, dict[str, Any]]) -> list[str]:
        ids = sorted(checkpoints, reverse=True)
        kept = ids if retention.keep_last is None else ids[: retention.keep_last]
        if retention.max_age is not None:
            limit = seconds(retention.max_age)
            kept = [i for i in kept if checkpoints[i]["age"] < limit]
        return [ids[0], *kept]

    return roots


def _prune(
    ctx: Context, retention: Retention, thread_ids: Sequence[str], report: SweepReport
) -> Op[None]:
    claimed = yield from _claim(ctx, thread_ids, report)
    if not claimed:
        return None
    ids = list(claimed)
    rows = yield from _guarded(ctx, claimed, prune_scan(ctx, ids))
    results = yield from mutate_threads(
        ctx, ids, prune_statements(ctx, ids, rows, _roots(retention)), tokens=list(claimed.values())
    )
    gone, orphans = results[1][0], results[2][0]
    report.threads_pruned += len(ids)
    report.checkpoints += gone["checkpoints"]
    report.writes += gone["writes"]
    report.blobs += orphans["blobs"]
    report.bytes += int(gone["bytes"]) + int(orphans["bytes"])
    return None


def _plan_prunes(
    ctx: Context, retention: Retention, thread_ids: Sequence[str], report: SweepReport
) -> Op[None]:
    """Dry run: count the checkpoints a prune of the threads would delete."""
    rows = yield from prune_scan(ctx, thread_ids)
    keep = set(keep_set(rows, _roots(retention)))
    latest: dict[tuple[str, str], str] = {}
    for row in rows:
        space = (row["thread_id"], row["checkpoint_ns"])
        latest[space] = max(latest.get(space, ""), row["checkpoint_id"])
    doomed = [
        r
        for r in rows
        if (r["thread_id"], r["checkpoint_ns"], r["checkpoint_id"]) not in keep
        and r["checkpoint_id"] < latest[(r["thread_id"], r["checkpoint_ns"])]
    ]
    report.threads_pruned += len({r["thread_id"] for r in doomed})
    report.checkpoints += len(doomed)
    return None
