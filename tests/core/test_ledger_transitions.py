"""Every state transition of the tool-call ledger, driven without a server.

    (none) --claim--> started --outcome--> succeeded | failed(retryable or terminal)
    started --lease ran out / owner provably dead--> uncertain
    uncertain --verify / policy / human--> succeeded | failed | started (retry, same key)
    failed(retryable) --claim again--> started
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest

from langgraph_durable._core import ledger
from langgraph_durable._core.context import Context
from langgraph_durable._core.ledger.values import decode_result, encode_result
from langgraph_durable._core.sql.ledger import statements
from langgraph_durable.errors import (
    IdempotencyConflictError,
    TierUnavailableError,
    ToolCallError,
    ToolCallInProgressError,
    ToolOutcomeUncertainError,
)
from tests.core.script import Script, cold, cold_down, effect, pause

KEY = "lgd-key"
ME = "host~1:100:me"
OTHER = "host~1:200:other"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _policy(**overrides: Any) -> ledger.Policy:
    base = ledger.Policy(lease=30.0, wait=30.0, on_uncertain="raise", verify=False,
                         on_duplicate="warn", duplicate_window=None)
    return dataclasses.replace(base, **overrides)


def _spec(**policy: Any) -> ledger.CallSpec:
    return ledger.CallSpec(key=KEY, thread_id="t1", checkpoint_ns="", call_ref="call-1",
                           tool_call_id="call-1", task_id="task", tool="charge",
                           args={"cents": 5}, fingerprint="fp", owner=ME,
                           policy=_policy(**policy))


def _row(ctx: Context, status: str, *, attempts: int = 1, claimed: bool = False,
         expired: bool = False, owner: str | None = OTHER, result: Any = None,
         error: str | None = None, error_type: str | None = None,
         retryable: bool | None = None, **fields: Any) -> dict[str, Any]:
    """A ledger row as the statements return it (RETURNING the record, claimed, expired)."""
    return {
        "key": KEY, "thread_id": "t1", "checkpoint_ns": "", "tool_call_id": "call-1",
        "task_id": "task", "tool": "charge", "args_fingerprint": "fp", "status": status,
        "attempts": attempts, "error": error, "error_type": error_type, "retryable": retryable,
        "lease_owner": owner, "lease_expires_at": None, "duplicate_of": None,
        "started_at": NOW, "finished_at": None, "idempotency_key": KEY, "retired_at": None,
        "checkpoint_id": None,
        "claimed": claimed, "lease_expired": expired,
        "result": None if result is None else encode_result(ctx.serde, result), **fields,
    }


def _sql(ctx: Context) -> Any:
    return statements(ctx.config.schema)


def _finish_params(ctx: Context, request: Any) -> dict[str, Any]:
    (statement,) = request.statements
    assert statement.query == _sql(ctx).finish
    return dict(statement.params)


def test_a_new_call_is_claimed_run_and_recorded_succeeded(ctx: Context) -> None:
    """(none) → started → succeeded: claim, Invoke under the lease, record the result."""
    sql = _sql(ctx)
    script = Script([
        (cold(sql.claim), [[_row(ctx, "started", claimed=True, owner=ME)]]),
        (effect(ledger.Invoke, key=KEY, attempt=1, lease=30.0), ledger.Returned("charged")),
        (cold(sql.finish), [[{"key": KEY}]]),
    ])
    assert script.run(ledger.call(ctx, _spec())) == "charged"
    assert script.done
    assert script.requests[0].statements[0].params["owner"] == ME
    finish = _finish_params(ctx, script.requests[2])
    assert (finish["status"], finish["attempts"], finish["owner"]) == ("succeeded", 1, ME)
    assert decode_result(ctx.serde, finish["result"], KEY, "t1") == "charged"


@pytest.mark.parametrize("retryable", [True, False])
def test_a_failing_call_is_recorded_failed_and_its_error_raised(
        ctx: Context, retryable: bool) -> None:
    """started → failed: the tool's error is recorded (retryable or terminal) and raised."""
    sql = _sql(ctx)
    error = ValueError("card declined")
    script = Script([
        (cold(sql.claim), [[_row(ctx, "started", claimed=True, owner=ME)]]),
        (effect(ledger.Invoke), ledger.Raised(error, "error", retryable=retryable)),
        (cold(sql.finish), [[{"key": KEY}]]),
    ])
    with pytest.raises(ValueError, match="card declined"):
        script.run(ledger.call(ctx, _spec()))
    finish = _finish_params(ctx, script.requests[2])
    assert (finish["status"], finish["retryable"]) == ("failed", retryable)
    assert finish["error_type"] == "builtins:ValueError"


