"""The workloads of the real-process chaos run (`tests/chaos.py`), and the worker that runs
one of them until it is killed.

- ``counter``: `tests.kill_worker`'s node that loops ``COUNTER_STEPS`` times, one
  checkpoint per step.
- ``supervisor``: a supervisor that hands ``ITEMS_PER_ROUND`` items per round, for
  ``ROUNDS`` rounds, to worker agents that run in parallel on LangGraph's task threads; each
  worker agent is a subgraph (its own checkpoint namespace) that calls the durable tool
  ``ship``, whose side effect lands in an outside table keyed by idempotency key and is
  logged once per execution, with the item (the logical call), in ``chaos_effects``. Each
  time the agent asks for ``ship`` it gives the call a new random tool-call id, as a model
  asked again does, so a call re-run after a kill comes under a new key.

A worker appends ``ack <namespace> <checkpoint id>`` to its ack file after each ``put``
returned, with one ``os.write`` on an ``O_APPEND`` descriptor, so a line is either whole
or absent whenever the process is killed.
"""

from __future__ import annotations

import operator
import os
import time
import uuid
from typing import Annotated, Any, TypedDict

import psycopg
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from langgraph_durable import DurableSaver, current_idempotency_key, durable_tool
from langgraph_durable.tools import DurableTool
from tests.kill_worker import build as counter_graph

COUNTER_STEPS = 40
ROUNDS, ITEMS_PER_ROUND = 3, 3
TOOL_LEASE = 1.0
SHIP_REPLY = 0.05  # seconds between ship's effect and its return

EFFECTS_SQL = """
CREATE TABLE IF NOT EXISTS "{schema}".chaos_shipments (
    idem_key text PRIMARY KEY, thread_id text, item text);
CREATE TABLE IF NOT EXISTS "{schema}".chaos_effects (
    id serial PRIMARY KEY, thread_id text, item text, idem_key text);
"""


class Supervision(TypedDict):
    round: int
    done: Annotated[list[str], operator.add]


class Assignment(TypedDict):
    item: str


class WorkerState(TypedDict):
    item: str
    notes: Annotated[list[str], operator.add]
    receipt: str


def items() -> list[str]:
    """Every item a supervisor thread ships, once each."""
    return [f"r{r}-i{i}" for r in range(ROUNDS) for i in range(ITEMS_PER_ROUND)]


def ship_tool(saver: DurableSaver, schema: str, outside_url: str,
              thread_id: str) -> DurableTool:
    """``ship(item)``: one outside effect per idempotency key, logged per execution, in
    tables of the "outside world" at ``outside_url``."""

    def ship(item: str) -> str:
        """Ship an item."""
        key = current_idempotency_key()
        with psycopg.connect(outside_url) as conn:  # effect and log in one transaction
            conn.execute(f'INSERT INTO "{schema}".chaos_effects (thread_id, item, idem_key) '
                         "VALUES (%s, %s, %s)", (thread_id, item, key))
            conn.execute(f'INSERT INTO "{schema}".chaos_shipments VALUES (%s, %s, %s) '
                         "ON CONFLICT (idem_key) DO NOTHING", (key, thread_id, item))
        time.sleep(SHIP_REPLY)  # the provider's answer takes a moment: kills land here too
        return f"shipped {item}"

    def shipped(key: str, args: dict[str, Any]) -> tuple[str, str] | bool:
        """After a crash mid-call: whether the shipment happened, with its receipt."""
        with psycopg.connect(outside_url) as conn:
            found = conn.execute(f'SELECT 1 FROM "{schema}".chaos_shipments '
                                 "WHERE idem_key = %s", (key,)).fetchone() is not None
        return ("succeeded", f"shipped {args['item']}") if found else False

    return durable_tool(ship, saver=saver, verify=shipped, lease=TOOL_LEASE,
                        wait=TOOL_LEASE * 10)


