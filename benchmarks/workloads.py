"""What the savers are fed: messages, checkpoints as LangGraph builds them, and graphs."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, NamedTuple, Protocol, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    empty_checkpoint,
)
from langgraph.checkpoint.base.id import uuid6
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

MESSAGE_CHARS = 200
NODES = ("plan", "act", "reflect")
"""The chat graph's nodes, run in this order: one invocation is three supersteps."""
STEPS_PER_INVOKE = len(NODES)
MESSAGES_PER_INVOKE = 1 + len(NODES)
"""The human input plus one AI reply per node."""

_FILLER = (
    "The quick brown fox jumps over the lazy dog while the checkpointer records every "
    "superstep of the conversation so that a crashed worker can resume exactly where it "
    "stopped, without repeating a single side effect or losing a message. "
)


def message_text(label: str, index: int) -> str:
    """A ``MESSAGE_CHARS``-long message body that differs from message to message."""
    head = f"[{label} #{index}] "
    return (head + _FILLER * 2)[:MESSAGE_CHARS]


def make_messages(count: int) -> list[AnyMessage]:
    """``count`` alternating human and AI messages, with ids as ``add_messages`` assigns."""
    messages: list[AnyMessage] = []
    for index in range(count):
        cls = HumanMessage if index % 2 == 0 else AIMessage
        messages.append(cls(content=message_text("msg", index), id=str(uuid.uuid4())))
    return messages


def thread_config(thread_id: str, checkpoint_id: str | None = None) -> RunnableConfig:
    """The config LangGraph passes a saver for ``thread_id`` in the root namespace."""
    configurable: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


# --- checkpoints as the Pregel loop writes them --------------------------------------------


@dataclass(frozen=True, slots=True)
class PutArgs:
    """The arguments of one ``saver.put`` call."""

    config: RunnableConfig
    checkpoint: Checkpoint
    metadata: CheckpointMetadata
    new_versions: ChannelVersions


class WritesArgs(NamedTuple):
    """The arguments of one ``saver.put_writes`` call."""

    config: RunnableConfig
    writes: list[tuple[str, Any]]
    task_id: str
    task_path: str


class CheckpointChain:
    """Successive checkpoints of one thread, shaped like the chat graph's loop writes them.

    Every checkpoint holds the same ``messages`` list (so each put serializes it in full, as
    LangGraph does for an updated channel) and, like a real superstep, bumps ``messages`` and
    the next node's ``branch:to:*`` trigger with ``saver.get_next_version``, and records in
    ``versions_seen`` the trigger that the node consumed.
    """

    def __init__(
        self, saver: BaseCheckpointSaver[Any], thread_id: str, messages: Sequence[AnyMessage]
    ) -> None:
        self.saver = saver
        self.thread_id = thread_id
        self.messages = list(messages)
        self.config = thread_config(thread_id)
        self.checkpoint = empty_checkpoint()
        self.step = -1
        self.ids: list[str] = []

    def prepare(self) -> PutArgs:
        """The next ``put``'s arguments (does not advance the chain: see :meth:`commit`)."""
        step = self.step + 1
        node = NODES[step % len(NODES)]
        trigger = f"branch:to:{NODES[(step + 1) % len(NODES)]}"
        previous = self.checkpoint
        new_versions = {
            channel: self.saver.get_next_version(previous["channel_versions"].get(channel), None)
            for channel in ("messages", trigger)
        }
        versions_seen = {name: dict(seen) for name, seen in previous["versions_seen"].items()}
        consumed = f"branch:to:{node}"
        if consumed in previous["channel_versions"]:
            versions_seen[node] = {consumed: previous["channel_versions"][consumed]}
        checkpoint = Checkpoint(
            v=previous["v"],
            id=str(uuid6(clock_seq=step)),
            ts=datetime.now(UTC).isoformat(),
            channel_values={"messages": self.messages, trigger: None},
            channel_versions={**previous["channel_versions"], **new_versions},
            versions_seen=versions_seen,
            updated_channels=sorted(new_versions),
        )
        metadata: CheckpointMetadata = {"source": "loop", "step": step, "parents": {}}
        return PutArgs(self.config, checkpoint, metadata, new_versions)

    def commit(self, args: PutArgs, stored: RunnableConfig) -> None:
        """Advance past ``args`` once the saver has stored it (``stored`` is put's result)."""
        self.checkpoint = args.checkpoint
        self.config = stored
        self.step += 1
        self.ids.append(args.checkpoint["id"])

    def put(self) -> RunnableConfig:
        """Prepare, store and commit the next checkpoint."""
        args = self.prepare()
        stored = self.saver.put(args.config, args.checkpoint, args.metadata, args.new_versions)
        self.commit(args, stored)
        return stored

    def put_timed(self) -> int:
        """Prepare (untimed), store and commit the next checkpoint; the put's wall time in ns."""
        args = self.prepare()
        start = time.perf_counter_ns()
        stored = self.saver.put(args.config, args.checkpoint, args.metadata, args.new_versions)
        elapsed = time.perf_counter_ns() - start
        self.commit(args, stored)
        return elapsed

    def extend(self, count: int) -> CheckpointChain:
        """Store ``count`` more checkpoints; return ``self``."""
        for _ in range(count):
            self.put()
        return self

    def prepare_writes(self) -> WritesArgs:
        """The ``put_writes`` of a new task on the latest checkpoint: its two writes."""
        step = self.step
        return WritesArgs(self.config, task_writes(step), str(uuid.uuid4()), task_path(step))

    def put_writes(self) -> None:
        """Store the writes of :meth:`prepare_writes` (pending writes of the latest checkpoint)."""
        self.saver.put_writes(*self.prepare_writes())


