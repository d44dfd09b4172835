"""A small app for the tool-ledger tests: two durable tools, a graph and an agent.

``charge`` has an effect on an "outside world" (tables in the test's schema that dedupe by
idempotency key, and log every attempt); ``lookup`` is read-only. Run as a script, it is
the process the crash tests kill::

    python -m tests.support.ledger_app SCHEMA PREFIX THREAD APP MODE SIGNAL_FILE

APP is ``graph`` (plan -> ToolNode([charge, lookup]) -> finish) or ``agent``
(``create_react_agent`` driven by `ScriptedChat`). MODE says where the process stops and
writes SIGNAL_FILE so the test can SIGKILL it: ``before_tools``, ``in_charge`` (after its
effect committed), ``in_lookup`` (after ``charge``'s outcome is recorded), or ``race``
(write SIGNAL_FILE.ready, call ``charge`` directly once SIGNAL_FILE.go exists, write
the result to SIGNAL_FILE, exit).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, TypedDict

import psycopg
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, create_react_agent

from langgraph_durable import DurableSaver, current_idempotency_key, durable_tool
from langgraph_durable.tools import DurableTool
from tests.support.servers import POSTGRES_URL, REDIS_URL

ORDER, CENTS = "order-7", 1250
CALLS = [
    {"name": "charge", "args": {"order_id": ORDER, "cents": CENTS}, "id": "call_charge",
     "type": "tool_call"},
    {"name": "lookup", "args": {"order_id": ORDER}, "id": "call_lookup", "type": "tool_call"},
]
LEASE = 1.0

OUTSIDE_SQL = """
CREATE TABLE IF NOT EXISTS "{schema}".charges (
    idem_key text PRIMARY KEY, thread_id text, order_id text, cents int);
CREATE TABLE IF NOT EXISTS "{schema}".attempts (
    id serial PRIMARY KEY, tool text, thread_id text, idem_key text);