def test_a_paused_call_is_recorded_retryable_and_a_cancelled_one_not_at_all(
        ctx: Context) -> None:
    """A graph interrupt inside the tool is a retryable failure (it runs again on resume);
    a cancellation is no outcome: nothing is written, the lease runs out."""
    sql = _sql(ctx)
    paused = Script([
        (cold(sql.claim), [[_row(ctx, "started", claimed=True, owner=ME)]]),
        (effect(ledger.Invoke), ledger.Raised(RuntimeError("interrupt"), "paused")),
        (cold(sql.finish), [[{"key": KEY}]]),
    ])
    with pytest.raises(RuntimeError):
        paused.run(ledger.call(ctx, _spec()))
    finish = _finish_params(ctx, paused.requests[2])
    assert (finish["status"], finish["retryable"]) == ("failed", True)
    assert finish["error"].startswith("paused by RuntimeError")

    cancelled = Script([
        (cold(sql.claim), [[_row(ctx, "started", claimed=True, owner=ME)]]),
        (effect(ledger.Invoke), ledger.Raised(KeyboardInterrupt(), "cancelled")),
    ])
    with pytest.raises(KeyboardInterrupt):
        cancelled.run(ledger.call(ctx, _spec()))
    assert cancelled.done


def test_recording_an_outcome_retries_a_lost_connection(ctx: Context) -> None:
    """Postgres drops while the outcome is recorded: wait, record again, return the result."""
    sql = _sql(ctx)
    script = Script([
        (cold(sql.claim), [[_row(ctx, "started", claimed=True, owner=ME)]]),
        (effect(ledger.Invoke), ledger.Returned(7)),
        (cold(sql.finish), cold_down()),
        (pause(), None),
        (cold(sql.finish), [[{"key": KEY}]]),
    ])
    assert script.run(ledger.call(ctx, _spec())) == 7
    assert script.done


def test_a_succeeded_call_is_replayed_without_running(ctx: Context) -> None:
    """succeeded: the recorded result comes back; no Invoke."""
    script = Script([(cold(_sql(ctx).claim), [[_row(ctx, "succeeded", result={"id": 9})]])])
    assert script.run(ledger.call(ctx, _spec())) == {"id": 9}
    assert script.done


def test_a_terminal_failure_is_raised_again_without_running(ctx: Context) -> None:
    """failed (not retryable): the recorded error is rebuilt and raised; no Invoke."""
    row = _row(ctx, "failed", error="card declined", error_type="builtins:ValueError",
               retryable=False)
    script = Script([(cold(_sql(ctx).claim), [[row]])])
    with pytest.raises(ValueError, match="card declined"):
        script.run(ledger.call(ctx, _spec()))
    assert script.done


def test_a_retryable_failure_is_claimed_again_and_run(ctx: Context) -> None:
    """failed (retryable) → started: reclaim with the attempt count as fence, run attempt 2."""
    sql = _sql(ctx)
    script = Script([
        (cold(sql.claim), [[_row(ctx, "failed", retryable=True, error="timeout")]]),
        (cold(sql.reclaim), [[_row(ctx, "started", attempts=2, owner=ME)]]),
        (effect(ledger.Invoke, attempt=2), ledger.Returned("ok")),
        (cold(sql.finish), [[{"key": KEY}]]),
    ])
    assert script.run(ledger.call(ctx, _spec())) == "ok"
    reclaim = dict(script.requests[1].statements[0].params)
    assert (reclaim["from_status"], reclaim["attempts"], reclaim["owner"]) == ("failed", 1, ME)


def test_a_live_call_elsewhere_is_waited_for_then_replayed(ctx: Context) -> None:
    """started with a live lease and a live owner: wait, look again, replay its result."""
    sql = _sql(ctx)
    script = Script([
        (cold(sql.claim), [[_row(ctx, "started")]]),
        (effect(ledger.OwnerGone, owner=OTHER, key=KEY), False),
        (pause(), None),
        (cold(sql.get), [[_row(ctx, "succeeded", result="theirs")]]),
    ])
    assert script.run(ledger.call(ctx, _spec())) == "theirs"
    assert script.done


def test_a_live_call_elsewhere_raises_in_progress_once_the_wait_is_over(ctx: Context) -> None:
    """started, live, and no time left to wait: `ToolCallInProgressError`."""
    script = Script([
        (cold(_sql(ctx).claim), [[_row(ctx, "started")]]),
        (effect(ledger.OwnerGone), False),
    ])
    with pytest.raises(ToolCallInProgressError):
        script.run(ledger.call(ctx, _spec(wait=0.0)))
    assert script.done


