"""Small graphs the tests run on real savers."""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Send, interrupt


def chat_graph(saver: BaseCheckpointSaver[Any]) -> CompiledStateGraph[Any]:
    """plan -> act -> finish, each appending one AI message."""

    def step(name: str) -> Any:
        def node(state: MessagesState) -> dict[str, Any]:
            return {"messages": [AIMessage(content=f"{name} #{len(state['messages'])}")]}

        return node

    builder = StateGraph(MessagesState)
    for name in ("plan", "act", "finish"):
        builder.add_node(name, step(name))
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "act")
    builder.add_edge("act", "finish")
    builder.add_edge("finish", END)
    return builder.compile(checkpointer=saver)


class Approval(TypedDict):
    request: str
    decision: str


def approval_graph(saver: BaseCheckpointSaver[Any]) -> CompiledStateGraph[Any]:
    """A node that pauses with interrupt() until a human answers."""

    def ask(state: Approval) -> dict[str, Any]:
        return {"decision": interrupt({"question": f"approve {state['request']}?"})}

    builder = StateGraph(Approval)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    return builder.compile(checkpointer=saver)


class FanOut(TypedDict):
    items: list[str]
    results: Annotated[list[str], operator.add]


class Item(TypedDict):
    item: str


def fan_out_graph(saver: BaseCheckpointSaver[Any]) -> CompiledStateGraph[Any]:
    """Send one task per item; results are reduced with operator.add."""

    def route(state: FanOut) -> list[Send]:
        return [Send("work", {"item": item}) for item in state["items"]]

    def work(state: Item) -> dict[str, Any]:
        return {"results": [state["item"].upper()]}

    builder = StateGraph(FanOut)
    builder.add_node("work", work)
    builder.add_conditional_edges(START, route, ["work"])
    builder.add_edge("work", END)
    return builder.compile(checkpointer=saver)


def subgraph_graph(saver: BaseCheckpointSaver[Any]) -> CompiledStateGraph[Any]:
    """A parent whose node is a compiled subgraph (its own checkpoint namespace)."""

    def inner_step(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(content="inner")]}

    inner = StateGraph(MessagesState)
    inner.add_node("inner_step", inner_step)
    inner.add_edge(START, "inner_step")
    inner.add_edge("inner_step", END)

    def outer_step(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(content="outer")]}

    builder = StateGraph(MessagesState)
    builder.add_node("child", inner.compile())
    builder.add_node("outer_step", outer_step)
    builder.add_edge(START, "child")
    builder.add_edge("child", "outer_step")
    builder.add_edge("outer_step", END)
    return builder.compile(checkpointer=saver)


def _concat(state: list[str], writes: Sequence[list[str]]) -> list[str]:
    out = list(state)
    for w in writes:
        out.extend(w)
    return out


class DeltaState(TypedDict):
    log: Annotated[list[str], DeltaChannel(_concat, snapshot_frequency=3)]


def delta_graph(saver: BaseCheckpointSaver[Any]) -> CompiledStateGraph[Any]:
    """One node appending to a DeltaChannel that snapshots every 3 updates."""

    def add(state: DeltaState) -> dict[str, Any]:
        return {"log": [f"entry {len(state['log'])}"]}

    builder = StateGraph(DeltaState)
    builder.add_node("add", add)
    builder.add_edge(START, "add")
    builder.add_edge("add", END)
    return builder.compile(checkpointer=saver)


CHARGE_CALL = {"name": "charge_card", "args": {"order_id": "A-1", "cents": 500},
               "id": "call_1", "type": "tool_call"}
"""The tool call `charge_card_graph` is invoked with (as an AIMessage's)."""


def charge_card_graph(saver: Any, calls: list[int] | None = None, *,
                      fail_once: bool = False) -> CompiledStateGraph[Any]:
    """START → a ToolNode running a durable ``charge_card`` tool (each real call appends
    its cents to ``calls``); invoke it with ``AIMessage("", tool_calls=[CHARGE_CALL])``.
    ``fail_once``: the tool step fails once after its tool ran (`fails_once_after`)."""
    from langgraph.prebuilt import ToolNode

    from langgraph_durable import durable_tool

    @durable_tool(saver=saver)
    def charge_card(order_id: str, cents: int) -> str:
        """Charge a card."""
        if calls is not None:
            calls.append(cents)
        return f"charged {cents} for {order_id}"

    builder = StateGraph(MessagesState)
    node = ToolNode([charge_card])
    builder.add_node("tools", fails_once_after(node) if fail_once else node)
    builder.add_edge(START, "tools")
    return builder.compile(checkpointer=saver)


def model_then_tool_graph(saver: Any, tool: Any, args: dict[str, Any],
                          call_id: Callable[[], str]) -> CompiledStateGraph[Any]:
    """model → ToolNode([tool]) → END, where the model asks for ``tool`` with ``args`` under
    the tool-call id ``call_id()`` (a real model mints a new random one on every call)."""
    from langgraph.prebuilt import ToolNode

    def model(state: MessagesState) -> dict[str, Any]:
        call = {"name": tool.name, "args": args, "id": call_id(), "type": "tool_call"}
        return {"messages": [AIMessage("", tool_calls=[call])]}  # type: ignore[list-item]

    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_node("tools", ToolNode([tool]))
    builder.add_edge(START, "model")
    builder.add_edge("model", "tools")
    builder.add_edge("tools", END)
    return builder.compile(checkpointer=saver)


def fails_once_after(node: Any) -> Callable[..., Any]:
    """``node`` (a runnable such as a ``ToolNode``) as a graph node that raises
    ``RuntimeError("the step fails once, after its work")`` the first time, after ``node``
    ran: the next ``invoke(None)`` runs the step again from the same checkpoint, as a
    resume after a crash inside it does."""
    failed: list[int] = []

    def step(state: Any, config: RunnableConfig) -> Any:
        out = node.invoke(state, config)
        if not failed:
            failed.append(1)
            raise RuntimeError("the step fails once, after its work")
        return out

    return step