def supervisor_graph(saver: DurableSaver, ship: DurableTool) -> Any:
    """supervisor -> Send(worker agent) per item, in parallel -> supervisor, ROUNDS times.

    The worker agent is a compiled subgraph (prepare -> act -> report) invoked from the
    ``worker`` node, so each runs in its own namespace on its own task thread.
    """

    def prepare(state: WorkerState) -> dict[str, Any]:
        return {"notes": [f"prepared {state['item']}"]}

    def act(state: WorkerState) -> dict[str, Any]:
        call = {"name": "ship", "args": {"item": state["item"]},
                "id": f"ship-{state['item']}-{uuid.uuid4().hex[:8]}", "type": "tool_call"}
        return {"receipt": str(ship.invoke(call).content)}

    def report(state: WorkerState) -> dict[str, Any]:
        return {"notes": [f"reported {state['receipt']}"]}

    agent = StateGraph(WorkerState)
    for name, fn in (("prepare", prepare), ("act", act), ("report", report)):
        agent.add_node(name, fn)
    agent.add_edge(START, "prepare")
    agent.add_edge("prepare", "act")
    agent.add_edge("act", "report")
    agent.add_edge("report", END)
    worker_agent = agent.compile()

    def supervisor(state: Supervision) -> dict[str, Any]:
        return {"round": state["round"] + 1}

    def assign(state: Supervision) -> Any:
        if state["round"] > ROUNDS:
            return END
        r = state["round"] - 1
        return [Send("worker", {"item": f"r{r}-i{i}"}) for i in range(ITEMS_PER_ROUND)]

    def worker(assignment: Assignment) -> dict[str, Any]:
        out = worker_agent.invoke({"item": assignment["item"], "notes": [], "receipt": ""})
        assert out["receipt"] == f"shipped {assignment['item']}"
        return {"done": [assignment["item"]]}

    builder = StateGraph(Supervision)
    builder.add_node("supervisor", supervisor)
    builder.add_node("worker", worker)
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
          thread_id: str) -> Any:
    """The compiled graph of ``workload`` on ``saver``."""
    if workload == "counter":
        return counter_graph(saver, COUNTER_STEPS)
    return supervisor_graph(saver, ship_tool(saver, schema, outside_url, thread_id))


def finished(workload: str, values: dict[str, Any]) -> bool:
    """Whether a thread's final state is the one a run without faults ends in."""
    if workload == "counter":
        return bool(values.get("count") == COUNTER_STEPS
                    and values.get("trail") == list(range(1, COUNTER_STEPS + 1)))
    return sorted(values.get("done", [])) == sorted(items())


class ReportingSaver(DurableSaver):
    """Appends each checkpoint to the ack file once ``put`` returned."""

    ack_fd = -1

    def put(self, *args: Any, **kwargs: Any) -> Any:
        config = super().put(*args, **kwargs)
        conf = config["configurable"]
        os.write(self.ack_fd, f"ack {conf.get('checkpoint_ns', '')} "
                              f"{conf['checkpoint_id']}\n".encode())
        return config


def run(spec: dict[str, Any]) -> None:
    """Run one workload on one thread until it ends (or the process is killed).

    ``spec``: workload, write_mode, redis_url, postgres_url, outside_url, schema, prefix,
    thread_id, ack_path, durability (LangGraph's: "sync" or "async"). An exception ends
    the process with ``error <type>`` in the ack file (a write that met a fault), not a
    traceback.
    """
    fd = os.open(spec["ack_path"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        _run(spec, fd)
    except Exception as exc:  # reported to the harness, which classifies it
        os.write(fd, f"error {type(exc).__name__} {str(exc)[:200]!r}\n".encode())
        os._exit(1)


def _run(spec: dict[str, Any], fd: int) -> None:
    saver = ReportingSaver(spec["redis_url"], spec["postgres_url"], schema=spec["schema"],
                           key_prefix=spec["prefix"], write_mode=spec["write_mode"],
                           breaker_cooldown=0.2, pool_timeout=5.0)
    saver.ack_fd = fd
    graph = build(spec["workload"], saver, spec["schema"], spec["outside_url"],
                  spec["thread_id"])
    graph.invoke(INPUTS[spec["workload"]],
                 {"configurable": {"thread_id": spec["thread_id"]}, "recursion_limit": 1000},
                 durability=spec.get("durability", "sync"))
    saver.close()
