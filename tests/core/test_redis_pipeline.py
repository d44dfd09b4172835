"""The ordering rules of a Redis connection's script calls (`_tiers/pipeline.py`), with no
server: each call's steps are carried out on a scripted connection that records what was
sent, read and closed, and answers each read with the next scripted reply (an exception
is raised where the read is, as a socket's would be)."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from typing import Any

import hiredis
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError, TimeoutError

from langgraph_durable._core.requests import Hot, HotBatch
from langgraph_durable._core.scripts.registry import Script
from langgraph_durable._tiers.common import Scripts
from langgraph_durable._tiers.pipeline import Io, ScriptCalls, Send, Steps


def _script(name: str, *, replicated: bool = False) -> Script:
    source = f"return '{name}'"
    return Script(name=name, keys=("k",), args=(), replicated=replicated, source=source,
                  sha=hashlib.sha1(source.encode()).hexdigest(), names=frozenset({"k"}),
                  sequences=False)


UPDATE, GET, OTHER = _script("update"), _script("get"), _script("other")
BY_BODY = {s.source: s.name for s in (UPDATE, GET, OTHER)} | {
    s.sha: s.name for s in (UPDATE, GET, OTHER)}


def _hot(script: Script, *, wait: bool = True) -> Hot:
    return Hot(script, ["k"], [], wait=wait)


class Connection:
    """A scripted connection: ``log`` holds what the call did, in order ("EVALSHA get",
    "EVAL update" for a script sent with its source, "WAIT", "read", "disconnect")."""

    def __init__(self, replies: Sequence[Any]) -> None:
        self.replies = list(replies)
        self.log: list[str] = []

    def run(self, steps: Steps[Any]) -> Any:
        """Carry out ``steps`` as a driver does (`aio.Tiers._drive`)."""
        try:
            step = next(steps)
            while True:
                if isinstance(step, Send):
                    self.log += self._commands(step.packed)
                    step = steps.send(None)
                    continue
                if step is Io.DISCONNECT:
                    self.log.append("disconnect")
                    step = steps.send(None)
                    continue
                self.log.append("read")
                reply = self.replies.pop(0)
                step = steps.throw(reply) if isinstance(reply, Exception) else steps.send(reply)
        except StopIteration as stop:
            assert not self.replies, f"replies never read: {self.replies}"
            return stop.value

    @staticmethod
    def _commands(packed: list[bytes]) -> list[str]:
        reader = hiredis.Reader()
        reader.feed(b"".join(packed))
        commands = []
        while (command := reader.gets()) is not False:
            head = command[0].decode()
            commands.append(head if head == "WAIT" else f"{head} {BY_BODY[command[1].decode()]}")
        return commands


def _calls(*known: Script, wait: tuple[Any, ...] | None = None) -> ScriptCalls:
    """Script calls of a driver that sent ``known`` before (Redis holds them)."""
    calls = ScriptCalls(Scripts(), wait)
    for script in known:
        calls.scripts.sent(_hot(script))
    return calls


def test_a_waited_script_shares_its_round_trip_with_the_reply_its_connection_owes() -> None:
    conn = Connection([1, "value"])
    reply = conn.run(_calls(UPDATE, GET).call(_hot(GET), _hot(UPDATE, wait=False)))
    assert reply == "value"
    assert conn.log == ["EVALSHA get", "read", "read"]


def test_a_script_sent_without_waiting_reads_the_owed_reply_first_and_no_reply_of_its_own(
) -> None:
    conn = Connection([1])
    assert conn.run(_calls(UPDATE).call(_hot(UPDATE, wait=False),
                                        _hot(UPDATE, wait=False))) is None
    assert conn.log == ["read", "EVALSHA update"]


def test_a_batch_reads_the_owed_reply_first_and_sends_each_script_with_its_source() -> None:
    conn = Connection([1, "a", "b"])
    batch = HotBatch((_hot(GET), _hot(OTHER)))
    assert conn.run(_calls(UPDATE, GET, OTHER).call(batch, _hot(UPDATE, wait=False))) == [
        "a", "b"]
    assert conn.log == ["read", "EVAL get", "EVAL other", "read", "read"]


def test_a_script_first_called_goes_with_its_source_then_by_its_sha() -> None:
    calls, first, then = _calls(), Connection(["a"]), Connection(["b"])
    assert first.run(calls.call(_hot(GET), None)) == "a"
    assert then.run(calls.call(_hot(GET), None)) == "b"
    assert first.log + then.log == ["EVAL get", "read", "EVALSHA get", "read"]


def test_a_script_the_server_lost_goes_again_with_its_source() -> None:
    conn = Connection([NoScriptError("NOSCRIPT No matching script."), "value"])
    assert conn.run(_calls(GET).call(_hot(GET), None)) == "value"
    assert conn.log == ["EVALSHA get", "read", "EVAL get", "read"]


def test_an_owed_script_the_server_lost_gets_its_source_after_the_reply_sent_behind_it(
) -> None:
    conn = Connection([NoScriptError("NOSCRIPT No matching script."), "value", 1])
    assert conn.run(_calls(UPDATE, GET).call(_hot(GET), _hot(UPDATE, wait=False))) == "value"
    assert conn.log == ["EVALSHA get", "read", "read", "EVAL update", "read"]


def test_an_owed_source_still_goes_when_the_script_behind_it_is_refused() -> None:
    conn = Connection([NoScriptError("NOSCRIPT No matching script."),
                       ResponseError("ERR refused"), 1])
    with pytest.raises(ResponseError, match="refused"):
        conn.run(_calls(UPDATE, GET).call(_hot(GET), _hot(UPDATE, wait=False)))
    assert conn.log == ["EVALSHA get", "read", "read", "EVAL update", "read"]


@pytest.mark.parametrize("wait", [True, False], ids=["waited", "sent-only"])
def test_an_owed_reply_redis_did_not_send_in_time_fails_the_script_behind_it(
        wait: bool) -> None:
    conn = Connection([TimeoutError("Timeout reading from socket")])
    with pytest.raises(TimeoutError, match="an owed reply"):
        conn.run(_calls(UPDATE, GET).call(_hot(GET, wait=wait), _hot(UPDATE, wait=False)))
    sent = ["EVALSHA get"] if wait else []  # a waited script went first: same round trip
    assert conn.log == [*sent, "read", "disconnect"]


@pytest.mark.parametrize("wait", [True, False], ids=["waited", "sent-only"])
def test_a_connection_an_owed_reply_broke_carries_nothing_more(wait: bool) -> None:
    """Sent on, the script would go on a new connection, to a Redis process the driver did
    not check it reached: it fails as lost, for the driver's retry to reconnect."""
    conn = Connection([RedisConnectionError("Connection closed by server.")])
    with pytest.raises(RedisConnectionError, match="owed reply"):
        conn.run(_calls(UPDATE, GET).call(_hot(GET, wait=wait), _hot(UPDATE, wait=False)))
    sent = ["EVALSHA get"] if wait else []
    assert conn.log == [*sent, "read", "disconnect"]


