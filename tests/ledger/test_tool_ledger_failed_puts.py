"""A durable tool whose step's checkpoint will never be stored says so at once.

Under LangGraph's ``durability="async"`` a step runs while its checkpoint's put is still
in flight, and a durable tool waits for the checkpoint that decided its call before it
runs (docs/tool-ledger.md). LangGraph puts a namespace's checkpoints one after another and
none after one failed: once a put of the run failed there, the checkpoint the tool waits
for is not on its way. The tool used to wait ``write_deadline`` (30 s by default) on every
call for it, and a sub-agent that retries failed tools waited that long on every retry
(the kill -9 chaos soak: a supervisor's workers stuck for minutes after a Postgres cut).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_durable import ToolCallError
from langgraph_durable._core import writes
from langgraph_durable.errors import TierUnavailableError
from tests.support.graphs import CHARGE_CALL, charge_card_graph
from tests.support.tool_calls import new_thread, thread_config

WRITE_DEADLINE = 10.0


@pytest.mark.parametrize("flavour", ["invoke", "ainvoke"])
def test_a_call_whose_step_could_not_be_stored_fails_at_once(make_saver: Any,
                                                              flavour: str) -> None:
    """The input holds a message over ``max_checkpoint_bytes``: the run's first put
    fails (`SerializationError`), so the checkpoint the tool's step ran from is never
    put; the tool does not run, and its error names the put that failed."""
    saver = make_saver(write_deadline=WRITE_DEADLINE, max_checkpoint_bytes=3000)
    calls: list[int] = []
    graph = charge_card_graph(saver, calls)
    state = {"messages": [AIMessage("x" * 5000, tool_calls=[CHARGE_CALL])]}
    config = thread_config(new_thread())
    started = time.monotonic()
    with pytest.raises(ToolCallError, match=r"will not reach Postgres: the run's put of "
                       r"checkpoint '[0-9a-f-]+' failed \(SerializationError"):
        if flavour == "invoke":
            graph.invoke(state, config, durability="async")
        else:
            asyncio.run(graph.ainvoke(state, config, durability="async"))
    assert time.monotonic() - started < WRITE_DEADLINE / 2
    assert calls == []


def test_a_sub_agents_call_whose_parent_step_could_not_be_stored_fails_at_once(
        make_saver: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A supervisor's put fails (Postgres out of reach for it alone); its worker, a
    subgraph whose own checkpoints are stored, runs a durable tool decided by the
    supervisor's step too (the call's ancestry): the tool does not run, at once."""
    saver = make_saver(write_deadline=WRITE_DEADLINE)
    put = writes.put
    failed: list[str] = []

    def root_puts_fail(ctx: Any, config: Any, checkpoint: Any, *args: Any
                       ) -> Generator[Any, Any, Any]:
        if config["configurable"].get("checkpoint_ns", "") == "":
            failed.append(checkpoint["id"])
            raise TierUnavailableError("cold", "Postgres (cold tier) is unavailable: test")
        return (yield from put(ctx, config, checkpoint, *args))

    monkeypatch.setattr(writes, "put", root_puts_fail)
    calls: list[int] = []
    supervisor = StateGraph(MessagesState)
    supervisor.add_node("worker", charge_card_graph(saver, calls))
    supervisor.add_edge(START, "worker")
    graph = supervisor.compile(checkpointer=saver)
    thread = new_thread()
    started = time.monotonic()
    with pytest.raises(ToolCallError, match="TierUnavailableError"):
        graph.invoke({"messages": [AIMessage("", tool_calls=[CHARGE_CALL])]},
                     thread_config(thread), durability="async")
    assert time.monotonic() - started < WRITE_DEADLINE / 2
    assert failed and calls == []
    stored = list(saver.list(thread_config(thread)))
    assert stored and all(c.config["configurable"]["checkpoint_ns"] != "" for c in stored)


def test_a_call_whose_steps_put_fails_while_it_waits_stops_waiting(
        make_saver: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The put of the checkpoint the tool's step ran from is in flight when the tool
    starts waiting for it, and fails half a second later (Postgres cut mid-statement): the
    tool stops waiting then, not at ``write_deadline``."""
    saver = make_saver(write_deadline=WRITE_DEADLINE)
    put = writes.put
    failed: list[str] = []

    def step_put_fails_late(ctx: Any, config: Any, checkpoint: Any, metadata: Any,
                            *args: Any) -> Generator[Any, Any, Any]:
        if metadata.get("step") == 0:
            time.sleep(0.5)
            failed.append(checkpoint["id"])
            raise TierUnavailableError("cold", "Postgres (cold tier) is unavailable: test")
        return (yield from put(ctx, config, checkpoint, metadata, *args))

    monkeypatch.setattr(writes, "put", step_put_fails_late)
    calls: list[int] = []
    graph = charge_card_graph(saver, calls)
    started = time.monotonic()
    with pytest.raises(ToolCallError, match="will not reach Postgres"):
        graph.invoke({"messages": [AIMessage("", tool_calls=[CHARGE_CALL])]},
                     thread_config(new_thread()), durability="async")
    assert 0.5 <= time.monotonic() - started < WRITE_DEADLINE / 2
    assert failed and calls == []