def task_writes(step: int) -> list[tuple[str, Any]]:
    """The two writes a chat-graph task makes: its reply and the next node's trigger."""
    reply = AIMessage(content=message_text("write", step), id=str(uuid.uuid4()))
    return [("messages", [reply]), (f"branch:to:{NODES[(step + 1) % len(NODES)]}", None)]


def task_path(step: int) -> str:
    """The task path LangGraph gives a pull task of node ``step``."""
    return f"~__pregel_pull, {NODES[step % len(NODES)]}"


def expect_checkpoint(
    found: CheckpointTuple | None, checkpoint_id: str, messages: int, writes: int
) -> None:
    """Raise ``AssertionError`` unless ``found`` is the checkpoint the workload stored."""
    if found is None:
        raise AssertionError(f"checkpoint {checkpoint_id} not found")
    got_id = found.checkpoint["id"]
    got_messages = len(found.checkpoint["channel_values"].get("messages", ()))
    got_writes = len(found.pending_writes or ())
    if (got_id, got_messages, got_writes) != (checkpoint_id, messages, writes):
        raise AssertionError(
            f"read back checkpoint {got_id} with {got_messages} messages and {got_writes} "
            f"writes; stored {checkpoint_id} with {messages} and {writes}"
        )


# --- the chat graph of the macro and storage sections ---------------------------------------


DELTA_SNAPSHOT_EVERY = 20
"""Updates of the delta chat graph's messages between two full snapshots."""


class ChatState(TypedDict):
    """A chat thread's state: messages merged by id."""

    messages: Annotated[list[AnyMessage], add_messages]


# What a chat node reads: `ChatState` or `DeltaChatState` (a plain mapping, so the node does
# not tie the graph to either schema's channels).
ChatView = Mapping[str, Any]


def _reply(node: str, state: ChatView) -> dict[str, list[AnyMessage]]:
    return {"messages": [AIMessage(content=message_text(node, len(state["messages"])))]}


class ChatNode(Protocol):
    """A node function as ``StateGraph.add_node`` types it (a coroutine result is ``Any``)."""

    def __call__(self, state: ChatView) -> Any: ...


def _sync_node(node: str) -> ChatNode:
    def run(state: ChatView) -> dict[str, list[AnyMessage]]:
        return _reply(node, state)

    return run


def _async_node(node: str) -> ChatNode:
    async def run(state: ChatView) -> dict[str, list[AnyMessage]]:
        return _reply(node, state)

    return run


def _add_batches(state: list[AnyMessage] | None, writes: Sequence[Any]) -> list[AnyMessage]:
    """``add_messages`` over a batch of writes, as `DeltaChannel` folds them."""
    merged: list[AnyMessage] = list(state or [])
    for write in writes:
        merged = add_messages(merged, write)  # type: ignore[assignment]
    return merged


class DeltaChatState(TypedDict):
    """`ChatState` whose messages live in a `DeltaChannel`: a checkpoint stores a sentinel
    (a full snapshot every `DELTA_SNAPSHOT_EVERY` updates), and reads rebuild the list from
    the writes along the parent chain."""

    messages: Annotated[
        list[AnyMessage], DeltaChannel(_add_batches, snapshot_frequency=DELTA_SNAPSHOT_EVERY)
    ]


def chat_graph(*, async_nodes: bool, delta: bool = False) -> StateGraph[Any]:
    """START → plan → act → reflect → END, each node appending one AI message.

    ``async_nodes`` gives coroutine nodes for ``ainvoke`` (sync nodes would run in a thread
    pool there, which is not what an async agent does); ``delta`` keeps the messages in a
    `DeltaChannel` (`DeltaChatState`).
    """
    builder: StateGraph[Any] = StateGraph(DeltaChatState if delta else ChatState)
    previous = START
    for node in NODES:
        builder.add_node(node, _async_node(node) if async_nodes else _sync_node(node))
        builder.add_edge(previous, node)
        previous = node
    builder.add_edge(previous, END)
    return builder


def chat_input(thread_id: str, turn: int) -> ChatState:
    """The human message that starts turn ``turn`` of ``thread_id``."""
    return ChatState(messages=[HumanMessage(content=message_text(f"{thread_id} turn", turn))])


def chat_config(thread_id: str) -> RunnableConfig:
    """The config a caller passes ``invoke`` for ``thread_id``."""
    return {"configurable": {"thread_id": thread_id}}