def test_an_owed_refusal_is_logged_and_the_script_behind_it_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    conn, calls = Connection([ResponseError("ERR out of range"), "value"]), _calls(UPDATE, GET)
    with caplog.at_level(logging.WARNING, logger="langgraph_durable"):
        assert conn.run(calls.call(_hot(GET), _hot(UPDATE, wait=False))) == "value"
    assert conn.log == ["EVALSHA get", "read", "read"]  # in step: not closed
    assert "update script" in caplog.text and "out of range" in caplog.text
    assert calls.damaged == []


def test_an_owed_script_that_met_a_key_of_another_type_is_kept_for_repair() -> None:
    calls, owed = _calls(UPDATE), _hot(UPDATE, wait=False)
    conn = Connection([ResponseError("WRONGTYPE Operation against a key holding the wrong "
                                      "kind of value")])
    assert conn.run(calls.call(_hot(UPDATE, wait=False), owed)) is None
    assert conn.log == ["read", "EVALSHA update"]
    assert calls.damaged == [owed]


def test_settling_an_owed_reply_on_its_own_sends_a_lost_script_its_source() -> None:
    conn = Connection([NoScriptError("NOSCRIPT No matching script."), 1])
    assert conn.run(_calls(UPDATE).settle(_hot(UPDATE, wait=False))) is False
    assert conn.log == ["read", "EVAL update", "read"]


def test_a_replicated_script_waits_for_its_replicas() -> None:
    written = _script("put", replicated=True)
    BY_BODY.update({written.source: "put", written.sha: "put"})
    calls = _calls(written, wait=("WAIT", 1, 100))
    conn = Connection(["ok", 1])
    assert conn.run(calls.call(_hot(written), None)) == "ok"
    assert conn.log == ["EVALSHA put", "read", "WAIT", "read"]
    with pytest.raises(ResponseError, match="NOREPLICAS 0 of the 1"):
        Connection(["ok", 0]).run(calls.call(_hot(written), None))
    unreplicated = Connection(["value"])
    assert unreplicated.run(calls.call(_hot(GET), None)) == "value"
    assert unreplicated.log == ["EVAL get", "read"]


def test_meanwhile_work_runs_between_sending_and_reading() -> None:
    conn = Connection(["value"])
    seen: list[list[str]] = []
    request = _hot(GET).overlapping(lambda: seen.append(list(conn.log)))
    assert conn.run(_calls(GET).call(request, None)) == "value"
    assert seen == [["EVALSHA get"]]
