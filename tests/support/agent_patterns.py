"""Ordinary agent shapes, each runnable twice: with plain tools on any checkpointer (the
reference: LangGraph's ``InMemorySaver``) and with durable tools (or a durable model) on a
`DurableSaver`, for the differential suite (``tests/ledger/test_agent_patterns.py``).

A pattern is a function ``pattern(saver, durable) -> run`` that builds its graph once;
``run(thread_id)`` plays the whole conversation on a new thread. Effects are counted
outside any saver, in a process-global counter keyed by thread and effect (`record`,
`effects`): a replayed durable call does not reach the tool's body, so the counter sees
exactly the effects that happened. The fake model (`ShopModel`) mints a new random
tool-call id on every answer, as real models do, and counts its own calls.
"""

from __future__ import annotations

import asyncio
import operator
import random
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any, Protocol, TypedDict

from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import BaseTool
from langchain_core.tools import tool as as_tool
from langgraph.config import get_config
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, Send, interrupt

from langgraph_durable import ToolCallError, current_idempotency_key, durable_tool
from langgraph_durable.middleware import DurableMiddleware
from langgraph_durable.models import durable_model

Run = Callable[[str], object]
ARun = Callable[[str], Awaitable[object]]
Pattern = Callable[[Any, bool], Run]
APattern = Callable[[Any, bool], ARun]

APPLE = "cart:apple"
"""The effect of ``add_to_cart(item="apple")``."""
MODEL = "model"
"""The effect of one call of a fake model."""
EFFECT_TIME = 0.02
"""A tool's effect takes up to this many seconds (at random), so that two concurrent calls
sometimes overlap and sometimes do not."""

_EFFECTS: Counter[tuple[str, str]] = Counter()
_KEYS: dict[str, list[str]] = defaultdict(list)
_LOCK = threading.Lock()


class Outside(Protocol):
    """A store of effects outside this process (a provider's own table), for runs that span
    processes (`tests/support/killed_patterns_worker.py`)."""

    def record(self, thread_id: str, effect: str, key: str | None) -> None:
        """Store one effect (under its idempotency key, if any)."""

    def happened(self, key: str) -> bool:
        """Whether an effect happened under ``key``."""


_OUTSIDE: list[Outside] = []


def count_outside(store: Outside | None) -> None:
    """From now on, also store every effect in ``store`` and answer `happened` from it
    (``None``: count in this process only)."""
    _OUTSIDE[:] = [] if store is None else [store]


def record(effect: str) -> None:
    """Count one ``effect`` on the thread of the running graph, and the idempotency key it
    happened under when it happened in a durable call (a provider that dedupes by key
    would absorb a second effect under one key: the durable tool dropped a call)."""
    thread = str(get_config()["configurable"]["thread_id"])
    try:
        key: str | None = current_idempotency_key()
    except ToolCallError:
        key = None
    with _LOCK:
        _EFFECTS[(thread, effect)] += 1
        if key is not None:
            _KEYS[thread].append(key)
    for store in list(_OUTSIDE):
        store.record(thread, effect, key)


def happened(key: str, args: Any) -> bool:
    """A ``verify=`` that asks the outside world whether an effect happened under ``key``
    (``False``: it did not, run it again)."""
    for store in list(_OUTSIDE):
        return store.happened(key)
    with _LOCK:
        return any(key in keys for keys in _KEYS.values())


def repeated_keys(thread_id: str) -> int:
    """How many idempotency keys of ``thread_id`` were used for more than one effect."""
    with _LOCK:
        keys = Counter(_KEYS[thread_id])
    return sum(1 for n in keys.values() if n > 1)


def effects(thread_id: str, effect: str = APPLE) -> int:
    """How many times ``effect`` happened on ``thread_id``."""
    with _LOCK:
        return _EFFECTS[(thread_id, effect)]


def config(thread_id: str, **extra: Any) -> Any:
    """A run's config on ``thread_id``."""
    return {"configurable": {"thread_id": thread_id, **extra}}


def ask(request: str) -> Any:
    """A turn's input: one user message."""
    return {"messages": [HumanMessage(request)]}


class ShopModel(BaseChatModel):
    """A chat model that reads the last message: after a user's ``"add ITEM"`` it asks for
    ``add_to_cart(item=ITEM)`` (``"add ITEM x2"``: two such calls in one message, as a
    model asking for two of a thing does), each under a new random id; after tool results,
    or anything else, it answers in words. Each call is counted as the `MODEL` effect."""

    @property
    def _llm_type(self) -> str:
        return "shop"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ShopModel:
        return self

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        record(MODEL)
        last = messages[-1]
        text = str(last.content)
        if isinstance(last, HumanMessage) and text.startswith("add "):
            item, _, times = text.removeprefix("add ").partition(" x")
            calls = [{"name": "add_to_cart", "args": {"item": item},
                      "id": f"call_{uuid.uuid4().hex[:24]}", "type": "tool_call"}
                     for _ in range(int(times or 1))]
            reply = AIMessage("", tool_calls=calls)
        elif isinstance(last, ToolMessage):
            reply = AIMessage(f"done: {last.content}")
        else:
            reply = AIMessage(f"noted ({uuid.uuid4().hex[:8]})")
        return ChatResult(generations=[ChatGeneration(message=reply)])


