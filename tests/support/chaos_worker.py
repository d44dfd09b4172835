"""The workloads of the real-process chaos run (`tests/support/chaos.py`), and the worker that runs
one of them until it is killed.

- ``counter``: `tests.support.kill_worker`'s node that loops ``COUNTER_STEPS`` times, one
  checkpoint per step.
- ``supervisor``: a supervisor that hands ``ITEMS_PER_ROUND`` orders per round, for
  ``ROUNDS`` rounds, to worker agents that run in parallel on LangGraph's task threads. Each
  worker agent is a subgraph (its own checkpoint namespace): a scripted model asks for the
  durable tool ``ship(item)`` under a new random tool-call id each time it is asked (as a
  real model does), a ``ToolNode`` runs it, and the model reads the answer; an error shown
  to it (``handle_tool_errors=True``) makes it ask again, in the next step, under a new id.

The provider is outside the saver (tables at ``outside_url``): ``chaos_effects`` logs every
request it receives with the order it was asked to act on (the item: each intended effect
has its own) and the idempotency key; ``chaos_shipments`` holds one shipment per key, which
is how an idempotent provider dedupes. ``chaos_model_calls`` logs each answer of the model.

Each thread runs under `Options` the harness draws: LangGraph's durability (``sync``,
``async``, ``exit``); the driver (``invoke``, or ``ainvoke`` cancelled at random points and
resumed in the same process: timeouts, and cancellations the moment a ``ship`` call started,
while the blocking tool runs in the event loop's executor); the tool's policy (``verify``:
the provider does not dedupe and ``verify=`` asks it; ``idempotent``: ``idempotent=True``
and the provider dedupes by key); ``handle_tool_errors``; and whether the model's answers
go through `durable_model`.

A worker appends ``ack <namespace> <checkpoint id>`` to its ack file after each ``put``
returned, with one ``os.write`` on an ``O_APPEND`` descriptor, so a line is either whole
or absent whenever the process is killed; ``fault <kind>`` for each cancellation it made,
and ``warned exit-durability`` when the ledger warned that durability "exit" leaves the
decision of a call unsaved.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import gc
import inspect
import logging
import operator
import os
import random
import signal
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Annotated, Any, TypedDict

import psycopg
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode
from langgraph.types import Send

import langgraph_durable
from langgraph_durable import DurableSaver, current_idempotency_key, durable_tool
from langgraph_durable.models import durable_model
from langgraph_durable.tools import DurableTool
from tests.support.kill_worker import build as counter_graph

COUNTER_STEPS = 40
ROUNDS, ITEMS_PER_ROUND = 3, 3
TOOL_LEASE = 1.0
SHIP_REPLY = 0.05  # seconds between ship's effect and its return

EFFECTS_SQL = """
CREATE TABLE IF NOT EXISTS "{schema}".chaos_shipments (
    idem_key text PRIMARY KEY, thread_id text, item text);
CREATE TABLE IF NOT EXISTS "{schema}".chaos_effects (
    id serial PRIMARY KEY, thread_id text, item text, idem_key text);
CREATE TABLE IF NOT EXISTS "{schema}".chaos_model_calls (
    id serial PRIMARY KEY, thread_id text, item text);
