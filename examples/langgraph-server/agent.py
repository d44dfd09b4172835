"""A graph served by LangGraph's server with `DurableSaver` as its checkpointer and
`DurableStore` as its long-term memory store.

``langgraph.json`` next to this file names the graph (``graph`` below), the checkpointer
(``langgraph_durable.server.checkpointer``) and the store
(``langgraph_durable.server.store``). The graph is compiled without either: the server
gives it its own (``langgraph dev`` refuses a checkpointer compiled in).

A message such as ``"charge order-7 1250"`` makes ``plan`` ask for two tool calls at once:
``charge`` (a side effect: a durable tool, so a resumed run never charges twice) and
``notify`` (harmless to repeat: a plain tool). ``approve`` asks a human first
(``interrupt``); resume the thread with ``Command(resume="yes")`` to go on, anything else
to stop. Once the tools ran, ``plan`` writes the run's summary to the store, under
namespace ``("orders", ORDER)`` and key ``"summary"``: any thread, and the server's
``/store`` API, can read it there.

Two environment settings make the side effect visible (the tests use them):

- ``EXAMPLE_CHARGES_FILE``: where ``charge`` appends one JSON line per real charge (default
  ``charges.jsonl`` in the server's working directory), a stand-in for a payment API;
- ``EXAMPLE_HOLD_FILE``: while this file exists, ``notify`` waits, so that a run can be
  caught in the middle of its tool step (to kill the server there, or roll the run back).
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from pathlib import Path
from typing import Annotated, Any, Literal, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode
from langgraph.runtime import Runtime
from langgraph.types import interrupt

from langgraph_durable import current_idempotency_key, durable_tool


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


@durable_tool
def charge(order_id: str, cents: int) -> str:
    """Charge the customer of an order."""
    # A real tool passes the key to the payment API (an Idempotency-Key header), so that
    # even a call whose outcome was lost in a crash is not charged twice.
    key = current_idempotency_key()
    line = json.dumps({"order_id": order_id, "cents": cents, "idempotency_key": key})
    with Path(os.environ.get("EXAMPLE_CHARGES_FILE", "charges.jsonl")).open("a") as f:
        f.write(line + "\n")
    return f"charged {cents} cents for {order_id}"


@tool
async def notify(order_id: str) -> str:
    """Tell the customer their order is paid."""
    hold = os.environ.get("EXAMPLE_HOLD_FILE")
    if hold:
        while await asyncio.to_thread(os.path.exists, hold):
            await asyncio.sleep(0.1)
    return f"notified the customer of {order_id}"


async def plan(state: State, runtime: Runtime) -> dict[str, Any]:
    """Stands in for a model: ``charge ORDER CENTS`` asks for both tools; after the tools
    ran, a summary, also written to the store (the server's: `DurableStore`)."""
    last = state["messages"][-1]
    if isinstance(last, ToolMessage):
        results = [str(m.content) for m in state["messages"] if isinstance(m, ToolMessage)]
        summary = "done: " + "; ".join(results)
        asked = next(m for m in reversed(state["messages"])
                     if isinstance(m, AIMessage) and m.tool_calls)
        args = asked.tool_calls[0]["args"]  # charge's: order_id, cents
        if runtime.store is not None:
            await runtime.store.aput(("orders", args["order_id"]), "summary",
                                     {"cents": args["cents"], "text": summary})
        return {"messages": [AIMessage(summary)]}
    words = str(last.content).split() if isinstance(last, HumanMessage) else []
    if len(words) != 3 or words[0] != "charge" or not words[2].isdigit():
        return {"messages": [AIMessage("say: charge ORDER CENTS")]}
    order_id, cents = words[1], int(words[2])
    calls = [  # ids as random as a model's: the checkpoint keeps them, the ledger uses them
        {"name": "charge", "args": {"order_id": order_id, "cents": cents},
         "id": f"call_{uuid.uuid4().hex[:12]}", "type": "tool_call"},
        {"name": "notify", "args": {"order_id": order_id},
         "id": f"call_{uuid.uuid4().hex[:12]}", "type": "tool_call"},
    ]
    return {"messages": [AIMessage("", tool_calls=calls)]}


def approve(state: State) -> dict[str, Any]:
    """A human approves the charge (``interrupt``); no stops the run."""
    last = state["messages"][-1]
    assert isinstance(last, AIMessage)
    answer = interrupt({"approve": [call["args"] for call in last.tool_calls]})
    if answer == "yes":
        return {}
    return {"messages": [ToolMessage("not approved", tool_call_id=call["id"])
                         for call in last.tool_calls]}


def after_plan(state: State) -> str:
    last = state["messages"][-1]
    return "approve" if isinstance(last, AIMessage) and last.tool_calls else END


def after_approve(state: State) -> Literal["tools", "plan"]:
    return "plan" if isinstance(state["messages"][-1], ToolMessage) else "tools"


builder = StateGraph(State)
builder.add_node("plan", plan)
builder.add_node("approve", approve)
builder.add_node("tools", ToolNode([charge, notify]))
builder.add_edge(START, "plan")
builder.add_conditional_edges("plan", after_plan)
builder.add_conditional_edges("approve", after_approve)
builder.add_edge("tools", "plan")
graph = builder.compile()