def message_count(found: CheckpointTuple | None) -> int:
    """Messages in the latest checkpoint of a chat thread (0 if there is none)."""
    if found is None:
        return 0
    return len(found.checkpoint["channel_values"].get("messages", ()))


# --- the research graph: more channels, a larger state, a subgraph ---------------------------

RESEARCH_DOCS = 8
"""Documents the research subgraph keeps in state (replaced each turn): ~8 KB."""
DOC_CHARS = 1000
RESEARCH_NODES = ("plan", "search", "summarize", "write")
"""Nodes run per invocation: plan and write in the root graph, search and summarize in the
``research`` subgraph (its own checkpoints, in a child namespace)."""
RESEARCH_STEPS_PER_INVOKE = len(RESEARCH_NODES)
RESEARCH_MESSAGES_PER_INVOKE = 3
"""The human input, the summary and the answer."""


def _add_notes(left: list[str], right: list[str]) -> list[str]:
    return left + right


def _merge_counts(left: dict[str, int], right: dict[str, int]) -> dict[str, int]:
    return {**left, **{k: left.get(k, 0) + v for k, v in right.items()}}


class ResearchState(TypedDict, total=False):
    """Seven channels: messages merged by id, a growing notes list, counters merged per key,
    the documents found this turn (replaced), the plan, the draft and the turn number."""

    messages: Annotated[list[AnyMessage], add_messages]
    notes: Annotated[list[str], _add_notes]
    counts: Annotated[dict[str, int], _merge_counts]
    documents: dict[str, str]
    plan: str
    draft: str
    turn: int


def _plan(state: ResearchState) -> dict[str, Any]:
    turn = state.get("turn", 0) + 1
    return {"plan": message_text("plan", turn), "turn": turn, "notes": [f"plan {turn}"],
            "counts": {"plan": 1}}


def _search(state: ResearchState) -> dict[str, Any]:
    turn = state.get("turn", 0)
    documents = {
        f"doc-{turn}-{i}": (message_text(f"doc {i}", turn) * (DOC_CHARS // MESSAGE_CHARS))
        for i in range(RESEARCH_DOCS)
    }
    return {"documents": documents, "notes": [f"search {turn}"], "counts": {"search": 1}}


def _summarize(state: ResearchState) -> dict[str, Any]:
    summary = AIMessage(content=message_text("summary", len(state.get("documents", {}))))
    return {"messages": [summary], "notes": ["summarize"], "counts": {"summarize": 1}}


def _write(state: ResearchState) -> dict[str, Any]:
    answer = AIMessage(content=message_text("answer", len(state["messages"])))
    return {"messages": [answer], "draft": answer.content, "counts": {"write": 1}}


def _as_async(node: Any) -> Any:
    async def run(state: ResearchState) -> dict[str, Any]:
        return node(state)  # type: ignore[no-any-return]

    return run


def research_graph(*, async_nodes: bool) -> StateGraph[ResearchState]:
    """START → plan → research (subgraph: search → summarize) → write → END."""
    wrap = _as_async if async_nodes else (lambda node: node)
    sub = StateGraph(ResearchState)
    sub.add_node("search", wrap(_search))
    sub.add_node("summarize", wrap(_summarize))
    sub.add_edge(START, "search")
    sub.add_edge("search", "summarize")
    sub.add_edge("summarize", END)
    builder = StateGraph(ResearchState)
    builder.add_node("plan", wrap(_plan))
    builder.add_node("research", sub.compile())
    builder.add_node("write", wrap(_write))
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "research")
    builder.add_edge("research", "write")
    builder.add_edge("write", END)
    return builder


def research_input(thread_id: str, turn: int) -> ResearchState:
    """The question that starts turn ``turn`` of ``thread_id``."""
    return ResearchState(messages=[HumanMessage(content=message_text(f"{thread_id} ask", turn))])


@dataclass(frozen=True, slots=True)
class Workload:
    """A graph the macro section runs, and how a thread's final state is checked."""

    name: str
    build: Any
    """``build(async_nodes=...)`` → an uncompiled ``StateGraph``."""
    inputs: Any
    """``inputs(thread_id, turn)`` → the input of one invocation."""
    steps_per_invoke: int
    """Nodes run per invocation (the unit of steps/s)."""
    messages_per_invoke: int
    description: str


CHAT = Workload(
    "chat", chat_graph, chat_input, STEPS_PER_INVOKE, MESSAGES_PER_INVOKE,
    "START → plan → act → reflect → END; each node appends a ~200-char AIMessage via "
    "`add_messages` (one channel that grows, plus LangGraph's triggers)",
)
RESEARCH = Workload(
    "research", research_graph, research_input, RESEARCH_STEPS_PER_INVOKE,
    RESEARCH_MESSAGES_PER_INVOKE,
    "START → plan → research → write → END, where research is a compiled subgraph (search → "
    "summarize, checkpointed in its own namespace); seven channels: messages, a growing "
    f"notes list, per-key counters, {RESEARCH_DOCS} documents of ~{DOC_CHARS} chars replaced "
    "each turn, plan, draft, turn",
)
WORKLOADS = (CHAT, RESEARCH)