"""


@dataclass(frozen=True)
class Options:
    """How one thread runs (see the module docstring); a dict of these travels in the spec."""

    durability: str = "sync"
    driver: str = "sync"  # "sync": invoke; "async": ainvoke, cancelled and resumed
    cancels: int = 0  # the async driver's cancellations before it lets the run end
    aim: float = 0.75  # the share of a supervisor's cancellations aimed at a running tool
    tool: str = "verify"  # "verify" or "idempotent"
    handle_errors: bool = False
    durable_model: bool = False
    seed: int = 0

    def spec(self) -> dict[str, Any]:
        return asdict(self)


class Supervision(TypedDict):
    round: int
    done: Annotated[list[str], operator.add]


class Assignment(TypedDict):
    item: str


class AgentState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def items() -> list[str]:
    """Every order a supervisor thread ships, once each."""
    return [f"r{r}-i{i}" for r in range(ROUNDS) for i in range(ITEMS_PER_ROUND)]


class InFlight:
    """How many ``ship`` calls run in this process now (the canceller aims at them)."""

    lock = threading.Lock()
    count = 0

    @classmethod
    @contextlib.contextmanager
    def call(cls) -> Any:
        with cls.lock:
            cls.count += 1
        try:
            yield
        finally:
            with cls.lock:
                cls.count -= 1


def ship_tool(saver: DurableSaver, schema: str, outside_url: str, thread_id: str,
              policy: str = "verify") -> DurableTool:
    """``ship(item)``: a request to the provider at ``outside_url``, logged per request with
    the order and the key, one shipment per key. ``policy``: ``verify`` (``verify=`` asks
    the provider after a crash) or ``idempotent`` (``idempotent=True``: a retry presents
    the same key, which the provider dedupes)."""

    def ship(item: str) -> str:
        """Ship an item."""
        key = current_idempotency_key()
        with InFlight.call():
            with psycopg.connect(outside_url) as conn:  # effect and log in one transaction
                conn.execute(f'INSERT INTO "{schema}".chaos_effects (thread_id, item, idem_key) '
                             "VALUES (%s, %s, %s)", (thread_id, item, key))
                conn.execute(f'INSERT INTO "{schema}".chaos_shipments VALUES (%s, %s, %s) '
                             "ON CONFLICT (idem_key) DO NOTHING", (key, thread_id, item))
            time.sleep(SHIP_REPLY)  # the provider's answer takes a moment: faults land here too
        return f"shipped {item}"

    def shipped(key: str, args: dict[str, Any]) -> tuple[str, str] | bool:
        """After a crash mid-call: whether the shipment happened, with its receipt."""
        with psycopg.connect(outside_url) as conn:
            found = conn.execute(f'SELECT 1 FROM "{schema}".chaos_shipments '
                                 "WHERE idem_key = %s", (key,)).fetchone() is not None
        return ("succeeded", f"shipped {args['item']}") if found else False

    # orders are never meant to ship twice: a probable duplicate replays (docs/tool-ledger.md)
    common: dict[str, Any] = {"saver": saver, "lease": TOOL_LEASE, "wait": TOOL_LEASE * 10,
                              "on_duplicate": "replay"}
    if policy == "idempotent":
        return durable_tool(ship, idempotent=True, **common)
    return durable_tool(ship, verify=shipped, **common)


class ScriptedModel(BaseChatModel):
    """Asks for ``ship`` of the order in the first message, under a new random tool-call id
    each time it is asked, until a tool message says it shipped; logs each answer."""

    tables: str  # the schema of the outside tables
    outside_url: str
    thread_id: str

    @property
    def _llm_type(self) -> str:
        return "chaos-scripted"

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        item = str(messages[0].content).removeprefix("ship ")
        with psycopg.connect(self.outside_url) as conn:
            conn.execute(f'INSERT INTO "{self.tables}".chaos_model_calls (thread_id, item) '
                         "VALUES (%s, %s)", (self.thread_id, item))
        last = messages[-1]
        if isinstance(last, ToolMessage) and last.status != "error":
            reply = AIMessage(f"done: {last.content}")
        else:
            reply = AIMessage("", tool_calls=[{
                "name": "ship", "args": {"item": item}, "type": "tool_call",
                "id": f"ship-{item}-{uuid.uuid4().hex[:8]}"}])
        return ChatResult(generations=[ChatGeneration(message=reply)])


def supervisor_graph(saver: DurableSaver, ship: DurableTool, model: Any,
                     handle_errors: bool) -> Any:
    """supervisor -> Send(worker agent) per order, in parallel -> supervisor, ROUNDS times.

    The worker agent is a compiled subgraph (model -> tools -> model) invoked from the
    ``worker`` node, so each runs in its own namespace on its own task thread. Its nodes
    run under ``invoke`` and ``ainvoke`` alike.
    """

    def ask(state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"], config)]}

    async def aask(state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"], config)]}

    def route(state: AgentState) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    agent = StateGraph(AgentState)
    agent.add_node("model", RunnableLambda(ask, afunc=aask))
    agent.add_node("tools", ToolNode([ship], handle_tool_errors=handle_errors))
    agent.add_edge(START, "model")
    agent.add_conditional_edges("model", route, ["tools", END])
    agent.add_edge("tools", "model")
    worker_agent = agent.compile()

    def supervisor(state: Supervision) -> dict[str, Any]:
        return {"round": state["round"] + 1}

    def assign(state: Supervision) -> Any:
        if state["round"] > ROUNDS:
            return END
        r = state["round"] - 1
        return [Send("worker", {"item": f"r{r}-i{i}"}) for i in range(ITEMS_PER_ROUND)]

    def delivered(assignment: Assignment, out: dict[str, Any]) -> dict[str, Any]:
        answer = out["messages"][-1].content
        assert answer == f"done: shipped {assignment['item']}", answer
        return {"done": [assignment["item"]]}

    def worker(assignment: Assignment) -> dict[str, Any]:
        return delivered(assignment, worker_agent.invoke(
            {"messages": [HumanMessage(f"ship {assignment['item']}")]}))

    async def aworker(assignment: Assignment) -> dict[str, Any]:
        return delivered(assignment, await worker_agent.ainvoke(
            {"messages": [HumanMessage(f"ship {assignment['item']}")]}))

    builder = StateGraph(Supervision)
    builder.add_node("supervisor", supervisor)
    builder.add_node("worker", RunnableLambda(worker, afunc=aworker))
    builder.add_edge(START, "supervisor")
    builder.add_conditional_edges("supervisor", assign, ["worker", END])
    builder.add_edge("worker", "supervisor")
    return builder.compile(checkpointer=saver)


WORKLOADS = ("counter", "supervisor")
INPUTS: dict[str, dict[str, Any]] = {
    "counter": {"count": 0, "trail": []},
    "supervisor": {"round": 0, "done": []},
}


def build(workload: str, saver: DurableSaver, schema: str, outside_url: str,
          thread_id: str, options: Options | None = None) -> Any:
    """The compiled graph of ``workload`` on ``saver``, run under ``options``."""
    if workload == "counter":
        return counter_graph(saver, COUNTER_STEPS)
    o = options or Options()
    model: Any = ScriptedModel(tables=schema, outside_url=outside_url, thread_id=thread_id)
    if o.durable_model:
        model = durable_model(model, name="chaos-scripted")
    return supervisor_graph(saver, ship_tool(saver, schema, outside_url, thread_id, o.tool),
                            model, o.handle_errors)


def finished(workload: str, values: dict[str, Any]) -> bool:
    """Whether a thread's final state is the one a run without faults ends in."""
    if workload == "counter":
        return bool(values.get("count") == COUNTER_STEPS
                    and values.get("trail") == list(range(1, COUNTER_STEPS + 1)))
    return sorted(values.get("done", [])) == sorted(items())


