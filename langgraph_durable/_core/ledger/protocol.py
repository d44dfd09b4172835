"""The tool-call ledger's protocol, written once as sans-I/O generators.

One call of a durable tool is the generator `call`. It yields the saver's requests (`Cold`:
one statement, committed before the next step; `Pause`) and the effects only the tool
wrapper can perform: `Verify`, `Ask` (a LangGraph ``interrupt()``) and `Invoke` (run the
tool). It returns the tool's result or raises. The engine's drivers answer the
storage requests and hand the effects to the tool wrapper (``langgraph_durable.tools``).

States of a key::

    (none) --claim--> started --outcome--> succeeded | failed(retryable or terminal)
    started --lease ran out / owner provably dead--> uncertain
    uncertain --verify / policy / human--> succeeded | failed | started (retry, same key)
    failed(retryable) --claim again--> started

Every transition is one conditional statement fenced by ``attempts`` (and the lease owner),
so two workers never both believe they own an attempt. A claim (first or again) stamps the
call's nonce (`CallSpec.nonce`) on the row: when its reply is lost and it runs again — the
driver's retry on a new connection, or ours — it finds the row it committed and knows it for
its own, so a call that never ran is not taken for an interrupted one.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

from redis.backoff import ExponentialBackoff

from langgraph_durable._core import journal
from langgraph_durable._core.context import Context
from langgraph_durable._core.keys import unb64
from langgraph_durable._core.ledger.model import (
    INTERRUPT_TYPE,
    Ask,
    CallOp,
    CallSpec,
    Invoke,
    LedgerRecord,
    OwnerGone,
    Raised,
    Resolution,
    Returned,
    Status,
    Verify,
)
from langgraph_durable._core.ledger.records import Seen, from_row, read, resolve
from langgraph_durable._core.ledger.values import (
    encode_result,
    error_type,
    parse_resolution,
    rebuild_error,
)
from langgraph_durable._core.requests import Cold, Op, Pause
from langgraph_durable._core.scripts import thread
from langgraph_durable._core.sql.ledger import statements
from langgraph_durable.config import seconds
from langgraph_durable.errors import (
    ConfigurationError,
    IdempotencyConflictError,
    SerializationError,
    TierUnavailableError,
    ToolCallError,
    ToolCallInProgressError,
    ToolOutcomeUncertainError,
)

logger = logging.getLogger("langgraph_durable")

_POLL = ExponentialBackoff(cap=0.5, base=0.025)  # waiting on a live lease

_DECIDING = ExponentialBackoff(cap=0.05, base=0.001)  # waiting on a put in flight (~1 ms)

_RETRY = ExponentialBackoff(cap=1.0, base=0.1)  # a claim or an outcome whose reply was lost

_CLAIM_TRIES = 2  # the tool has not run: give up sooner than when recording an outcome
_FINISH_TRIES = 4


def call(ctx: Context, spec: CallSpec) -> CallOp[Any]:
    """Run one durable tool call: claim, run, record — or replay, wait, or settle.

    Returns the tool's result (live or recorded). Raises the tool's error (live or
    recorded), `IdempotencyConflictError`, `ToolCallInProgressError`,
    `ToolOutcomeUncertainError`, or `TierUnavailableError` when Postgres is unreachable.
    """
    recorded = yield from _decision_durable(ctx, spec)  # a call settled for good, replayed
    seen = recorded if recorded is not None else (yield from _claim(ctx, spec))
    if seen.claimed:
        return (yield from _fresh(ctx, spec, seen.record))
    asker = spec.key  # what this caller is handled under in this process
    if seen.record.key != spec.key:  # the same call, its first run's checkpoints never stored
        logger.warning(
            "tool call %s (%s, thread %r) is call %s (%s) run again: that run's checkpoint "
            "%s never reached Postgres (durability 'exit', or lost), so this run came back "
            "to the call from checkpoint %s; it goes on as that call", spec.key, spec.tool,
            spec.thread_id, seen.record.key, seen.record.status,
            seen.record.checkpoint_id, spec.checkpoint_id)
        spec = replace(spec, key=seen.record.key)
    waited, polls = 0.0, 0
    while True:
        record = seen.record
        _check_same_call(spec, record)
        if record.status == "succeeded":
            return _replay(seen)
        if record.status == "failed":
            if not record.retryable:
                raise rebuild_error(record)
            taken = yield from _reclaim(ctx, spec, record)
            if taken is not None:
                return (yield from _execute(ctx, spec, taken))
        elif record.status == "started":
            dead = not seen.lease_expired and bool(
                (yield OwnerGone(record.lease_owner, record.key, asker))
            )
            if seen.lease_expired or dead:
                marked = yield from _mark_uncertain(ctx, record, force=dead)
                if marked is not None:
                    logger.warning(
                        "tool call %s (%s, thread %r) was interrupted mid-call (owner %s %s); "
                        "its outcome is uncertain",
                        record.key,
                        record.tool,
                        record.thread_id,
                        record.lease_owner,
                        "is gone" if dead else "let its lease run out",
                    )
                    seen = marked
                    continue
            else:
                if waited >= spec.policy.wait:
                    raise ToolCallInProgressError(
                        f"tool call {record.key} ({record.tool}) is running in "
                        f"{record.lease_owner} (lease until {record.lease_expires_at}); "
                        f"waited {waited:.1f}s",
                        key=record.key,
                    )
                delay = max(0.005, min(_POLL.compute(polls), spec.policy.wait - waited))
                polls, waited = polls + 1, waited + delay
                yield Pause(delay)
        else:
            settled = yield from _settle(ctx, spec, seen)
            if settled is not None:
                return settled[0]
        # A lost race or a wait: look again.
        again = yield from read(ctx, spec.key)
        if again is None:  # deleted meanwhile (its thread was deleted): start afresh
            seen = yield from _claim(ctx, spec)
            if seen.claimed:
                return (yield from _fresh(ctx, spec, seen.record))
        else:
            seen = again


def _decision_durable(ctx: Context, spec: CallSpec) -> Op[Seen | None]:
    """Hold the call until the checkpoint that decided it (the one holding the model's tool
    call, and every one before it) is in Postgres: a crash after the effect must resume
    from that decision, never ask the model again (a new answer, new tool-call ids, new
    keys). Write-through with LangGraph's ``durability="sync"``: committed before the step
    ran, nothing to do. ``"async"``: the put may still be in flight; wait for it.
    Write-behind: move the thread's journal to Postgres (again while the put is in flight).
    ``"exit"``: LangGraph writes no checkpoint before the run ends, so there is nothing to
    wait for: said once, loudly.

    Each look at Postgres reads the call's record too. A call recorded as settled for good
    (succeeded, or failed and not to be retried) was decided durably before it first ran:
    it is returned, to be replayed at once (a resumed run's replays wait for nothing).

    Raises:
        TierUnavailableError: Postgres (or, written behind, Redis) cannot be reached; the
            tool does not run.
        ToolCallError: the checkpoint did not reach Postgres within ``write_deadline``, or
            its put failed.
    """
    if spec.decided_by is None:
        return None
    if spec.durability == "exit":
        _warn_exit_durability(spec)
        return None
    behind = ctx.config.write_mode == "behind"
    if not behind and spec.durability != "async":
        return None
    deadline = seconds(ctx.config.write_deadline)
    deciding = dict(spec.ancestry) | {spec.checkpoint_ns: spec.decided_by}
    where = {"thread_id": spec.thread_id, "namespaces": list(deciding),
             "checkpoint_ids": list(deciding.values()), "key": spec.key}
    decision = statements(ctx.config.schema).decision
    # A put LangGraph did not wait for ("async") may still be on its way to Redis for as
    # long as one request may take; under "sync" it was acknowledged before the step ran.
    in_flight = seconds(ctx.config.tier_timeout) if spec.durability == "async" else 0.0
    # the bound is wall time: each look also drains the journal, which takes its own time
    started, polls, drained = time.monotonic(), 0, None
    while True:
        waited = time.monotonic() - started
        row = (yield Cold.one(decision, where, fetch=True))[0][0]
        if row["key"] is not None:
            seen = from_row(ctx, row)
            if seen.record.status == "succeeded" or (
                    seen.record.status == "failed" and not seen.record.retryable):
                return seen
        if row["decided"]:
            return None
        _on_its_way(spec, deciding)
        if drained is not None and drained - started >= in_flight and not (
                yield from _unflushed(ctx, spec.thread_id, deciding)):
            raise ToolCallError(
                f"tool call {spec.key} ({spec.tool}, thread {spec.thread_id!r}) did not run: "
                f"a checkpoint that decided it ({spec.decided_by!r} or an enclosing step's) "
                "is neither in Postgres nor in Redis's journal: Redis lost it before it was "
                "flushed (a restart, an emptied Redis), or Postgres rejected it (see "
                "`langgraph-durable dead-letters`). This run goes on from a step that is not "
                "stored; resume the thread from its last stored checkpoint",
                key=spec.key,
            )
        if waited >= deadline:
            raise ToolCallError(
                f"tool call {spec.key} ({spec.tool}, thread {spec.thread_id!r}) did not run: "
                f"checkpoint {spec.decided_by!r}, which decided it, did not reach Postgres "
                f"within {deadline:g}s (write_deadline)",
                key=spec.key,
            )
        if behind and polls == 0:  # moved at once; then polled while its put is in flight
            drained = time.monotonic()
            yield from journal.flush(ctx, timeout=None, thread_ids=[spec.thread_id])
            polls = 1
            continue
        delay = max(0.001, min(_DECIDING.compute(polls), deadline - waited))
        polls += 1
        yield Pause(delay)
        if behind:
            drained = time.monotonic()
            yield from journal.flush(ctx, timeout=None, thread_ids=[spec.thread_id])


def _on_its_way(spec: CallSpec, deciding: dict[str, str]) -> None:
    """Raise `ToolCallError` if a put of the call's run failed in the namespace of one of
    the ``deciding`` checkpoints (`Marks.unstored`): that checkpoint is not on its way."""
    unstored = spec.run.unstored(spec.thread_id, deciding) if spec.run else None
    if unstored is not None:
        raise ToolCallError(
            f"tool call {spec.key} ({spec.tool}, thread {spec.thread_id!r}) did not run: "
            f"checkpoint {spec.decided_by!r}, which decided it, will not reach Postgres: "
            f"the run's put of checkpoint {unstored[0]!r} failed ({unstored[1]}), and "
            "LangGraph puts none of the run's later checkpoints. Resume the thread from "
            "its last stored checkpoint",
            key=spec.key,
        )


def _unflushed(ctx: Context, thread_id: str, deciding: dict[str, str]) -> Op[bool]:
    """Whether Redis's journal may still hold one of the ``deciding`` checkpoints (by
    namespace) of the thread: it lists one among the thread's entries not yet flushed, or
    cannot tell (an entry whose checkpoint has no hot copy)."""
    complete, records = thread.unflushed_records(
        (yield thread.list_unflushed(ctx.layout.thread(thread_id))))
    held = {(unb64(ns), record.checkpoint_id) for ns, record in records}
    return not complete or any(pair in held for pair in deciding.items())


_warned_exit = False


def _warn_exit_durability(spec: CallSpec) -> None:
    global _warned_exit
    if not _warned_exit:
        _warned_exit = True
        logger.warning(
            "durable tool %s runs under LangGraph durability='exit': the checkpoint that "
            "decided the call is written only when the run ends, so a crash during the run "
            "asks the model again and the call may come back under a new tool-call id. Use "
            "durability='sync' or 'async' for tools with side effects (docs/tool-ledger.md)",
            spec.tool,
        )


def _claim(ctx: Context, spec: CallSpec) -> Op[Seen]:
    window = spec.policy.duplicate_window if spec.call_ref is not None else None
    params = {
        "key": spec.key,
        "thread_id": spec.thread_id,
        "checkpoint_ns": spec.checkpoint_ns,
        "call_ref": spec.call_ref,
        "tool_call_id": spec.tool_call_id,
        "task_id": spec.task_id,
        "tool": spec.tool,
        "fingerprint": spec.fingerprint,
        "owner": spec.owner,
        "lease": spec.policy.lease,
        "dup_window": window,
        "nonce": spec.nonce,
        "step": spec.step,
        "checkpoint_id": spec.checkpoint_id,
    }
    request = Cold.one(statements(ctx.config.schema).claim, params, fetch=True)
    while True:  # no row: a concurrent claim committed after our snapshot; it is visible now
        rows = yield from _again_if_lost(request, _CLAIM_TRIES)
        if rows:
            return from_row(ctx, rows[0])


def _again_if_lost(request: Cold, tries: int) -> Op[list[Any]]:
    """Run one fenced statement, again with the same parameters while Postgres cannot be
    reached (up to ``tries`` times): a lost reply may hide a commit, which the statement's
    fence and the call's nonce make harmless to repeat.

    Raises:
        TierUnavailableError: the last try failed too.
    """
    failures = 0
    while True:
        try:
            rows: list[Any] = (yield request)[0]
            return rows
        except TierUnavailableError:
            if failures + 1 >= tries:
                raise
        yield Pause(_RETRY.compute(failures))
        failures += 1


def _check_same_call(spec: CallSpec, record: LedgerRecord) -> None:
    if record.tool != spec.tool or record.args_fingerprint != spec.fingerprint:
        what = "tool" if record.tool != spec.tool else "arguments"
        raise IdempotencyConflictError(
            f"idempotency key {spec.key} was used by {record.tool!r} with other {what} "
            f"(recorded fingerprint {record.args_fingerprint[:12]}, this call "
            f"{spec.tool!r} {spec.fingerprint[:12]}); refusing to replay or re-run",
            key=spec.key,
        )


def _replay(seen: Seen) -> Any:
    record = seen.record
    if not seen.has_result:
        raise SerializationError(
            f"tool call {record.key} ({record.tool}) succeeded but its result could not be "
            f"stored ({record.error}); it will not run again",
            thread_id=record.thread_id,
            channel=f"ledger:{record.key}",
        )
    logger.debug("tool call %s (%s) replayed from the ledger", record.key, record.tool)
    return record.result


def _fresh(ctx: Context, spec: CallSpec, record: LedgerRecord) -> CallOp[Any]:
    """A call we just claimed; first, the probable-duplicate check."""
    if record.duplicate_of is not None:
        note = (
            f"tool call {record.key} ({record.tool}, thread {record.thread_id!r}) has the "
            f"same arguments as {record.duplicate_of}, which succeeded moments ago: "
            "probably the model re-ran after a lost step"
        )
        mode = spec.policy.on_duplicate
        if mode == "replay":
            rows = (
                yield Cold.one(
                    statements(ctx.config.schema).replay_duplicate,
                    {
                        "key": spec.key,
                        "owner": spec.owner,
                        "duplicate_of": record.duplicate_of,
                    },
                    fetch=True,
                )
            )[0]
            if rows:
                logger.warning("%s; replaying its result", note)
                return _replay(from_row(ctx, rows[0]))
        elif mode == "raise":
            error = IdempotencyConflictError(note, key=spec.key)
            yield from _finish(
                ctx,
                spec,
                record.attempts,
                status="failed",
                error=str(error),
                error_type=error_type(error),
                retryable=False,
            )
            raise error
        logger.warning("%s; running it (on_duplicate=%r)", note, mode)
    return (yield from _execute(ctx, spec, record))


def _execute(ctx: Context, spec: CallSpec, record: LedgerRecord) -> CallOp[Any]:
    outcome = yield Invoke(spec.key, record.attempts, spec.policy.lease, record.idempotency_key)
    yield from record_outcome(ctx, spec, record.attempts, outcome)
    if isinstance(outcome, Returned):
        return outcome.value
    raise outcome.error


def record_outcome(
    ctx: Context, spec: CallSpec, attempts: int, outcome: Returned | Raised
) -> Op[None]:
    """Record what attempt ``attempts`` of a call came to: succeeded with its result, or
    failed (a pause is a retryable failure); a cancellation records nothing. Run by the
    call itself, or, when the caller stopped waiting on work that went on in a thread, by
    that thread once the work ended (``langgraph_durable.tools``)."""
    if isinstance(outcome, Returned):
        frame, note = None, None
        try:
            frame = encode_result(ctx.serde, outcome.value)
        except Exception as exc:  # the effect happened: record that, without the value
            note = f"result not stored: {type(exc).__name__}: {exc}"
            logger.error("tool call %s (%s): %s", spec.key, spec.tool, note)
        yield from _finish(ctx, spec, attempts, status="succeeded", result=frame, error=note)
        return
    error = outcome.error
    if outcome.kind == "paused":
        yield from _finish(
            ctx,
            spec,
            attempts,
            status="failed",
            retryable=True,
            error=f"paused by {type(error).__name__}; runs again on resume",
            error_type=error_type(error),
        )
    elif outcome.kind == "error":
        yield from _finish(
            ctx,
            spec,
            attempts,
            status="failed",
            retryable=outcome.retryable,
            error=str(error) or repr(error),
            error_type=error_type(error),
        )


def _finish(
    ctx: Context,
    spec: CallSpec,
    attempts: int,
    *,
    status: Status,
    result: bytes | None = None,
    error: str | None = None,
    error_type: str | None = None,
    retryable: bool | None = None,
) -> Op[bool]:
    """Record our attempt's outcome, again after a lost connection (a few times)."""
    request = Cold.one(
        statements(ctx.config.schema).finish,
        {
            "key": spec.key,
            "attempts": attempts,
            "owner": spec.owner,
            "status": status,
            "result": result,
            "error": error,
            "error_type": error_type,
            "retryable": retryable,
        },
        fetch=True,
    )
    try:
        rows = yield from _again_if_lost(request, _FINISH_TRIES)
    except TierUnavailableError:
        logger.error(
            "tool call %s (%s): could not record %s; its lease will run out "
            "and the call become uncertain",
            spec.key,
            spec.tool,
            status,
        )
        raise
    if not rows:
        logger.warning(
            "tool call %s (%s): attempt %d lost its lease to another worker; "
            "its outcome (%s) was not recorded",
            spec.key,
            spec.tool,
            attempts,
            status,
        )
    return bool(rows)


