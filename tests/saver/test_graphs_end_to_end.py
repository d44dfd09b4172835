"""Real graphs on one saver object, through both graph.invoke and graph.ainvoke."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from langgraph.types import Command

from langgraph_durable import DurableSaver
from tests.support.graphs import approval_graph, chat_graph, fan_out_graph, subgraph_graph


def _config() -> dict[str, Any]:
    return {"configurable": {"thread_id": f"t-{uuid.uuid4()}"}}


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_sync_and_async_calls_share_one_saver(saver: DurableSaver, durability: str) -> None:
    """invoke, ainvoke under two event loops, and invoke again all continue one thread."""
    graph = chat_graph(saver)
    config = _config()
    out = graph.invoke({"messages": [("user", "hi")]}, config, durability=durability)
    assert len(out["messages"]) == 4
    out = asyncio.run(graph.ainvoke({"messages": [("user", "again")]}, config,
                                    durability=durability))
    assert len(out["messages"]) == 8
    out = asyncio.run(graph.ainvoke({"messages": [("user", "third")]}, config,
                                    durability=durability))
    assert len(out["messages"]) == 12
    out = graph.invoke({"messages": [("user", "fourth")]}, config, durability=durability)
    assert [m.content for m in out["messages"][-3:]] == ["plan #13", "act #14", "finish #15"]
    assert graph.get_state(config).values["messages"] == out["messages"]


async def test_concurrent_async_graphs(saver: DurableSaver) -> None:
    """Fifty graphs at once on one saver all finish with their own state."""
    graph = chat_graph(saver)
    configs = [_config() for _ in range(50)]
    outs = await asyncio.gather(*(
        graph.ainvoke({"messages": [("user", str(i))]}, c) for i, c in enumerate(configs)))
    for i, (out, config) in enumerate(zip(outs, configs, strict=True)):
        assert out["messages"][0].content == str(i)
        assert len((await graph.aget_state(config)).values["messages"]) == 4


def test_interrupt_and_resume(saver: DurableSaver) -> None:
    """A paused graph resumes with the human's answer, from a new saver object too."""
    graph = approval_graph(saver)
    config = _config()
    out = graph.invoke({"request": "refund", "decision": ""}, config)
    assert out["__interrupt__"][0].value == {"question": "approve refund?"}
    state = graph.get_state(config)
    assert state.next == ("ask",)
    assert state.tasks[0].interrupts[0].value == {"question": "approve refund?"}

    other = DurableSaver(saver.config.redis_url, saver.config.postgres_url,
                         key_prefix=saver.config.key_prefix, schema=saver.config.schema)
    try:
        out = approval_graph(other).invoke(Command(resume="yes"), config)
    finally:
        other.close()
    assert out == {"request": "refund", "decision": "yes"}


async def test_interrupt_and_resume_async(saver: DurableSaver) -> None:
    """The same pause and resume through ainvoke."""
    graph = approval_graph(saver)
    config = _config()
    out = await graph.ainvoke({"request": "wire", "decision": ""}, config)
    assert "__interrupt__" in out
    out = await graph.ainvoke(Command(resume="no"), config)
    assert out["decision"] == "no"


def test_send_fan_out(saver: DurableSaver) -> None:
    """Parallel Send tasks all land, and a second run adds to the reduced list."""
    graph = fan_out_graph(saver)
    config = _config()
    out = graph.invoke({"items": ["a", "b", "c"], "results": []}, config)
    assert sorted(out["results"]) == ["A", "B", "C"]
    out = asyncio.run(graph.ainvoke({"items": ["d"], "results": []}, config))
    assert sorted(out["results"]) == ["A", "B", "C", "D"]


def test_subgraph_namespaces(saver: DurableSaver) -> None:
    """A subgraph's checkpoints live in their own namespace and the parent sees its output."""
    graph = subgraph_graph(saver)
    config = _config()
    out = graph.invoke({"messages": [("user", "go")]}, config)
    assert [m.content for m in out["messages"]] == ["go", "inner", "outer"]
    namespaces = {t.config["configurable"]["checkpoint_ns"] for t in saver.list(config)}
    assert "" in namespaces and any(ns.startswith("child:") for ns in namespaces)
    state = graph.get_state(config, subgraphs=True)
    assert state.values["messages"][-1].content == "outer"


def test_time_travel(saver: DurableSaver) -> None:
    """Replaying from an older checkpoint forks history; update_state writes a new one."""
    graph = chat_graph(saver)
    config = _config()
    graph.invoke({"messages": [("user", "one")]}, config)
    graph.invoke({"messages": [("user", "two")]}, config)
    history = list(graph.get_state_history(config))
    first_run_end = next(s for s in history if len(s.values.get("messages", [])) == 4
                         and not s.next)
    forked = graph.invoke({"messages": [("user", "fork")]}, first_run_end.config)
    assert [m.content for m in forked["messages"]][:5] == ["one", "plan #1", "act #2",
                                                          "finish #3", "fork"]
    assert len(forked["messages"]) == 8

    updated = graph.update_state(config, {"messages": [("user", "edited")]})
    state = graph.get_state(updated)
    assert state.values["messages"][-1].content == "edited"
    assert graph.get_state(config).values["messages"][-1].content == "edited"