class ReportingSaver(DurableSaver):
    """Appends each checkpoint to the ack file once ``put`` (or ``aput``) returned."""

    ack_fd = -1

    def _ack(self, config: Any) -> Any:
        conf = config["configurable"]
        os.write(self.ack_fd, f"ack {conf.get('checkpoint_ns', '')} "
                              f"{conf['checkpoint_id']}\n".encode())
        return config

    def put(self, *args: Any, **kwargs: Any) -> Any:
        return self._ack(super().put(*args, **kwargs))

    async def aput(self, *args: Any, **kwargs: Any) -> Any:
        return self._ack(await super().aput(*args, **kwargs))


class _ExitWarning(logging.Handler):
    """Writes ``warned exit-durability`` to the ack file when the ledger says durability
    "exit" leaves a call's decision unsaved."""

    def __init__(self, fd: int) -> None:
        super().__init__(logging.WARNING)
        self.fd = fd

    def emit(self, record: logging.LogRecord) -> None:
        if "durability='exit'" in record.getMessage():
            os.write(self.fd, b"warned exit-durability\n")


def run(spec: dict[str, Any]) -> None:
    """Run one workload on one thread until it ends (or the process is killed).

    ``spec``: workload, write_mode, redis_url, postgres_url, outside_url, schema, prefix,
    thread_id, ack_path, options (`Options` as a dict). An exception ends the process with
    ``error <type>`` in the ack file (a write that met a fault), not a traceback.
    """
    fd = os.open(spec["ack_path"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    logger = logging.getLogger("langgraph_durable")
    logger.addHandler(_ExitWarning(fd))
    said = logging.FileHandler(spec["ack_path"] + ".log")  # shown when the worker hangs
    said.setFormatter(logging.Formatter("%(asctime)s %(threadName)s %(levelname)s %(message)s"))
    said.setLevel(logging.DEBUG)
    logger.addHandler(said)
    logger.setLevel(logging.DEBUG)
    # SIGUSR1: every thread's stack to <ack file>.stacks (the harness asks a stuck worker)
    stacks = open(spec["ack_path"] + ".stacks", "w")  # noqa: SIM115 (open until the exit)
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    signal.signal(signal.SIGUSR2, lambda *_: _suspended_operations(spec["ack_path"] + ".ops"))
    try:
        _run(spec, fd)
    except Exception as exc:  # reported to the harness, which classifies it
        os.write(fd, f"error {type(exc).__name__} {str(exc)[:200]!r}\n".encode())
        os._exit(1)


def _suspended_operations(path: str) -> None:
    """Where each of the saver's operations waits (SIGUSR2, asked of a stuck worker): a
    thread's stack shows the driver that sleeps, not the suspended generator that asked it
    to, so every suspended generator of the package is written with its line."""
    package = os.path.dirname(langgraph_durable.__file__)
    lines = []
    for obj in gc.get_objects():
        if inspect.isgenerator(obj) and obj.gi_frame is not None \
                and obj.gi_code.co_filename.startswith(package):
            lines.append(f"{obj.gi_code.co_qualname} "
                         f"{os.path.relpath(obj.gi_code.co_filename, package)}:"
                         f"{obj.gi_frame.f_lineno}")
    with open(path, "w") as out:
        out.write("\n".join(sorted(lines)) + "\n")


def _run(spec: dict[str, Any], fd: int) -> None:
    saver = ReportingSaver(spec["redis_url"], spec["postgres_url"], schema=spec["schema"],
                           key_prefix=spec["prefix"], write_mode=spec["write_mode"],
                           breaker_cooldown=0.2, pool_timeout=5.0)
    saver.ack_fd = fd
    options = Options(**spec.get("options", {}))
    graph = build(spec["workload"], saver, spec["schema"], spec["outside_url"],
                  spec["thread_id"], options)
    config: RunnableConfig = {"configurable": {"thread_id": spec["thread_id"]},
                              "recursion_limit": 1000}
    if options.driver == "async":
        asyncio.run(_cancelled_and_resumed(graph, config, spec["workload"], options, fd))
    else:
        graph.invoke(INPUTS[spec["workload"]], config,
                     durability=options.durability)
    saver.close()


async def _cancelled_and_resumed(graph: Any, config: RunnableConfig, workload: str,
                                 options: Options, fd: int) -> None:
    """``ainvoke``, cancelled ``options.cancels`` times at random points and resumed each
    time in this process (as a server whose request timed out would), then run to its end.

    A cancellation is a timeout (``asyncio.wait_for``-style: after a random delay, wherever
    the run is), or aimed at a tool: the moment a ``ship`` call started, plus a random part
    of its reply time, while the blocking tool runs in the event loop's executor. Each is
    reported as ``fault cancel-mid-tool`` (a ship call was running) or ``fault cancel``.
    """
    rng = random.Random(options.seed)
    for n in range(options.cancels + 1):
        state = await graph.aget_state(config)
        task = asyncio.ensure_future(graph.ainvoke(
            None if state.created_at else INPUTS[workload], config,
            durability=options.durability))
        if n == options.cancels:
            await task
            return
        if workload == "supervisor" and rng.random() < options.aim:  # aimed at a tool call
            while InFlight.count == 0 and not task.done():
                await asyncio.sleep(0.001)
            await asyncio.sleep(rng.uniform(0, SHIP_REPLY))
        else:
            await asyncio.wait({task}, timeout=rng.uniform(0.01, 0.4))
        if task.done():
            task.result()
            return
        mid_tool = InFlight.count > 0
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        os.write(fd, b"fault cancel-mid-tool\n" if mid_tool else b"fault cancel\n")