def add_to_cart(durable: bool, flavour: str = "sync", **options: Any) -> BaseTool:
    """The shop's ``add_to_cart(item)`` tool (a sync or async function), counting its
    effect; made durable (the graph's saver, `durable_tool` ``options``) when ``durable``."""
    if flavour == "sync":
        def add(item: str) -> str:
            """Add one item to the shopping cart."""
            time.sleep(random.uniform(0, EFFECT_TIME))
            record(f"cart:{item}")
            return f"added {item}"
    else:
        async def add(item: str) -> str:  # type: ignore[misc]
            """Add one item to the shopping cart."""
            await asyncio.sleep(random.uniform(0, EFFECT_TIME))
            record(f"cart:{item}")
            return f"added {item}"
    plain = as_tool("add_to_cart")(add)
    return durable_tool(plain, **options) if durable else plain


def agent(saver: Any, durable: bool, *, middleware: bool = False, flavour: str = "sync",
          **options: Any) -> Any:
    """A ``create_agent`` shop agent on ``saver`` (``None``: a subgraph using its parent's):
    durable tools (with ``options``), or with ``middleware`` plain tools made durable by
    `DurableMiddleware`."""
    wrapped = durable and middleware
    tools = [add_to_cart(durable and not middleware, flavour, **options)]
    return create_agent(ShopModel(), tools, checkpointer=saver,
                        middleware=[DurableMiddleware()] if wrapped else [])


# ------------------------------------------------------------------------------ patterns


def sub_agent_graph(saver: Any, durable: bool, **options: Any) -> Any:
    """A parent graph whose one node ``shop`` is a ``create_agent`` shop agent (a subgraph
    on the parent's saver; durable tools with ``options``)."""
    parent = StateGraph(MessagesState)
    parent.add_node("shop", agent(None, durable, **options))
    parent.add_edge(START, "shop")
    parent.add_edge("shop", END)
    return parent.compile(checkpointer=saver)


def sub_agent_two_turns(saver: Any, durable: bool) -> Run:
    """A ``create_agent`` agent as the node of a parent graph, asked in two turns to add
    an apple."""
    graph = sub_agent_graph(saver, durable)

    def run(thread_id: str) -> None:
        for _ in range(2):
            graph.invoke(ask("add apple"), config(thread_id))

    return run


def root_agent_two_turns(saver: Any, durable: bool) -> Run:
    """A root ``create_agent`` agent asked in two turns to add an apple."""
    graph = agent(saver, durable)

    def run(thread_id: str) -> None:
        for _ in range(2):
            graph.invoke(ask("add apple"), config(thread_id))

    return run


class Order(TypedDict):
    lines: list[str]


def order_lines_graph(saver: Any, durable: bool, **options: Any) -> Any:
    """A graph whose node ``checkout`` calls the tool (durable with ``options``) once per
    order line, ``tool.invoke`` in the node (no tool-call id)."""
    tool = add_to_cart(durable, **options)

    def checkout(state: Order) -> dict[str, Any]:
        for line in state["lines"]:
            tool.invoke({"item": line})
        return {}

    builder = StateGraph(Order)
    builder.add_node("checkout", checkout)
    builder.add_edge(START, "checkout")
    builder.add_edge("checkout", END)
    return builder.compile(checkpointer=saver)


def order_lines_loop(saver: Any, durable: bool) -> Run:
    """A node that calls the tool once per order line (``tool.invoke`` in the node, no
    tool-call id), with two equal lines."""
    graph = order_lines_graph(saver, durable)
    return lambda thread_id: graph.invoke({"lines": ["apple", "apple"]}, config(thread_id))


class Basket(TypedDict):
    items: list[str]
    added: Annotated[list[str], operator.add]


def fan_out_graph(saver: Any, durable: bool, flavour: str = "sync", **options: Any) -> Any:
    """A graph that sends each of its ``items`` to a task of node ``add`` (``Send``), which
    adds it with the tool (``flavour``; durable with ``options``)."""
    tool = add_to_cart(durable, flavour, **options)

    def route(state: Basket) -> list[Send]:
        return [Send("add", {"items": [item], "added": []}) for item in state["items"]]

    def add(state: Basket) -> dict[str, Any]:
        return {"added": [str(tool.invoke({"item": state["items"][0]}))]}

    async def aadd(state: Basket) -> dict[str, Any]:
        return {"added": [str(await tool.ainvoke({"item": state["items"][0]}))]}

    builder = StateGraph(Basket)
    builder.add_node("add", add if flavour == "sync" else aadd)
    builder.add_conditional_edges(START, route, ["add"])
    builder.add_edge("add", END)
    return builder.compile(checkpointer=saver)


