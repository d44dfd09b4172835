"""Reading and settling ledger records: one key, a thread's calls, counts per status,
an operator's verdict, and the heartbeat that extends running calls' leases."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, get_args

from langgraph_durable._core.context import Context
from langgraph_durable._core.ledger.model import LedgerRecord, Resolution, Status
from langgraph_durable._core.ledger.values import decode_result, encode_result
from langgraph_durable._core.requests import Cold, Op
from langgraph_durable._core.sql.ledger import statements
from langgraph_durable.errors import SerializationError, ToolCallError

logger = logging.getLogger("langgraph_durable")


@dataclass(frozen=True, slots=True)
class Seen:
    """A record as one statement returned it, with what the statement learned."""

    record: LedgerRecord
    claimed: bool
    lease_expired: bool
    has_result: bool


def from_row(ctx: Context, row: dict[str, Any]) -> Seen:
    frame = row["result"]
    result = (
        decode_result(ctx.serde, frame, row["key"], row["thread_id"]) if frame is not None else None
    )
    record = LedgerRecord(
        **{f.name: row[f.name] for f in dataclasses.fields(LedgerRecord) if f.name != "result"},
        result=result,
    )
    return Seen(record, bool(row.get("claimed")), bool(row["lease_expired"]), frame is not None)


def read(ctx: Context, key: str) -> Op[Seen | None]:
    rows = (yield Cold.one(statements(ctx.config.schema).get, {"key": key}, fetch=True))[0]
    return from_row(ctx, rows[0]) if rows else None


def resolve(
    ctx: Context,
    key: str,
    resolution: Resolution,
    *,
    attempts: int | None = None,
    tool: str | None = None,
) -> Op[LedgerRecord | None]:
    """Settle an uncertain call (or a started one whose lease ran out).

    ``"retry"`` records a retryable failure, so the next execution runs the tool again.
    Returns the settled record, or ``None`` if the call was not in a settleable state.

    Raises:
        SerializationError: the result cannot be serialized.
    """
    frame, error, etype, retryable = None, None, None, None
    if resolution.outcome == "succeeded":
        value = (
            resolution.result
            if resolution.has_result
            else (
                f"{tool or 'the tool'} completed: its outcome was confirmed after an "
                "interrupted attempt (the original result was not kept)"
            )
        )
        try:
            frame = encode_result(ctx.serde, value)
        except Exception as exc:
            raise SerializationError(
                f"cannot serialize the result given for {key}: {exc}", channel=f"ledger:{key}"
            ) from exc
    else:
        retryable = resolution.outcome == "retry"
        error = resolution.error or (
            "settled for retry" if retryable else "settled as failed after an interrupted attempt"
        )
        etype = f"{ToolCallError.__module__}:{ToolCallError.__qualname__}"
    rows = (
        yield Cold.one(
            statements(ctx.config.schema).resolve,
            {
                "key": key,
                "attempts": attempts,
                "status": "succeeded" if resolution.outcome == "succeeded" else "failed",
                "result": frame,
                "error": error,
                "error_type": etype,
                "retryable": retryable,
            },
            fetch=True,
        )
    )[0]
    if not rows:
        return None
    logger.info("tool call %s settled: %s", key, resolution.outcome)
    return from_row(ctx, rows[0]).record


def get(ctx: Context, key: str) -> Op[LedgerRecord | None]:
    """The record of one key."""
    seen = yield from read(ctx, key)
    return seen.record if seen else None


def list_thread(ctx: Context, thread_id: str) -> Op[list[LedgerRecord]]:
    """A thread's calls, oldest first."""
    rows = (
        yield Cold.one(statements(ctx.config.schema).list, {"thread_id": thread_id}, fetch=True)
    )[0]
    return [from_row(ctx, row).record for row in rows]


def list_unsettled(
    ctx: Context,
    *,
    tool: str | None,
    thread_id: str | None,
    older_than: float | None,
    limit: int | None,
) -> Op[list[LedgerRecord]]:
    """The calls `resolve` would settle (uncertain, or started under a lease that ran out)
    across threads, oldest first; each filter left ``None`` matches every call."""
    params = {"tool": tool, "thread_id": thread_id, "older_than": older_than, "limit": limit}
    rows = (yield Cold.one(statements(ctx.config.schema).list_unsettled, params, fetch=True))[0]
    return [from_row(ctx, row).record for row in rows]


def counts(ctx: Context, thread_id: str | None) -> Op[dict[str, int]]:
    """Calls per status (every status present, zeros included)."""
    rows = (
        yield Cold.one(statements(ctx.config.schema).count, {"thread_id": thread_id}, fetch=True)
    )[0]
    result = dict.fromkeys(get_args(Status), 0)
    result.update({row["status"]: row["n"] for row in rows})
    return result


def heartbeat(ctx: Context, owner: str, leases: Sequence[tuple[str, int, float]]) -> Op[set[str]]:
    """Extend the leases ``(key, attempt, seconds)`` of our running calls; returns the keys
    still ours."""
    rows = (
        yield Cold.one(
            statements(ctx.config.schema).heartbeat,
            {
                "owner": owner,
                "keys": [k for k, _, _ in leases],
                "attempts": [a for _, a, _ in leases],
                "leases": [s for _, _, s in leases],
            },
            fetch=True,
        )
    )[0]
    return {row["key"] for row in rows}
