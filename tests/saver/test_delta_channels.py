"""DeltaChannel support: history in a few round trips, and prune that keeps what it needs."""

from __future__ import annotations

import uuid
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from langgraph_durable import DurableSaver
from tests.support.graphs import delta_graph


def _thread(saver: DurableSaver, turns: int) -> dict[str, Any]:
    config = {"configurable": {"thread_id": f"t-{uuid.uuid4()}"}}
    graph = delta_graph(saver)
    for _ in range(turns):
        graph.invoke({"log": []}, config)
    return config


def test_delta_history_matches_the_reference_walk(saver: DurableSaver) -> None:
    """Our two-query history equals LangGraph's reference walk (one get_tuple per
    ancestor), for the head and for an older checkpoint."""
    config = _thread(saver, turns=7)
    saver.flush()
    history = list(saver.list(config))
    for target in (history[0].config, history[len(history) // 2].config):
        ours = saver.get_delta_channel_history(config=target, channels=["log", "missing"])
        reference = BaseCheckpointSaver.get_delta_channel_history(
            saver, config=target, channels=["log", "missing"])
        assert ours == reference
    assert delta_graph(saver).get_state(config).values["log"] == [
        f"entry {i}" for i in range(7)]


async def test_delta_history_async_twin(saver: DurableSaver) -> None:
    """The async method returns the same as the sync one."""
    config = _thread(saver, turns=4)
    saver.flush()
    sync_result = saver.get_delta_channel_history(config=config, channels=["log"])
    assert await saver.aget_delta_channel_history(config=config, channels=["log"]) == (
        sync_result)


def test_prune_keep_latest_keeps_delta_ancestors(saver: DurableSaver) -> None:
    """After keep_latest, the delta channel still rebuilds its full value, the thread keeps
    running, and checkpoints before the last snapshot are gone."""
    config = _thread(saver, turns=8)
    before = len(list(saver.list(config)))
    saver.prune([config["configurable"]["thread_id"]], strategy="keep_latest")
    after = len(list(saver.list(config)))
    assert 1 < after < before
    graph = delta_graph(saver)
    assert graph.get_state(config).values["log"] == [f"entry {i}" for i in range(8)]
    graph.invoke({"log": []}, config)
    assert graph.get_state(config).values["log"][-1] == "entry 8"