def test_an_expired_lease_makes_the_call_uncertain_and_raise_by_default(ctx: Context) -> None:
    """started, lease ran out → uncertain (fenced by attempts and owner); with
    on_uncertain="raise" and no verify: `ToolOutcomeUncertainError`."""
    sql = _sql(ctx)
    script = Script([
        (cold(sql.claim), [[_row(ctx, "started", expired=True)]]),
        (cold(sql.mark_uncertain), [[_row(ctx, "uncertain")]]),
    ])
    with pytest.raises(ToolOutcomeUncertainError):
        script.run(ledger.call(ctx, _spec()))
    assert dict(script.requests[1].statements[0].params) == {
        "key": KEY, "attempts": 1, "lease_owner": OTHER, "force": False}


def test_a_dead_owner_makes_the_call_uncertain_and_retry_runs_it_again(ctx: Context) -> None:
    """started with a live lease whose owner process is gone → uncertain at once (forced);
    on_uncertain="retry" → started again (attempt 2) with the same key."""
    sql = _sql(ctx)
    script = Script([
        (cold(sql.claim), [[_row(ctx, "started")]]),
        (effect(ledger.OwnerGone, owner=OTHER), True),
        (cold(sql.mark_uncertain), [[_row(ctx, "uncertain")]]),
        (cold(sql.reclaim), [[_row(ctx, "started", attempts=2, owner=ME)]]),
        (effect(ledger.Invoke, attempt=2), ledger.Returned("again")),
        (cold(sql.finish), [[{"key": KEY}]]),
    ])
    assert script.run(ledger.call(ctx, _spec(on_uncertain="retry"))) == "again"
    assert script.requests[2].statements[0].params["force"] is True
    assert script.requests[3].statements[0].params["from_status"] == "uncertain"


def test_verify_settles_an_uncertain_call_as_succeeded(ctx: Context) -> None:
    """uncertain → succeeded: verify answers ("succeeded", result); the verdict is recorded
    and its result returned without running the tool."""
    sql = _sql(ctx)
    script = Script([
        (cold(sql.claim), [[_row(ctx, "uncertain")]]),
        (effect(ledger.Verify, key=KEY, args={"cents": 5}), ("succeeded", "found it")),
        (cold(sql.resolve), [[_row(ctx, "succeeded", result="found it")]]),
    ])
    assert script.run(ledger.call(ctx, _spec(verify=True))) == "found it"
    resolve = dict(script.requests[2].statements[0].params)
    assert (resolve["status"], resolve["attempts"]) == ("succeeded", 1)
    assert decode_result(ctx.serde, resolve["result"], KEY, "t1") == "found it"


def test_a_human_settles_an_uncertain_call_as_failed(ctx: Context) -> None:
    """uncertain → failed: on_uncertain="interrupt" asks a human; "failed" is recorded as a
    terminal failure and raised."""
    sql = _sql(ctx)
    failed = _row(ctx, "failed", error="bank says no", retryable=False,
                  error_type="langgraph_durable.errors:ToolCallError")
    script = Script([
        (cold(sql.claim), [[_row(ctx, "uncertain")]]),
        (effect(ledger.Ask), ("failed", "bank says no")),
        (cold(sql.resolve), [[failed]]),
    ])
    with pytest.raises(ToolCallError, match="bank says no"):
        script.run(ledger.call(ctx, _spec(on_uncertain="interrupt")))
    ask = script.requests[1]
    assert ask.payload["type"] == ledger.INTERRUPT_TYPE and ask.payload["key"] == KEY
    assert dict(script.requests[2].statements[0].params)["retryable"] is False


def test_the_same_key_with_other_arguments_is_a_conflict(ctx: Context) -> None:
    """A key recorded with another fingerprint is neither replayed nor run again."""
    script = Script([(cold(_sql(ctx).claim), [[_row(ctx, "succeeded", args_fingerprint="x")]])])
    with pytest.raises(IdempotencyConflictError):
        script.run(ledger.call(ctx, _spec()))


def test_an_operator_resolves_retry_as_a_retryable_failure(ctx: Context) -> None:
    """Ledger.resolve(key, "retry"): recorded as a retryable failure, so the next execution
    claims it again; a call that is not settleable returns None."""
    script = Script([(cold(_sql(ctx).resolve),
                      [[_row(ctx, "failed", retryable=True, error="settled for retry")]])])
    record = script.run(ledger.resolve(ctx, KEY, ledger.Resolution("retry")))
    assert (record.status, record.retryable) == ("failed", True)
    params = dict(script.requests[0].statements[0].params)
    assert (params["status"], params["retryable"], params["attempts"]) == ("failed", True, None)
    nothing = Script([(cold(_sql(ctx).resolve), [[]])])
    assert nothing.run(ledger.resolve(ctx, KEY, ledger.Resolution("retry"))) is None


