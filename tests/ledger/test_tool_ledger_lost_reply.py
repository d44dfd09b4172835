"""A ledger claim that Postgres committed but whose reply never arrived: the call knows the
row for its own (its claim nonce) and runs the tool once, instead of reporting a call that
never ran as uncertain. With the simulation's lost-reply fault, and with a real connection
that dies after the server answered."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from langgraph_durable import DurableSaver, ToolOutcomeUncertainError, durable_tool
from langgraph_durable._core import ledger
from langgraph_durable._core.ledger.keys import derive_key
from langgraph_durable._core.requests import Cold
from langgraph_durable._core.sql.ledger import statements
from tests.support.faults import Proxy, lose_reply
from tests.support.servers import POSTGRES_DATABASE, REDIS_URL, postgres_address


def _spec(saver: DurableSaver, thread: str, **policy: Any) -> ledger.CallSpec:
    options = {"lease": 30.0, "wait": 30.0, "on_uncertain": "raise", "verify": False,
               "on_duplicate": "warn", "duplicate_window": None, **policy}
    return ledger.CallSpec(
        key=derive_key(thread, "", "call-1"), thread_id=thread, checkpoint_ns="",
        call_ref="call-1", tool_call_id="call-1", task_id=None, tool="charge",
        args={"cents": 5}, fingerprint="fp", owner=saver.engine.owner,
        policy=ledger.Policy(**options))


def _is(saver: DurableSaver, name: str) -> Any:
    """Whether a request runs the ledger statement ``name`` (``"claim"``, ``"reclaim"``)."""
    query = getattr(statements(saver.config.schema), name)
    return lambda request: isinstance(request, Cold) and request.statements[0].query == query


def test_a_committed_claim_whose_reply_was_lost_runs_the_tool_once(saver: DurableSaver) -> None:
    """The claim commits in Postgres, its reply is lost (the simulation's fault): the claim
    runs again with the call's nonce, finds its own row, and the tool runs exactly once;
    the record is ``succeeded`` after one attempt, not ``uncertain``."""
    thread, runs = uuid.uuid4().hex, []
    spec = _spec(saver, thread)

    def effects(request: Any) -> Any:
        assert isinstance(request, ledger.Invoke)
        runs.append(request.attempt)
        return ledger.Returned("charged")

    with saver.engine.handling(spec.key):
        result = saver.engine.run(lose_reply(ledger.call(saver.engine.context, spec),
                                             _is(saver, "claim")), effects)
    assert result == "charged" and runs == [1]
    record = saver.ledger.get(spec.key)
    assert record is not None
    assert (record.status, record.attempts, record.result) == ("succeeded", 1, "charged")


def test_a_claim_again_whose_reply_was_lost_runs_the_next_attempt_once(
        saver: DurableSaver) -> None:
    """A retryable failure is claimed again (attempt 2); that commits but its reply is
    lost: the claim runs again, finds attempt 2 under its nonce, and runs it once."""
    thread, runs = uuid.uuid4().hex, []

    def effects(request: Any) -> Any:
        assert isinstance(request, ledger.Invoke)
        runs.append(request.attempt)
        if request.attempt == 1:
            return ledger.Raised(ConnectionError("flaky"), "error", retryable=True)
        return ledger.Returned("charged")

    with pytest.raises(ConnectionError):
        saver.engine.run(ledger.call(saver.engine.context, _spec(saver, thread)), effects)
    spec = _spec(saver, thread)
    with saver.engine.handling(spec.key):
        result = saver.engine.run(lose_reply(ledger.call(saver.engine.context, spec),
                                             _is(saver, "reclaim")), effects)
    assert result == "charged" and runs == [1, 2]
    record = saver.ledger.get(spec.key)
    assert record is not None and (record.status, record.attempts) == ("succeeded", 2)


def test_a_started_row_of_another_call_of_this_process_is_still_uncertain(
        saver: DurableSaver) -> None:
    """A ``started`` row this process left without running it to the end (another call, so
    another nonce) is not taken for a new call's own claim: it is uncertain, as before."""
    thread = uuid.uuid4().hex
    first = _spec(saver, thread)

    def cancelled(request: Any) -> Any:
        return ledger.Raised(asyncio.CancelledError(), "cancelled")  # no outcome is written

    with pytest.raises(asyncio.CancelledError):
        saver.engine.run(ledger.call(saver.engine.context, first), cancelled)
    later = _spec(saver, thread)
    assert later.nonce != first.nonce
    with pytest.raises(ToolOutcomeUncertainError):
        saver.engine.run(ledger.call(saver.engine.context, later), cancelled)
    record = saver.ledger.get(first.key)
    assert record is not None and (record.status, record.attempts) == ("uncertain", 1)


@pytest.fixture
def proxied(namespace: tuple[str, str], write_mode: str) -> Iterator[tuple[Proxy, DurableSaver]]:
    """A saver whose Postgres connections go through a proxy that can lose one reply
    (statements sent as text each time: no prepared statements)."""
    schema, prefix = namespace
    proxy = Proxy(postgres_address())
    proxy.start()
    saver = DurableSaver(REDIS_URL, proxy.url(POSTGRES_DATABASE), key_prefix=prefix, schema=schema,
                         write_mode=write_mode, prepare_threshold=None)
    saver.setup()
    yield proxy, saver
    saver.close()
    proxy.cut()


@pytest.mark.parametrize("write_mode", ["through"])
@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_claim_reply_lost_on_the_wire_runs_the_tool_once(
        proxied: tuple[Proxy, DurableSaver], flavour: str) -> None:
    """Postgres commits the claim and sends its answer; the connection dies before the
    driver reads a byte of it. The driver retries on a new connection, the claim finds its
    own row (its nonce), and the tool runs once: ``succeeded``, one attempt."""
    proxy, saver = proxied
    calls: list[int] = []

    @durable_tool(saver=saver)
    def charge(cents: int) -> str:
        """Charge."""
        calls.append(cents)
        return f"charged {cents}"

    thread = uuid.uuid4().hex
    call = {"type": "tool_call", "name": "charge", "args": {"cents": 7}, "id": "call-7"}
    config: Any = {"configurable": {"thread_id": thread}}
    proxy.lose_reply(b"WITH lost AS")  # the claim statement's text
    if flavour == "sync":
        message = charge.invoke(call, config)
    else:
        message = asyncio.run(charge.ainvoke(call, config))
    assert proxy.lost == 1  # the reply really was lost
    assert message.content == "charged 7" and calls == [7]
    record = saver.ledger.get(saver.ledger.key_for(thread, "call-7"))
    assert record is not None and (record.status, record.attempts) == ("succeeded", 1)
