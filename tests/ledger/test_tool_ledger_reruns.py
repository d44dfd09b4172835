"""A tool call asked for again: the checkpoint that decided the call is in Postgres before
its effect starts; a call is its key and nothing else (a later turn, a sub-agent asked
again, a reused thread id are new calls); a probable duplicate is flagged, replayed or
refused; and under ``durability="exit"``, where no decision can be durable first, a
warning says so."""

from __future__ import annotations

import logging
import subprocess
import sys
import uuid
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage
from langgraph.config import get_config
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Send

from langgraph_durable import (
    DurableSaver,
    IdempotencyConflictError,
    current_idempotency_key,
    durable_tool,
)
from langgraph_durable._tiers.host import process_owner
from tests.support.checkpoints import put_value
from tests.support.graphs import fails_once_after, model_then_tool_graph
from tests.support.tool_calls import echo_tool, new_thread, sql, thread_config, tool_call

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning",
                                        "ignore:.*create_react_agent.*")


def _cut_off(schema: str, key: str) -> None:
    """Make the finished call ``key`` look cut off mid-call: ``started``, its result gone,
    its lease held by a process of this host that has exited."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    sql(f'UPDATE "{schema}".lgd_tool_calls SET status = \'started\', '
        "result = NULL, finished_at = NULL, lease_owner = %s, "
        "lease_expires_at = clock_timestamp() + interval '60 seconds' WHERE key = %s",
        f"{process_owner().host}:{gone.pid}:0123", key)


@pytest.mark.parametrize("durability", ["sync", "async", None])
def test_a_tool_runs_only_once_the_checkpoint_that_decided_it_is_in_postgres(
        make_saver: Any, namespace: tuple[str, str], durability: str | None) -> None:
    """The checkpoint holding the model's tool call (and so the call's id and key) is in
    Postgres before the tool's effect starts, in both write modes and with LangGraph's
    ``durability`` "sync", "async" or not given (LangGraph's default, "async", which it
    does not write into the config): written behind with a flusher that would wait a
    minute, the call drains the thread's journal first. A crash during the effect then
    resumes from that decision instead of asking the model again."""
    saver = make_saver(flush_interval=60.0)
    seen: list[int] = []

    @durable_tool(saver=saver)
    def charge(order: str) -> str:
        """Charge an order."""
        configurable = get_config()["configurable"]
        seen.append(len(sql(
            f'SELECT 1 FROM "{namespace[0]}".lgd_checkpoints WHERE thread_id = %s '
            "AND checkpoint_ns = '' AND checkpoint_id = %s",
            configurable["thread_id"], configurable["checkpoint_map"][""])))
        return "charged"

    graph = model_then_tool_graph(saver, charge, {"order": "A"},
                                  lambda: f"call-{uuid.uuid4().hex}")
    given = {} if durability is None else {"durability": durability}
    graph.invoke({"messages": [("user", "buy")]}, thread_config(new_thread()), **given)
    assert seen == [1]


def test_a_settled_call_asked_for_again_replays_without_waiting_for_its_decision(
        make_saver: Any, namespace: tuple[str, str], write_mode: str) -> None:
    """A call the ledger holds as succeeded was decided durably before it first ran, so a
    run asking for it again (here the tool step, which failed after the tool ran, run
    again from the same checkpoint) gets the recorded result at once, from the same look at
    Postgres that would have waited: the tool does not run again, and written behind no
    journal is drained for it (another thread's unflushed checkpoint stays in Redis
    alone)."""
    saver = make_saver(flush_interval=60.0)
    calls: list[int] = []
    echo = echo_tool(saver, calls)

    builder = StateGraph(MessagesState)
    builder.add_node("model", lambda s: {"messages": [AIMessage("", tool_calls=[
        tool_call("echo", {"x": 7}, f"call-{uuid.uuid4().hex}")])]})
    builder.add_node("tools", fails_once_after(ToolNode([echo])))
    builder.add_edge(START, "model")
    builder.add_edge("model", "tools")
    builder.add_edge("tools", END)
    graph = builder.compile(checkpointer=saver)
    thread = new_thread()
    with pytest.raises(RuntimeError, match="fails once"):
        graph.invoke({"messages": [("user", "go")]}, thread_config(thread))
    other = new_thread()
    put_value(saver, other, "unflushed")

    replayed = graph.invoke(None, thread_config(thread))

    assert calls == [7]
    assert replayed["messages"][-1].content == "echo 7"
    in_postgres = sql(f'SELECT 1 FROM "{namespace[0]}".lgd_checkpoints WHERE thread_id = %s',
                      other)
    assert in_postgres == ([] if write_mode == "behind" else [(1,)])


@pytest.mark.parametrize("ids", ["random", "fixed"])
@pytest.mark.parametrize("keep_ledger", [True, False])
def test_a_reused_thread_id_is_a_new_conversation(
        saver: DurableSaver, namespace: tuple[str, str], keep_ledger: bool, ids: str) -> None:
    """Thread id = user id is common: after ``delete_thread`` (with its ledger kept as an
    audit trail, or not), a new conversation on the same thread id asking for the same
    charge gets a charge, as with a plain tool, even when the model mints the same
    tool-call id as before (``fixed``). The first conversation's call was cut off mid-call;
    its kept row stays listed with the thread, retired (moved off the key a new call could
    derive, the key the provider saw kept as ``idempotency_key``), never answering the new
    call, and a copy of the thread does not take it along."""
    keys: list[str] = []

    def charge(order: str) -> str:
        """Charge an order."""
        keys.append(current_idempotency_key())
        return f"charged {order}"

    tool = durable_tool(charge, saver=saver)
    graph = model_then_tool_graph(
        saver, tool, {"order": "A"},
        (lambda: f"call-{uuid.uuid4().hex}") if ids == "random" else (lambda: "call-1"))
    thread = new_thread()
    graph.invoke({"messages": [("user", "buy")]}, thread_config(thread))
    (first,) = saver.ledger.list(thread)
    _cut_off(namespace[0], first.key)
    saver.delete_thread(thread, keep_ledger=keep_ledger)

    out = graph.invoke({"messages": [("user", "buy")]}, thread_config(thread))

    assert out["messages"][-1].content == "charged A"
    assert len(keys) == 2 and keys[0] == first.key
    rows = {r.retired_at is None: r for r in saver.ledger.list(thread)}
    assert rows[True].status == "succeeded" and rows[True].key == keys[1]
    if keep_ledger:
        old = rows[False]
        assert old.key.startswith(f"{first.key}~retired:")
        assert (old.idempotency_key, old.status) == (first.key, "started")
        assert keys[1] != first.key or ids == "fixed"
    else:
        assert list(rows) == [True]
    saver.copy_thread(thread, f"{thread}-copy")
    assert [r.status for r in saver.ledger.list(f"{thread}-copy")] == ["succeeded"]


def test_a_sub_agent_asked_again_in_a_later_turn_runs_again(saver: DurableSaver) -> None:
    """A worker agent (a subgraph the supervisor's ``Send`` runs) is asked in turn 1 and
    again in turn 2 to charge the same order. A subgraph's steps start afresh every turn,
    so both calls have the same graph path, step, tool and arguments; they are two calls
    (a plain tool charges twice), each under its own key."""
    keys: list[str] = []

    def charge(order: str) -> str:
        """Charge an order."""
        keys.append(current_idempotency_key())
        return f"charged {order}"

    tool = durable_tool(charge, saver=saver)
    agent = model_then_tool_graph(None, tool, {"order": "A"},
                                  lambda: f"call-{uuid.uuid4().hex}")

    class Orders(TypedDict):
        done: Annotated[list[str], lambda a, b: a + b]

    def worker(assignment: dict[str, str]) -> dict[str, Any]:
        out = agent.invoke({"messages": [("user", f"ship {assignment['order']}")]})
        return {"done": [out["messages"][-1].content]}

    builder = StateGraph(Orders)
    builder.add_node("worker", worker)
    builder.add_conditional_edges(START, lambda _: [Send("worker", {"order": "A"})],
                                  ["worker"])
    builder.add_edge("worker", END)
    graph = builder.compile(checkpointer=saver)
    thread = new_thread()
    graph.invoke({"done": []}, thread_config(thread))
    out = graph.invoke({"done": []}, thread_config(thread))

    assert out["done"] == ["charged A", "charged A"]
    assert len(set(keys)) == 2
    assert [r.status for r in saver.ledger.list(thread)] == ["succeeded", "succeeded"]


def test_durability_exit_is_said_loudly(saver: DurableSaver,
                                        caplog: pytest.LogCaptureFixture) -> None:
    """Under ``durability="exit"`` LangGraph writes no checkpoint before the run ends, so
    no decision can be durable before the effect: the tool runs, and a warning says what a
    crash would cost, once per process."""
    from langgraph_durable._core.ledger import protocol

    protocol._warned_exit = False
    calls: list[int] = []
    echo = echo_tool(saver, calls)
    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode([echo]))
    builder.add_edge(START, "tools")
    graph = builder.compile(checkpointer=saver)
    message = AIMessage("", tool_calls=[tool_call("echo", {"x": 1})])
    with caplog.at_level(logging.WARNING, logger="langgraph_durable"):
        for _ in range(2):
            graph.invoke({"messages": [message]}, thread_config(new_thread()), durability="exit")
    assert calls == [1, 1]
    said = [r for r in caplog.records if "durability='exit'" in r.getMessage()]
    assert len(said) == 1


def test_probable_duplicate_is_flagged_replayed_or_refused(
        saver: DurableSaver, caplog: pytest.LogCaptureFixture) -> None:
    """A new tool call id with the same thread, tool and arguments as a call that just
    succeeded: by default logged and recorded as ``duplicate_of`` and run; with
    ``on_duplicate="replay"`` answered from the first call; with ``"raise"`` refused."""
    calls: list[int] = []
    thread = new_thread()
    echo = echo_tool(saver, calls)
    first = echo.invoke(tool_call("echo", {"x": 9}, "a"), thread_config(thread))
    with caplog.at_level(logging.WARNING, "langgraph_durable"):
        echo.invoke(tool_call("echo", {"x": 9}, "b"), thread_config(thread))
    assert "probably the model re-ran" in caplog.text
    flagged = saver.ledger.get(saver.ledger.key_for(thread, "b"))
    assert flagged is not None and flagged.duplicate_of == saver.ledger.key_for(thread, "a")
    assert calls == [9, 9]

    replay = echo_tool(saver, calls, on_duplicate="replay")
    replayed = replay.invoke(tool_call("echo", {"x": 9}, "c"), thread_config(thread))
    assert (replayed.content, replayed.tool_call_id) == (first.content, "c")
    record = saver.ledger.get(saver.ledger.key_for(thread, "c"))
    assert record is not None and (record.status, record.attempts) == ("succeeded", 0)

    refuse = echo_tool(saver, calls, on_duplicate="raise")
    for _ in range(2):
        with pytest.raises(IdempotencyConflictError, match="same arguments"):
            refuse.invoke(tool_call("echo", {"x": 9}, "d"), thread_config(thread))
    assert calls == [9, 9]
    ignore = echo_tool(saver, calls, on_duplicate="ignore")
    ignore.invoke(tool_call("echo", {"x": 9}, "e"), thread_config(thread))
    record = saver.ledger.get(saver.ledger.key_for(thread, "e"))
    assert record is not None and record.duplicate_of is None
