"""A call's identity is exact: the thread, the graph namespace, and the model's tool-call id
or the task and the call's position in it. Equal arguments never make two calls one: a
node that asks twice, a model message with two equal tool calls and a model sampled twice
run as often as they would with plain tools; a step run again from the same checkpoint
(here after an error) replays each of its calls, in order, once."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableLambda
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import RetryPolicy

from langgraph_durable import DurableSaver, current_idempotency_key, durable_tool
from langgraph_durable.models import durable_model
from tests.support.tool_calls import new_thread, thread_config


class _FailOnce:
    """Raises the first time it is called, as a step that errs after its calls did."""

    def __init__(self) -> None:
        self.failed = False

    def __call__(self) -> None:
        if not self.failed:
            self.failed = True
            raise RuntimeError("the step fails once, after its calls")


def _one_node_graph(saver: DurableSaver, node: Any) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("work", node)
    builder.add_edge(START, "work")
    builder.add_edge("work", END)
    return builder.compile(checkpointer=saver)


def test_the_same_call_twice_in_one_node_runs_twice_and_a_rerun_replays_both(
        saver: DurableSaver) -> None:
    """A node calls the tool once per order line, and two lines are equal: two charges,
    as with a plain tool. The step then fails and runs again from the same checkpoint: both
    calls are replayed from the ledger (positions 0 and 1), nothing is charged again."""
    charged: list[str] = []

    @durable_tool(saver=saver)
    def charge(item: str) -> str:
        """Charge one line."""
        charged.append(current_idempotency_key())
        return f"charged {item}"

    fail = _FailOnce()

    def work(state: MessagesState) -> dict[str, Any]:
        done = [charge.invoke({"item": line}) for line in ("apple", "apple")]
        fail()
        return {"messages": [AIMessage(", ".join(done))]}

    graph = _one_node_graph(saver, work)
    config = thread_config(new_thread())
    with pytest.raises(RuntimeError, match="fails once"):
        graph.invoke({"messages": [("user", "order")]}, config)
    assert len(charged) == 2 and len(set(charged)) == 2

    out = graph.invoke(None, config)

    assert out["messages"][-1].content == "charged apple, charged apple"
    assert len(charged) == 2


def test_a_durable_model_sampled_twice_is_called_twice(saver: DurableSaver) -> None:
    """Two drafts from one input in one node (self-consistency votes, a second sample):
    the model is called twice and each draft is its own answer. Run again from the same
    checkpoint after an error, the step gets both recorded drafts, in order, and pays for
    no call again."""
    calls: list[int] = []

    def sample(messages: Any) -> AIMessage:
        calls.append(1)
        return AIMessage(f"draft {len(calls)}")

    model = durable_model(RunnableLambda(sample), saver=saver, name="sampler")
    fail = _FailOnce()

    def work(state: MessagesState) -> dict[str, Any]:
        drafts = [model.invoke(state["messages"]).content for _ in range(2)]
        fail()
        return {"messages": [AIMessage(" | ".join(drafts))]}

    graph = _one_node_graph(saver, work)
    config = thread_config(new_thread())
    with pytest.raises(RuntimeError, match="fails once"):
        graph.invoke({"messages": [("user", "write")]}, config)
    assert len(calls) == 2

    out = graph.invoke(None, config)

    assert out["messages"][-1].content == "draft 1 | draft 2"
    assert len(calls) == 2


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_two_equal_tool_calls_in_one_message_run_at_once_as_two_calls(
        saver: DurableSaver, flavour: str) -> None:
    """A model asks for two apples as two tool calls with equal arguments, and ``ToolNode``
    runs them at the same time. Each is its own call under its own key: the provider
    receives two requests, and neither call takes the other, still running, for one a
    crash cut off (no ``verify``, no uncertain outcome, no error)."""
    requests: list[str] = []
    verified: list[str] = []
    lock = threading.Lock()

    def verify(key: str, args: Any) -> bool:
        verified.append(key)
        return False

    def add(item: str) -> str:
        with lock:
            requests.append(current_idempotency_key())
        return f"added {item}"

    if flavour == "sync":
        def add_to_cart(item: str) -> str:
            """Add an item to the cart."""
            time.sleep(0.3)
            return add(item)
        tool = durable_tool(add_to_cart, saver=saver, verify=verify)
    else:
        async def add_to_cart(item: str) -> str:  # type: ignore[misc]
            """Add an item to the cart."""
            await asyncio.sleep(0.3)
            return add(item)
        tool = durable_tool(add_to_cart, saver=saver, verify=verify)

    calls = [{"name": "add_to_cart", "args": {"item": "apple"}, "id": f"call-{uuid.uuid4().hex}",
              "type": "tool_call"} for _ in range(2)]
    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode([tool]))
    builder.add_edge(START, "tools")
    graph = builder.compile(checkpointer=saver)
    given = {"messages": [AIMessage("", tool_calls=calls)]}  # type: ignore[arg-type]
    config = thread_config(new_thread())

    out = (graph.invoke(given, config) if flavour == "sync"
           else asyncio.run(graph.ainvoke(given, config)))

    assert [m.content for m in out["messages"][-2:]] == ["added apple", "added apple"]
    assert len(requests) == 2 and len(set(requests)) == 2
    assert verified == []
    records = saver.ledger.list(config["configurable"]["thread_id"])
    assert sorted(r.status for r in records) == ["succeeded", "succeeded"]
    assert all(r.duplicate_of is None for r in records)  # siblings, not probable duplicates


def test_a_step_retried_by_a_retry_policy_replays_its_calls(saver: DurableSaver) -> None:
    """A node charges two order lines, then meets a transient error, and LangGraph's
    ``RetryPolicy`` runs it again from the same checkpoint: the retry's calls are the
    first attempt's calls (the same positions, the same keys), replayed, not charged
    again."""
    charged: list[str] = []

    @durable_tool(saver=saver)
    def charge(item: str) -> str:
        """Charge one line."""
        charged.append(current_idempotency_key())
        return f"charged {item}"

    attempts: list[int] = []

    def work(state: MessagesState) -> dict[str, Any]:
        done = [charge.invoke({"item": line}) for line in ("apple", "pear")]
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("a blip after the charges")
        return {"messages": [AIMessage(", ".join(done))]}

    builder = StateGraph(MessagesState)
    builder.add_node("work", work, retry_policy=RetryPolicy(initial_interval=0.01,
                                                            jitter=False,
                                                            retry_on=ConnectionError))
    builder.add_edge(START, "work")
    graph = builder.compile(checkpointer=saver)

    out = graph.invoke({"messages": [("user", "order")]}, thread_config(new_thread()))

    assert out["messages"][-1].content == "charged apple, charged pear"
    assert len(attempts) == 2 and len(charged) == 2 and len(set(charged)) == 2


def test_a_durable_model_in_a_chain_counts_its_calls_in_the_task(saver: DurableSaver) -> None:
    """The model inside a chain (``prompt | durable_model(...)``), invoked twice in one
    node: LangChain runs each chain in a copied context, yet the two calls are positions
    0 and 1 of the task, two calls of the model."""
    calls: list[int] = []

    def sample(messages: Any) -> AIMessage:
        calls.append(1)
        return AIMessage(f"draft {len(calls)}")

    chain = RunnableLambda(lambda state: state["messages"]) | durable_model(
        RunnableLambda(sample), saver=saver, name="sampler")

    def work(state: MessagesState) -> dict[str, Any]:
        drafts = [chain.invoke(state).content for _ in range(2)]
        return {"messages": [AIMessage(" | ".join(drafts))]}

    out = _one_node_graph(saver, work).invoke({"messages": [("user", "write")]},
                                              thread_config(new_thread()))

    assert out["messages"][-1].content == "draft 1 | draft 2"
    assert len(calls) == 2


def test_a_call_running_here_is_never_taken_for_dead_by_a_caller_under_another_key() -> None:
    """Liveness is judged by who handles the recorded key in this process, leaving out only
    the asker itself: a call that goes on as a recorded one (its own key differs) finds the
    recorded call alive while a caller here handles it, and gone once none does."""
    from langgraph_durable._tiers.host import ACTIVE, owner_gone, process_owner

    me = process_owner().text
    recorded, asker = f"lgd-rec-{uuid.uuid4().hex}", f"lgd-ask-{uuid.uuid4().hex}"
    ACTIVE.enter(asker)
    try:
        ACTIVE.enter(recorded)  # the recorded call, still running in this process
        assert not owner_gone(me, recorded, asker)
        ACTIVE.leave(recorded)
        assert owner_gone(me, recorded, asker)
        assert owner_gone(me, asker, asker)  # only the asker handles its own key
    finally:
        ACTIVE.leave(asker)


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_a_call_in_a_subgraph_runs_once_every_enclosing_step_is_in_postgres(
        make_saver: Any, namespace: tuple[str, str], durability: str) -> None:
    """A tool called in a worker subgraph runs only once Postgres holds the checkpoint its
    own step ran from and the one the parent's step ran from: were the parent's lost, the
    resume would run the worker again under a new namespace, its call a new call."""
    saver = make_saver(flush_interval=60.0)
    seen: list[tuple[int, bool]] = []

    @durable_tool(saver=saver)
    def charge(order: str) -> str:
        """Charge an order."""
        from langgraph.config import get_config

        from tests.support.tool_calls import sql

        configurable = get_config()["configurable"]
        ids = list(configurable["checkpoint_map"].values())
        stored = sql(f'SELECT checkpoint_id FROM "{namespace[0]}".lgd_checkpoints '
                     "WHERE thread_id = %s AND checkpoint_id = ANY(%s)",
                     configurable["thread_id"], ids)
        seen.append((len(ids), sorted(i for (i,) in stored) == sorted(ids)))
        return "charged"

    from tests.support.graphs import model_then_tool_graph

    worker = model_then_tool_graph(None, charge, {"order": "A"},
                                   lambda: f"call-{uuid.uuid4().hex}")
    builder = StateGraph(MessagesState)
    builder.add_node("worker", worker)
    builder.add_edge(START, "worker")
    graph = builder.compile(checkpointer=saver)
    graph.invoke({"messages": [("user", "ship")]}, thread_config(new_thread()),
                 durability=durability)
    assert seen == [(2, True)]  # the root's step and the worker's, both stored
