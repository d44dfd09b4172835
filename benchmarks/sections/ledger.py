"""Ledger: what ``durable_tool`` adds to a tool call inside ``ToolNode``.

Three variants run in the same one-node graph (START → ToolNode → END) checkpointed by the
saver under test, whose ledger the tool records in (as in an application: the checkpoint
that decided a call must be durable before the call runs): the plain ``@tool``, the same
function wrapped by ``durable_tool`` on a new call id (claim → run → record), and a replay
of a call id recorded before the measurement, which must return the recorded result
without running the function again. Every measured invocation is its thread's second, so
all three read a thread of the same length first.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import Any

from langchain_core.messages import AIMessage
from langchain_core.tools import BaseTool, tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from benchmarks.context import Context
from benchmarks.report import NOTE, SAVER, Column, Row, Table, error_row
from benchmarks.savers import Saver, SaverSpec, provisioned
from benchmarks.sections._common import SAMPLES, latency_row, quantile_columns
from benchmarks.timing import describe, round_robin, timed_ns

SECTION = "ledger"
PLAIN, TRACKED, REPLAY = "plain", "tracked", "replay"

log = logging.getLogger(__name__)

DurableTool = Callable[..., Callable[[Callable[..., Any]], BaseTool]]


def _load_durable_tool() -> DurableTool:
    module = importlib.import_module("langgraph_durable")
    durable_tool: DurableTool | None = getattr(module, "durable_tool", None)
    if durable_tool is None:
        raise ImportError("langgraph_durable has no durable_tool")
    return durable_tool


def _lookup_order(calls: list[str]) -> Callable[[str], str]:
    """A tool function that records each real execution in ``calls``."""

    def lookup_order(order_id: str) -> str:
        """Look up the shipping status of an order."""
        calls.append(order_id)
        return f"order {order_id}: shipped"

    return lookup_order


class _Graph:
    """START → ToolNode([tool]) → END on ``saver``; each invocation makes one tool call."""

    def __init__(self, tool_: BaseTool, saver: Saver) -> None:
        builder = StateGraph(MessagesState)
        builder.add_node("tools", ToolNode([tool_]))
        builder.add_edge(START, "tools")
        builder.add_edge("tools", END)
        self.graph: Any = builder.compile(checkpointer=saver)
        self.tool_name = tool_.name

    def call(self, thread_id: str, call_id: str) -> int:
        """Invoke the graph on ``thread_id`` with tool call ``call_id``; return its ns."""
        call = {
            "name": self.tool_name,
            "args": {"order_id": call_id},
            "id": call_id,
            "type": "tool_call",
        }
        message = AIMessage(content="", tool_calls=[call])
        config = {"configurable": {"thread_id": thread_id}}
        return timed_ns(lambda: self.graph.invoke({"messages": [message]}, config))

    def seed(self, prefix: str, rounds: int) -> None:
        """Make call ``prefix-r`` in thread ``prefix-r`` for every round ``r``."""
        for round_ in range(rounds):
            self.call(f"{prefix}-{round_}", f"{prefix}-{round_}")

    def probe(self, prefix: str, *, replay: bool) -> Callable[[int], int]:
        """Round ``r`` calls again in the seeded thread ``prefix-r``: the seeded call
        (``replay``) or a new one."""

        def probe(round_: int) -> int:
            thread_id = f"{prefix}-{round_}"
            return self.call(thread_id, thread_id if replay else f"{thread_id}-again")

        return probe


def _measure(ctx: Context, spec: SaverSpec, durable_tool: DurableTool) -> list[Row]:
    profile = ctx.profile
    plain_calls: list[str] = []
    tracked_calls: list[str] = []
    plain = tool(_lookup_order(plain_calls))
    ns = provisioned(ctx.settings, spec, SECTION)
    rounds = profile.ledger_rounds + profile.ledger_warmup
    with spec.open(ns) as saver:
        plain_graph = _Graph(plain, saver)
        tracked_graph = _Graph(durable_tool(saver=saver)(_lookup_order(tracked_calls)), saver)
        plain_graph.seed(PLAIN, rounds)
        for prefix in (TRACKED, REPLAY):  # REPLAY's are the calls its rounds repeat
            tracked_graph.seed(prefix, rounds)
        series = round_robin(
            {
                PLAIN: plain_graph.probe(PLAIN, replay=False),
                TRACKED: tracked_graph.probe(TRACKED, replay=False),
                REPLAY: tracked_graph.probe(REPLAY, replay=True),
            },
            rounds=profile.ledger_rounds,
            warmup=profile.ledger_warmup,
        )
    rows = [latency_row(spec.name, entry, variant=variant) for variant, entry in series.items()]
    base = rows[0].get("p50")
    for row in rows:
        p50 = row.get("p50")
        if isinstance(p50, float) and isinstance(base, float):
            row["overhead_p50"] = p50 - base
    completed = all(entry.error is None for entry in series.values())
    if completed and len(tracked_calls) != 3 * rounds:  # two seeded threads + tracked rounds
        rows[-1][NOTE] = (
            f"the wrapped function ran {len(tracked_calls)} times for {3 * rounds} distinct "
            f"calls and {rounds} replays of recorded ones"
        )
    return rows


def run(ctx: Context) -> list[Table]:
    """Measure each selected saver that has a ledger, or say why it cannot be measured."""
    table = Table(
        SECTION,
        "Ledger: durable_tool overhead per tool call (graph with one ToolNode)",
        (
            SAVER,
            Column("variant", "variant"),
            *quantile_columns(),
            Column("overhead_p50", "overhead p50 µs", "us"),
            SAMPLES,
        ),
        notes=[
            "One graph START → ToolNode → END checkpointed by the saver under test, LangGraph's "
            "default durability; each measured invoke is the second on its thread. plain: "
            "`@tool`; tracked: the same function through `durable_tool(saver=...)`, a new "
            "tool_call_id per call; replay: a tool_call_id recorded before measuring, which must "
            "return the recorded result without running the function. overhead = p50 - plain p50."
        ],
    )
    specs = [spec for spec in ctx.specs if spec.has_ledger]
    if not specs:
        table.rows.append(
            {"saver": "durable_tool", NOTE: "not run: no saver with a ledger selected"}
        )
        return [table]
    try:
        durable_tool = _load_durable_tool()
    except ImportError as exc:
        table.rows.append({"saver": "durable_tool", NOTE: f"not available ({describe(exc)})"})
        return [table]
    for spec in specs:
        log.info("%s: %s", SECTION, spec.name)
        try:
            table.rows.extend(_measure(ctx, spec, durable_tool))
        except Exception as exc:
            table.rows.append(error_row(spec.name, describe(exc)))
    return [table]