def _reclaim(ctx: Context, spec: CallSpec, record: LedgerRecord) -> Op[LedgerRecord | None]:
    request = Cold.one(
        statements(ctx.config.schema).reclaim,
        {
            "key": spec.key,
            "from_status": record.status,
            "attempts": record.attempts,
            "owner": spec.owner,
            "lease": spec.policy.lease,
            "nonce": spec.nonce,
        },
        fetch=True,
    )
    rows = yield from _again_if_lost(request, _CLAIM_TRIES)
    if not rows:
        return None
    logger.info(
        "tool call %s (%s): attempt %d (was %s)",
        spec.key,
        spec.tool,
        record.attempts + 1,
        record.status,
    )
    return from_row(ctx, rows[0]).record


def _mark_uncertain(ctx: Context, record: LedgerRecord, *, force: bool) -> Op[Seen | None]:
    rows = (
        yield Cold.one(
            statements(ctx.config.schema).mark_uncertain,
            {
                "key": record.key,
                "attempts": record.attempts,
                "lease_owner": record.lease_owner,
                "force": force,
            },
            fetch=True,
        )
    )[0]
    return from_row(ctx, rows[0]) if rows else None


def _settle(ctx: Context, spec: CallSpec, seen: Seen) -> CallOp[tuple[Any] | None]:
    """Apply verify, then the tool's policy, to an uncertain call. ``None``: lost a race."""
    record = seen.record
    resolution = None
    if spec.policy.verify:
        resolution = parse_resolution(
            (yield Verify(record.idempotency_key, spec.args)), key=spec.key, source="verify"
        )
    if resolution is None:
        if spec.policy.on_uncertain == "raise":
            raise ToolOutcomeUncertainError(
                f"tool call {spec.key} ({spec.tool}, thread {spec.thread_id!r}) was interrupted "
                f"mid-call by a crash (attempt {record.attempts}, owner {record.lease_owner}); "
                "whether its effect happened is unknown. Settle it with `langgraph-durable "
                f"resolve {spec.key} succeeded|failed|retry` (or saver.ledger.resolve) or give "
                "the tool verify= / idempotent=True / on_uncertain='interrupt'",
                key=spec.key,
            )
        if spec.policy.on_uncertain == "retry":
            resolution = Resolution("retry")
        else:
            answer = yield Ask(interrupt_payload(spec, record))
            resolution = parse_resolution(answer, key=spec.key, source="the interrupt's resume")
            if resolution is None:
                raise ConfigurationError(
                    f"resume value for tool call {spec.key} is None; "
                    "answer 'succeeded', 'failed' or 'retry'"
                )
    if resolution.outcome == "retry":
        taken = yield from _reclaim(ctx, spec, record)
        return None if taken is None else ((yield from _execute(ctx, spec, taken)),)
    settled = yield from resolve(
        ctx, spec.key, resolution, attempts=record.attempts, tool=spec.tool
    )
    if settled is None:
        return None
    if settled.status == "succeeded":
        return (settled.result,)
    raise rebuild_error(settled)


def interrupt_payload(spec: CallSpec, record: LedgerRecord) -> dict[str, Any]:
    """What ``on_uncertain="interrupt"`` shows a human (see docs/tool-ledger.md)."""
    return {
        "type": INTERRUPT_TYPE,
        "question": f"Tool {spec.tool!r} was interrupted mid-call by a crash. "
        "Did its effect happen?",
        "answers": {
            "succeeded": "it happened: record it and do not run it again "
            "(optionally {'outcome': 'succeeded', 'result': ...})",
            "failed": "it failed: record the failure and raise it "
            "(optionally {'outcome': 'failed', 'error': '...'})",
            "retry": "it did not happen: run it again with the same idempotency key",
        },
        "key": spec.key,
        "tool": spec.tool,
        "args": spec.args,
        "thread_id": spec.thread_id,
        "tool_call_id": spec.tool_call_id,
        "attempts": record.attempts,
        "lease_owner": record.lease_owner,
        "started_at": record.started_at.isoformat(),
    }