def send_fan_out(saver: Any, durable: bool) -> Run:
    """A ``Send`` fan-out: two parallel tasks of one step, each adding an apple."""
    graph = fan_out_graph(saver, durable, "sync")
    return lambda thread_id: graph.invoke({"items": ["apple", "apple"]}, config(thread_id))


def asend_fan_out(saver: Any, durable: bool) -> ARun:
    """`send_fan_out` with an async node and tool, under ``ainvoke``."""
    graph = fan_out_graph(saver, durable, "async")

    async def run(thread_id: str) -> None:
        await graph.ainvoke({"items": ["apple", "apple"]}, config(thread_id))

    return run


def two_calls_agent(saver: Any, durable: bool) -> Run:
    """``create_agent`` with durable tools; the model asks for two apples as two equal
    tool calls in one message."""
    graph = agent(saver, durable)
    return lambda thread_id: graph.invoke(ask("add apple x2"), config(thread_id))


def two_calls_idempotent(saver: Any, durable: bool) -> Run:
    """`two_calls_agent` with ``durable_tool(idempotent=True)``: an uncertain call is retried
    under its key."""
    graph = agent(saver, durable, idempotent=True)
    return lambda thread_id: graph.invoke(ask("add apple x2"), config(thread_id))


def two_calls_verified(saver: Any, durable: bool) -> Run:
    """`two_calls_agent` with ``durable_tool(verify=happened)``: an uncertain call asks the
    outside world whether it happened."""
    graph = agent(saver, durable, verify=happened)
    return lambda thread_id: graph.invoke(ask("add apple x2"), config(thread_id))


def atwo_calls_agent(saver: Any, durable: bool) -> ARun:
    """`two_calls_agent` with an async tool, under ``ainvoke``."""
    graph = agent(saver, durable, flavour="async")

    async def run(thread_id: str) -> None:
        await graph.ainvoke(ask("add apple x2"), config(thread_id))

    return run


def two_calls_middleware(saver: Any, durable: bool) -> Run:
    """`two_calls_agent` with plain tools made durable by `DurableMiddleware`."""
    graph = agent(saver, durable, middleware=True)
    return lambda thread_id: graph.invoke(ask("add apple x2"), config(thread_id))


def _tool_node_graph(saver: Any, tools: list[BaseTool],
                     before_tools: Any = None) -> Any:
    """model -> (tools_condition) -> [approve ->] ToolNode -> model: the classic loop."""
    model = ShopModel()

    def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", call_model)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "model")
    if before_tools is None:
        builder.add_conditional_edges("model", tools_condition)
    else:
        builder.add_node("approve", before_tools)
        builder.add_conditional_edges("model", tools_condition, {"tools": "approve", END: END})
        builder.add_edge("approve", "tools")
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=saver)


def two_calls_tool_node(saver: Any, durable: bool) -> Run:
    """A hand-built model -> ``ToolNode`` graph with durable tools; the model asks for two
    apples as two equal tool calls in one message (one task runs both)."""
    graph = _tool_node_graph(saver, [add_to_cart(durable)])
    return lambda thread_id: graph.invoke(ask("add apple x2"), config(thread_id))


def model_sampled_twice(saver: Any, durable: bool) -> Run:
    """A node that asks its model twice with the same input (two drafts); the model is
    `durable_model` when ``durable``. The effect counted is `MODEL`."""
    model = ShopModel()
    ask_model = durable_model(model) if durable else model

    def drafts(state: MessagesState) -> dict[str, Any]:
        first = ask_model.invoke(state["messages"])
        second = ask_model.invoke(state["messages"])
        return {"messages": [first, second]}

    builder = StateGraph(MessagesState)
    builder.add_node("drafts", drafts)
    builder.add_edge(START, "drafts")
    builder.add_edge("drafts", END)
    graph = builder.compile(checkpointer=saver)
    return lambda thread_id: graph.invoke(ask("write a haiku"), config(thread_id))


def reused_thread(keep_ledger: bool) -> Pattern:
    """A root agent asked to add an apple; the thread deleted (with ``keep_ledger`` on a
    durable saver); the same conversation again on the same thread id."""
    def pattern(saver: Any, durable: bool) -> Run:
        graph = agent(saver, durable)

        def run(thread_id: str) -> None:
            graph.invoke(ask("add apple"), config(thread_id))
            if durable:
                saver.delete_thread(thread_id, keep_ledger=keep_ledger)
            else:
                saver.delete_thread(thread_id)
            graph.invoke(ask("add apple"), config(thread_id))

        return run

    pattern.__doc__ = reused_thread.__doc__
    pattern.__name__ = f"reused_thread(keep_ledger={keep_ledger!r})"
    return pattern