def test_a_probable_duplicate_replays_the_earlier_result_when_told_to(ctx: Context) -> None:
    """A fresh claim flagged as a duplicate of a recent success, with on_duplicate="replay":
    the earlier call's result is copied into this key (0 attempts) and returned unrun."""
    sql = _sql(ctx)
    claimed = _row(ctx, "started", claimed=True, owner=ME, duplicate_of="lgd-earlier")
    script = Script([
        (cold(sql.claim), [[claimed]]),
        (cold(sql.replay_duplicate), [[_row(ctx, "succeeded", attempts=0, result="earlier")]]),
    ])
    assert script.run(ledger.call(ctx, _spec(on_duplicate="replay"))) == "earlier"
    assert dict(script.requests[1].statements[0].params) == {
        "key": KEY, "owner": ME, "duplicate_of": "lgd-earlier"}


def test_a_claim_whose_reply_was_lost_runs_again_with_its_nonce_and_the_tool_once(
        ctx: Context) -> None:
    """The claim committed but its reply was lost: the claim runs again with the same nonce,
    Postgres answers with the row it committed (ours: ``claimed``), and the tool runs once."""
    sql = _sql(ctx)
    script = Script([
        (cold(sql.claim), cold_down()),
        (pause(), None),
        (cold(sql.claim), [[_row(ctx, "started", claimed=True, owner=ME)]]),
        (effect(ledger.Invoke, key=KEY, attempt=1), ledger.Returned("charged")),
        (cold(sql.finish), [[{"key": KEY}]]),
    ])
    spec = _spec()
    assert script.run(ledger.call(ctx, spec)) == "charged"
    first, again = (script.requests[i].statements[0].params for i in (0, 2))
    assert first["nonce"] == again["nonce"] == spec.nonce
    assert len(spec.nonce) == 32 and spec.nonce != _spec().nonce


def test_a_claim_that_stays_unreachable_raises_and_runs_nothing(ctx: Context) -> None:
    """Postgres stays unreachable: the claim is tried twice, then `TierUnavailableError`;
    the tool does not run."""
    sql = _sql(ctx)
    script = Script([(cold(sql.claim), cold_down()), (pause(), None),
                     (cold(sql.claim), cold_down())])
    with pytest.raises(TierUnavailableError):
        script.run(ledger.call(ctx, _spec()))
    assert script.done


def test_a_claim_again_whose_reply_was_lost_runs_the_next_attempt_once(ctx: Context) -> None:
    """failed (retryable) → started, the reply lost: the reclaim runs again with the call's
    nonce and gets back the attempt it committed (2), which runs once."""
    sql = _sql(ctx)
    script = Script([
        (cold(sql.claim), [[_row(ctx, "failed", retryable=True, error="timeout")]]),
        (cold(sql.reclaim), cold_down()),
        (pause(), None),
        (cold(sql.reclaim), [[_row(ctx, "started", attempts=2, owner=ME)]]),
        (effect(ledger.Invoke, attempt=2), ledger.Returned("ok")),
        (cold(sql.finish), [[{"key": KEY}]]),
    ])
    spec = _spec()
    assert script.run(ledger.call(ctx, spec)) == "ok"
    nonces = {script.requests[i].statements[0].params["nonce"] for i in (0, 1, 3)}
    assert nonces == {spec.nonce}


def test_a_call_copied_into_a_fork_presents_the_originals_key_downstream(ctx: Context) -> None:
    """A row copied into a fork (its ``idempotency_key`` is the original call's) is
    verified, and run again, with the key the downstream API saw, while its own key fences
    the ledger's statements and the lease."""
    sql = _sql(ctx)
    copied = _row(ctx, "uncertain", idempotency_key="lgd-original")
    script = Script([
        (cold(sql.claim), [[copied]]),
        (effect(ledger.Verify, key="lgd-original"), None),
        (cold(sql.reclaim), [[_row(ctx, "started", attempts=2, owner=ctx.consumer,
                                   idempotency_key="lgd-original")]]),
        (effect(ledger.Invoke, key=KEY, idempotency_key="lgd-original"),
         ledger.Returned("charged")),
        (cold(sql.finish), [[{"key": KEY}]]),
    ])
    assert script.run(ledger.call(ctx, _spec(verify=True, on_uncertain="retry"))) == "charged"
    assert dict(script.requests[2].statements[0].params)["key"] == KEY
