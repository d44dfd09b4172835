"""A tool call asked for again: the checkpoint that decided the call is in Postgres before
its effect starts; a call re-run under a new tool-call id (the run's checkpoints lost, or
a subgraph re-run from an older checkpoint) is the same call; a probable duplicate is
flagged, replayed or refused; and under ``durability="exit"``, where no decision can be
durable first, a warning says so."""

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
    ToolOutcomeUncertainError,
    current_idempotency_key,
    durable_tool,
)
from langgraph_durable._tiers.host import process_owner
from tests.support.checkpoints import put_value
from tests.support.graphs import model_then_tool_graph
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
    run asking for it again (here a replay from the checkpoint that decided it) gets the
    recorded result at once, from the same look at Postgres that would have waited: the
    tool does not run again, and written behind no journal is drained for it (another
    thread's unflushed checkpoint stays in Redis alone)."""
    saver = make_saver(flush_interval=60.0)
    calls: list[int] = []
    graph = model_then_tool_graph(saver, echo_tool(saver, calls), {"x": 7},
                                  lambda: f"call-{uuid.uuid4().hex}")
    thread = new_thread()
    graph.invoke({"messages": [("user", "go")]}, thread_config(thread))
    decided = next(s for s in graph.get_state_history(thread_config(thread))
                   if s.next == ("tools",))
    other = new_thread()
    put_value(saver, other, "unflushed")

    replayed = graph.invoke(None, decided.config)

    assert calls == [7]
    assert replayed["messages"][-1].content == "echo 7"
    in_postgres = sql(f'SELECT 1 FROM "{namespace[0]}".lgd_checkpoints WHERE thread_id = %s',
                      other)
    assert in_postgres == ([] if write_mode == "behind" else [(1,)])


@pytest.mark.parametrize("policy", ["raise", "idempotent", "finished"])
def test_a_call_re_run_under_a_new_tool_call_id_is_the_same_call(
        saver: DurableSaver, namespace: tuple[str, str], policy: str,
        caplog: pytest.LogCaptureFixture) -> None:
    """``charge`` was cut off mid-call (its process died before recording the outcome)
    and the run's checkpoints were lost with it (a machine that died with state not yet
    flushed: the thread is deleted here, its ledger kept); the run starts again from its
    input, and the model asks again with a new random tool-call id, so a new key. Same
    thread, namespace, step, tool and arguments:
    it is the same call, one row. Its policy applies to it, never a blind second run:
    ``on_uncertain="raise"`` raises without running; ``idempotent=True`` runs it again
    under the first call's idempotency key, the one the provider saw. A call that had
    finished (``finished``: only the checkpoints were lost) is replayed, whatever
    ``on_duplicate`` says. The same arguments in a later turn (a later step) are a new
    call."""
    keys: list[str] = []

    def charge(order: str) -> str:
        """Charge an order."""
        keys.append(current_idempotency_key())
        return f"charged {order}"

    tool = durable_tool(charge, saver=saver, idempotent=policy == "idempotent")
    graph = model_then_tool_graph(saver, tool, {"order": "A"},
                                  lambda: f"call-{uuid.uuid4().hex}")
    thread = new_thread()
    graph.invoke({"messages": [("user", "buy")]}, thread_config(thread))
    (first,) = saver.ledger.list(thread)
    if policy != "finished":
        _cut_off(namespace[0], first.key)
    saver.delete_thread(thread, keep_ledger=True)
    again = {"messages": [("user", "buy")]}
    with caplog.at_level(logging.WARNING, "langgraph_durable"):
        if policy == "raise":
            with pytest.raises(ToolOutcomeUncertainError):
                graph.invoke(again, thread_config(thread))
        else:
            out = graph.invoke(again, thread_config(thread))
            assert out["messages"][-1].content == "charged A"
            assert out["messages"][-1].tool_call_id == out["messages"][-2].tool_calls[0]["id"]
    runs = {"raise": 1, "idempotent": 2, "finished": 1}[policy]
    assert keys == [first.idempotency_key] * runs
    assert "re-run under a new tool-call id" in caplog.text
    (row,) = saver.ledger.list(thread)
    assert row.key == first.key
    assert row.status == ("uncertain" if policy == "raise" else "succeeded")

    graph.invoke({"messages": [("user", "buy again")]}, thread_config(thread))
    assert len(saver.ledger.list(thread)) == 2 and len(set(keys)) == 2


@pytest.mark.parametrize("how", ["lost", "fork"])
def test_a_call_in_a_subgraph_re_run_from_an_older_checkpoint_is_the_same_call(
        saver: DurableSaver, namespace: tuple[str, str], how: str) -> None:
    """A worker agent (a subgraph the supervisor's ``Send`` runs) was cut off in ``charge``
    (its process died before recording the outcome). Its namespace ends with the id of the
    supervisor's task, which LangGraph derives from the checkpoint the step ran from; so
    when that step runs again from an older checkpoint, the task, hence the namespace, has
    a new id: ``lost``, the run's checkpoints were lost (``durability="exit"``, or a machine
    that died with state not yet flushed) and it starts again from its input; ``fork``, the
    thread is forked at its first checkpoint, copying the cut-off call. The model asks again
    with a new tool-call id. Same thread, graph path, step, tool and arguments: the same
    call, run again (``idempotent=True``) under the key the provider saw, never a blind
    second call under a new key."""
    keys: list[str] = []

    def charge(order: str) -> str:
        """Charge an order."""
        keys.append(current_idempotency_key())
        return f"charged {order}"

    tool = durable_tool(charge, saver=saver, idempotent=True)
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
    (first,) = saver.ledger.list(thread)
    _cut_off(namespace[0], first.key)
    if how == "lost":
        saver.delete_thread(thread, keep_ledger=True)
        out = graph.invoke({"done": []}, thread_config(thread))
    else:
        oldest = list(saver.list(thread_config(thread)))[-1].config["configurable"]["checkpoint_id"]
        thread, source = f"{thread}-fork", thread
        saver.copy_thread(source, thread, up_to=oldest)
        out = graph.invoke(None, thread_config(thread))
    assert out["done"] == ["charged A"]
    assert keys == [first.idempotency_key] * 2
    (row,) = saver.ledger.list(thread)
    assert row.status == "succeeded" and row.idempotency_key == first.idempotency_key


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