def _first_before(graph: Any, thread_id: str, node: str) -> Any:
    """The thread's first checkpoint whose next step runs ``node``."""
    history = list(graph.get_state_history(config(thread_id)))
    return next(s for s in reversed(history) if s.next == (node,))


def time_travel_fork(at: str) -> Pattern:
    """A root agent adds an apple; the user then replays the thread from the checkpoint
    before the step of node ``at`` (``invoke(None, {... "checkpoint_id": ...})``):
    LangGraph forks there and runs the steps after it again (``"model"``: the model asks
    again under a new tool-call id; ``"tools"``: the recorded tool call runs again)."""
    def pattern(saver: Any, durable: bool) -> Run:
        graph = agent(saver, durable)

        def run(thread_id: str) -> None:
            graph.invoke(ask("add apple"), config(thread_id))
            graph.invoke(None, _first_before(graph, thread_id, at).config)

        return run

    pattern.__doc__ = time_travel_fork.__doc__
    pattern.__name__ = f"time_travel_fork(at={at!r})"
    return pattern


def update_state_fork(at: str) -> Pattern:
    """A root agent adds an apple; the user then edits the state at the checkpoint before
    the step of node ``at`` with ``update_state`` and runs the fork: ``"model"``: the
    request asked again in the same words; ``"tools"``: the model's tool call edited to a
    pear, keeping its id (as a human edits a call). Count `APPLE` and ``"cart:pear"``."""
    def pattern(saver: Any, durable: bool) -> Run:
        graph = agent(saver, durable)

        def run(thread_id: str) -> None:
            graph.invoke(ask("add apple"), config(thread_id))
            earlier = _first_before(graph, thread_id, at)
            last = earlier.values["messages"][-1]
            if at == "model":
                edited: BaseMessage = HumanMessage("add apple", id=last.id)
            else:
                calls = [{**call, "args": {"item": "pear"}} for call in last.tool_calls]
                edited = AIMessage("", tool_calls=calls, id=last.id)
            graph.invoke(None, graph.update_state(earlier.config, {"messages": [edited]}))

        return run

    pattern.__doc__ = update_state_fork.__doc__
    pattern.__name__ = f"update_state_fork(at={at!r})"
    return pattern


def approve(state: Any) -> Any:
    """A human approves the tool calls before they run (``interrupt``)."""
    if interrupt({"approve": state["messages"][-1].tool_calls}) != "yes":
        return Command(goto=END)
    return {}


def interrupt_and_resume(saver: Any, durable: bool) -> Run:
    """A model -> approve (``interrupt``) -> ``ToolNode`` graph: two turns, each asking for
    an apple, paused for approval and resumed with ``Command(resume="yes")``."""
    graph = _tool_node_graph(saver, [add_to_cart(durable)], before_tools=approve)

    def run(thread_id: str) -> None:
        for _ in range(2):
            paused = graph.invoke(ask("add apple"), config(thread_id))
            if "__interrupt__" not in paused:
                raise AssertionError("the tool call ran without asking for approval")
            graph.invoke(Command(resume="yes"), config(thread_id))

    return run


# --------------------------------------------------------------------------------- runs


def _outcome(thread_id: str, effect: str, error: Exception | None) -> int | str:
    if error is not None:
        return f"{type(error).__name__}: {str(error)[:60]}"
    repeated = repeated_keys(thread_id)
    if repeated:
        return f"{effects(thread_id, effect)}, {repeated} key(s) used for two effects"
    return effects(thread_id, effect)


def counts(pattern: Pattern, saver: Any, durable: bool, *, runs: int = 1,
           effect: str = APPLE) -> list[int | str]:
    """Run ``pattern`` ``runs`` times, each on a new thread: each run's count of
    ``effect``, or the error that ended it."""
    run, out = pattern(saver, durable), []
    for _ in range(runs):
        thread_id, error = uuid.uuid4().hex, None
        try:
            run(thread_id)
        except Exception as exc:
            error = exc
        out.append(_outcome(thread_id, effect, error))
    return out


async def acounts(pattern: APattern, saver: Any, durable: bool, *, runs: int = 1,
                  effect: str = APPLE) -> list[int | str]:
    """Async twin of `counts` (the runs one after another)."""
    run, out = pattern(saver, durable), []
    for _ in range(runs):
        thread_id, error = uuid.uuid4().hex, None
        try:
            await run(thread_id)
        except Exception as exc:
            error = exc
        out.append(_outcome(thread_id, effect, error))
    return out
