"""Drop-in means LangGraph cannot tell: what a user receives holds only what InMemorySaver's
would, every fork LangGraph makes works, and a run racing a fork loses to the fork.

The oracle here is InMemorySaver itself: the same operations run on both savers and what
the user sees is compared. LangGraph's own test suite (`make compat`) is the larger judge.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.func import entrypoint, task
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, StateUpdate, interrupt
from pydantic import BaseModel
from typing_extensions import TypedDict

from langgraph_durable import DurableSaver, ThreadConflictError
from tests.support.graphs import delta_graph, subgraph_graph

# What LangGraph itself puts in a returned config's configurable.
LANGGRAPH_KEYS = {"thread_id", "checkpoint_ns", "checkpoint_id", "checkpoint_map"}


class Pause(TypedDict):
    answer: str
    trail: list[str]


def _pausing_graph(saver: BaseCheckpointSaver[Any]) -> Any:
    """A subgraph that interrupts inside a parent: every read path has a namespace."""

    def ask(state: Pause) -> dict[str, Any]:
        return {"answer": interrupt("why?"), "trail": [*state["trail"], "ask"]}

    inner = StateGraph(Pause)
    inner.add_node("ask", ask)
    inner.add_edge(START, "ask")
    inner.add_edge("ask", END)
    outer = StateGraph(Pause)
    outer.add_node("inner", inner.compile())
    outer.add_edge(START, "inner")
    outer.add_edge("inner", END)
    return outer.compile(checkpointer=saver)


def _shape(value: Any) -> Any:
    """The keys of every config and metadata inside ``value`` (ids and times left out, a
    namespace's task id too: it derives from checkpoint ids)."""
    if isinstance(value, dict):
        return {k.partition(":")[0]: _shape(v) for k, v in value.items()
                if k not in ("checkpoint_id", "checkpoint_ns", "ts", "id", "run_id")}
    if isinstance(value, (list, tuple)):
        return [_shape(v) for v in value]
    return type(value).__name__


def _everything_a_user_reads(saver: BaseCheckpointSaver[Any], thread: str) -> list[Any]:
    """Run the pausing graph to its interrupt and resume it, reading every public path."""
    graph = _pausing_graph(saver)
    config = {"configurable": {"thread_id": thread}}
    seen: list[Any] = []
    graph.invoke({"answer": "", "trail": []}, config)
    state = graph.get_state(config, subgraphs=True)
    seen += [state.config, state.parent_config, state.metadata]
    seen += [t.state.config for t in state.tasks if t.state is not None]  # type: ignore[union-attr]
    graph.invoke(Command(resume="because"), config)
    for snapshot in graph.get_state_history(config):
        seen += [snapshot.config, snapshot.parent_config, snapshot.metadata]
    # every namespace's checkpoints; savers order namespaces differently, so sort them
    for tup in sorted(saver.list(config), key=lambda t: (
            t.config["configurable"]["checkpoint_ns"].partition(":")[0],
            t.metadata.get("step", 0))):
        seen += [tup.config, tup.parent_config, tup.metadata]
    latest = saver.get_tuple(config)
    assert latest is not None
    seen += [latest.config, latest.parent_config]
    by_id = saver.get_tuple(latest.config)
    assert by_id is not None
    seen += [by_id.config]
    seen.append(graph.update_state(latest.config, {"trail": ["forked"]}))

    async def async_reads() -> None:
        atup = await saver.aget_tuple(config)
        assert atup is not None
        seen.append(atup.config)
        seen.extend([t.config async for t in saver.alist(config, limit=2)])

    asyncio.run(async_reads())
    return seen


def test_no_key_the_saver_invents_reaches_a_user(saver: DurableSaver) -> None:
    """Every config, parent config and metadata a user reads (invoke, get_state with
    subgraphs, history, list, get_tuple by id and latest, update_state, the async twins)
    has exactly the keys InMemorySaver's has, and nothing but LangGraph's own in
    ``configurable``."""
    thread = f"t-{uuid.uuid4()}"
    ours = _everything_a_user_reads(saver, thread)
    theirs = _everything_a_user_reads(InMemorySaver(), thread)
    assert _shape(ours) == _shape(theirs)
    for value in ours:
        if isinstance(value, dict) and "configurable" in value:
            assert set(value["configurable"]) <= LANGGRAPH_KEYS, value


class Slow(TypedDict):
    steps: list[str]


def test_a_fork_racing_a_live_run_wins_and_the_run_conflicts(
    make_saver: Callable[..., DurableSaver],
) -> None:
    """A run is mid-step when, in the same process, ``update_state`` forks from the
    checkpoint the run is extending: the fork is stored (it is what the caller asked for),
    and the run's next write raises `ThreadConflictError` instead of forking the thread
    silently (InMemorySaver would keep both lines)."""
    saver = make_saver()
    entered, release = threading.Event(), threading.Event()

    def slow(state: Slow) -> dict[str, Any]:
        entered.set()
        assert release.wait(10)
        return {"steps": [*state["steps"], "slow"]}

    builder = StateGraph(Slow)
    builder.add_node("slow", slow)
    builder.add_edge(START, "slow")
    builder.add_edge("slow", END)
    graph = builder.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": f"t-{uuid.uuid4()}"}}
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:  # "sync": the checkpoint the node runs from is stored before the node runs,
            # so the fork below is made from it (under "async" it may still be in flight,
            # and update_state would then write from the latest like a second run)
            graph.invoke({"steps": ["start"]}, config, durability="sync")
            outcome.append(None)
        except BaseException as exc:  # the outcome is the assertion
            outcome.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    assert entered.wait(10)
    head = graph.get_state(config)  # the run's own input checkpoint
    fork = graph.update_state(head.config, {"steps": ["fork"]})
    release.set()
    worker.join(20)
    assert len(outcome) == 1 and isinstance(outcome[0], ThreadConflictError), outcome
    saver.flush()
    state = graph.get_state(config)
    assert state.values == {"steps": ["fork"]}
    assert state.config["configurable"]["checkpoint_id"] == (
        fork["configurable"]["checkpoint_id"])


def test_forks_langgraph_makes_work_as_on_in_memory_saver(saver: DurableSaver) -> None:
    """Time travel, ``update_state`` on past checkpoints, ``bulk_update_state`` and an
    invoke from an old checkpoint give the same values and history as InMemorySaver."""

    thread = f"t-{uuid.uuid4()}"

    def story(cp: BaseCheckpointSaver[Any]) -> list[Any]:
        graph = subgraph_graph(cp)
        config = {"configurable": {"thread_id": thread}}
        graph.invoke({"messages": [("user", "one")]}, config)
        graph.invoke({"messages": [("user", "two")]}, config)
        history = list(graph.get_state_history(config))
        old = history[3].config
        graph.update_state(old, {"messages": [("user", "edit")]})
        graph.invoke(None, history[2].config)  # replay from an older checkpoint
        graph.bulk_update_state(history[1].config, [[StateUpdate({"messages": []})]])
        graph.invoke({"messages": [("user", "three")]}, config)
        return [
            [(m.type, m.content) for m in s.values.get("messages", [])]
            for s in graph.get_state_history(config)
        ]

    assert story(saver) == story(InMemorySaver())


def test_delta_channel_forks_agree_with_in_memory_saver(saver: DurableSaver) -> None:
    """A fork of a thread holding a DeltaChannel gives what InMemorySaver gives, whichever
    way LangGraph resolves its own open issue about replaying an abandoned branch
    (langgraph #8443): this pins the two savers together before and after its fix."""

    thread = f"t-{uuid.uuid4()}"

    def story(cp: BaseCheckpointSaver[Any]) -> list[Any]:
        graph = delta_graph(cp)
        config = {"configurable": {"thread_id": thread}}
        for _ in range(4):
            graph.invoke({"log": []}, config)
        history = list(graph.get_state_history(config))
        graph.update_state(history[4].config, {"log": ["edited"]})
        graph.invoke({"log": []}, config)
        graph.invoke({"log": []}, history[6].config)
        return [s.values.get("log") for s in graph.get_state_history(config)]

    assert story(saver) == story(InMemorySaver())


class Order(BaseModel):
    """A graph's own state type, allowed through ``with_allowlist``."""

    sku: str


def test_with_allowlist_widens_the_saver_itself(make_saver: Callable[..., DurableSaver]) -> None:
    """LangGraph calls ``with_allowlist`` with a graph's schema types under
    ``LANGGRAPH_STRICT_MSGPACK``: with a strict serializer of the application's, the saver
    returns itself, and its engine reads the newly allowed type (a copy's allowlist would
    never reach it)."""
    strict = JsonPlusSerializer(allowed_msgpack_modules=None)
    saver = make_saver(serde=strict)
    assert saver.with_allowlist({(__name__, "Order")}) is saver
    assert saver.serde is not strict
    config = {"configurable": {"thread_id": f"t-{uuid.uuid4()}", "checkpoint_ns": ""}}
    checkpoint = {"v": 1, "id": str(uuid.uuid4()), "ts": "", "versions_seen": {},
                  "channel_values": {"order": Order(sku="A")},
                  "channel_versions": {"order": "1"}, "pending_sends": []}
    saved = saver.put(config, checkpoint, {}, {"order": "1"})  # type: ignore[arg-type]
    saver.flush()
    fresh = saver.get_tuple(saved)
    assert fresh is not None and fresh.checkpoint["channel_values"]["order"] == Order(sku="A")


@pytest.mark.parametrize("write_mode", ["through"])
def test_special_writes_of_concurrent_tasks_are_served_as_stored(
    make_saver: Callable[..., DurableSaver],
) -> None:
    """LangGraph's functional API writes a task's interrupt again on each resume while
    another task writes its own at the same time; Redis must serve what Postgres holds,
    whichever of the two updates (sent without waiting) lands last. Checked against a
    reader that has to go to Postgres, over a few dozen resumes (the race is timing)."""
    saver, cold = make_saver(), make_saver()

    @entrypoint(checkpointer=saver)
    def workflow(n: int) -> dict[str, Any]:
        @task
        def setup() -> int:
            return n

        @task
        def ask(question: str) -> str:
            return str(interrupt(question))

        return {"answers": [ask(f"q{i}").result() for i in range(setup().result())]}

    def writes(tup: Any) -> list[tuple[str, str, str]]:
        return [(t, c, repr(v)) for t, c, v in tup.pending_writes]

    for _ in range(80):
        config = {"configurable": {"thread_id": f"t-{uuid.uuid4()}"}}
        workflow.invoke(2, config)
        workflow.invoke(Command(resume="a1"), config)
        hot = saver.get_tuple(config)
        from_postgres = cold.list(config, limit=1)  # list reads Postgres
        assert hot is not None
        assert writes(hot) == writes(next(iter(from_postgres)))
        assert workflow.invoke(Command(resume="a2"), config) == {"answers": ["a1", "a2"]}