"""


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


class ScriptedChat(BaseChatModel):
    """A chat model that asks for ``charge`` and ``lookup`` in parallel, then summarizes.

    Stateless (it reads the conversation), so a resumed process continues the same script.
    """

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        results = [m for m in messages if isinstance(m, ToolMessage)]
        if results:
            message = AIMessage("done: " + " | ".join(str(m.content) for m in results))
        else:
            message = AIMessage("", tool_calls=[dict(c) for c in CALLS])  # type: ignore[misc]
        return ChatResult(generations=[ChatGeneration(message=message)])

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChat:  # type: ignore[override]
        return self


def setup_outside(schema: str) -> None:
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(OUTSIDE_SQL.format(schema=schema))


def attempts(schema: str, thread_id: str, tool: str) -> list[str]:
    """The idempotency keys of every attempt ``tool`` made in a thread."""
    with psycopg.connect(POSTGRES_URL) as conn:
        rows = conn.execute(f'SELECT idem_key FROM "{schema}".attempts WHERE thread_id = %s '
                            "AND tool = %s ORDER BY id", (thread_id, tool)).fetchall()
    return [r[0] for r in rows]


def charges(schema: str, thread_id: str) -> int:
    """How many charges the outside world holds for a thread (deduped by key)."""
    with psycopg.connect(POSTGRES_URL) as conn:
        row = conn.execute(f'SELECT count(*) FROM "{schema}".charges WHERE thread_id = %s',
                           (thread_id,)).fetchone()
    return int(row[0]) if row else 0


def _signal(path: str) -> None:
    tmp = f"{path}.tmp"
    Path(tmp).write_text(str(os.getpid()))
    os.replace(tmp, path)


def _hang() -> None:
    while True:
        time.sleep(60)


def make_tools(saver: DurableSaver, schema: str, *, mode: str = "normal", signal: str = "",
               policy: str = "raise", slow: float = 0.0,
               wait: float | None = None) -> list[DurableTool]:
    """``charge`` with the given uncertain-call policy, and an idempotent ``lookup``."""

    def record(tool: str, thread_id: str, effect: tuple[str, int] | None) -> None:
        key = current_idempotency_key()
        with psycopg.connect(POSTGRES_URL) as conn:
            conn.execute(f'INSERT INTO "{schema}".attempts (tool, thread_id, idem_key) '
                         "VALUES (%s, %s, %s)", (tool, thread_id, key))
            if effect is not None:  # the outside world dedupes by idempotency key
                conn.execute(f'INSERT INTO "{schema}".charges VALUES (%s, %s, %s, %s) '
                             "ON CONFLICT (idem_key) DO NOTHING", (key, thread_id, *effect))

    def thread() -> str:
        from langgraph.config import get_config

        return str(get_config()["configurable"]["thread_id"])

    def wait_for(tool: str) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if any(r.tool == tool and r.status == "succeeded"
                   for r in saver.ledger.list(thread())):
                return
            time.sleep(0.02)
        raise TimeoutError(f"{tool} never succeeded")

    def verify(key: str, args: dict[str, Any]) -> bool:
        with psycopg.connect(POSTGRES_URL) as conn:
            return conn.execute(f'SELECT 1 FROM "{schema}".charges WHERE idem_key = %s',
                                (key,)).fetchone() is not None

    def charge(order_id: str, cents: int) -> str:
        """Charge a card for an order."""
        if mode == "in_charge":
            wait_for("lookup")
        time.sleep(slow)
        record("charge", thread(), (order_id, cents))
        if mode == "in_charge":
            _signal(signal)
            _hang()
        return f"charged {cents} cents for {order_id}"

    def lookup(order_id: str) -> str:
        """Look an order up."""
        record("lookup", thread(), None)
        if mode == "in_lookup":
            wait_for("charge")
            _signal(signal)
            _hang()
        return f"order {order_id} is paid"

    options: dict[str, Any] = {
        "raise": {}, "idempotent": {"idempotent": True}, "verify": {"verify": verify},
        "interrupt": {"on_uncertain": "interrupt"},
    }[policy]
    return [durable_tool(charge, saver=saver, lease=LEASE, wait=wait, **options),
            durable_tool(lookup, saver=saver, lease=LEASE, idempotent=True)]


def build_graph(saver: DurableSaver, tools: list[DurableTool]) -> Any:
    """plan -> ToolNode([charge, lookup]) -> finish."""

    def plan(state: State) -> dict[str, Any]:
        return {"messages": [AIMessage("", tool_calls=[dict(c) for c in CALLS])]}  # type: ignore[misc]

    def finish(state: State) -> dict[str, Any]:
        results = [m.content for m in state["messages"] if isinstance(m, ToolMessage)]
        return {"messages": [AIMessage(f"done: {results}")]}

    builder = StateGraph(State)
    builder.add_node("plan", plan)
    builder.add_node("tools", ToolNode(tools))
    builder.add_node("finish", finish)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "tools")
    builder.add_edge("tools", "finish")
    builder.add_edge("finish", END)
    return builder.compile(checkpointer=saver)


def build_agent(saver: DurableSaver, tools: list[DurableTool]) -> Any:
    """``create_react_agent`` with the scripted model."""
    return create_react_agent(ScriptedChat(), tools, checkpointer=saver)


BUILDERS: dict[str, Callable[[DurableSaver, list[DurableTool]], Any]] = {
    "graph": build_graph, "agent": build_agent}
START_INPUT = {"messages": [HumanMessage("charge order-7, then look it up")]}


def main(argv: list[str]) -> None:
    schema, prefix, thread_id, app, mode, signal = argv
    saver = DurableSaver(REDIS_URL, POSTGRES_URL, schema=schema, key_prefix=prefix)
    config = {"configurable": {"thread_id": thread_id}}
    if mode == "race":
        charge = make_tools(saver, schema, slow=1.0, wait=20.0)[0]
        go = Path(f"{signal}.go")
        _signal(f"{signal}.ready")
        while not go.exists():
            time.sleep(0.005)
        result = charge.invoke(CALLS[0], config)
        Path(signal).write_text(str(result.content))
        saver.close()
        return
    graph = BUILDERS[app](saver, make_tools(saver, schema, mode=mode, signal=signal))
    for _ in graph.stream(START_INPUT, config, durability="sync"):
        if mode == "before_tools":  # the first step (plan / the model) is checkpointed
            _signal(signal)
            _hang()
    raise SystemExit(f"mode {mode!r} ran to the end")


if __name__ == "__main__":
    main(sys.argv[1:])
