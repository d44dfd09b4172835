"""A graph whose state holds small scalars (and LangGraph's routing channels, which hold
``None``) reads back exactly as InMemorySaver gives it, from Redis and from Postgres alone,
while Postgres keeps no blob row for any of those values; and a thread whose first
checkpoints were stored with padded versions (before migration 24) continues as it would
on InMemorySaver."""

from __future__ import annotations

import uuid
from typing import Any, TypedDict

import psycopg
import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from langgraph_durable import DurableSaver
from langgraph_durable._core import records
from tests.support.checkpoints import forget_hot, twin
from tests.support.servers import POSTGRES_URL

LONG_NOTE = "n" * 65


class Scalars(TypedDict, total=False):
    count: int
    done: bool
    score: float
    label: str
    note: str
    missing: None
    items: list[str]


def _graph(saver: Any) -> Any:
    def first(state: Scalars) -> Scalars:
        return {"count": state.get("count", 0) + 1, "done": False, "score": 0.25,
                "label": "short", "note": LONG_NOTE, "missing": None, "items": ["a"]}

    def second(state: Scalars) -> Scalars:
        return {"count": state["count"] + 1, "done": True, "score": state["score"] * 2}

    builder = StateGraph(Scalars)
    builder.add_node("first", first)
    builder.add_node("second", second)
    builder.add_edge(START, "first")
    builder.add_edge("first", "second")
    builder.add_edge("second", END)
    return builder.compile(checkpointer=saver)


def _history(saver: Any, thread_id: str) -> list[tuple[Any, ...]]:
    """What a user sees of every checkpoint: its values (with their types), next nodes,
    step and writes."""
    return [
        (
            {ch: (type(v).__name__, v) for ch, v in t.checkpoint["channel_values"].items()},
            t.metadata["step"],
            sorted((ch, repr(v)) for _, ch, v in t.pending_writes or []),
        )
        for t in saver.list({"configurable": {"thread_id": thread_id}})
    ]


def _blob_channels(schema: str, thread_id: str) -> set[str]:
    with psycopg.connect(POSTGRES_URL) as conn:
        rows = conn.execute(
            f'SELECT DISTINCT channel FROM "{schema}".lgd_blobs WHERE thread_id = %s',
            (thread_id,),
        ).fetchall()
    return {r[0] for r in rows}


def test_small_scalars_read_back_as_in_memory_from_either_tier(saver: DurableSaver) -> None:
    thread_id = f"t-{uuid.uuid4()}"
    config = {"configurable": {"thread_id": thread_id}}
    memory = InMemorySaver()
    for checkpointer in (memory, saver):
        _graph(checkpointer).invoke({"count": 0}, config)
        _graph(checkpointer).invoke({"count": 10}, config)
    expected = _history(memory, thread_id)
    assert _history(saver, thread_id) == expected
    saver.flush()
    forget_hot(saver, thread_id)
    with twin(saver) as other:  # no decoded copies, no Redis copy: Postgres alone
        assert _history(other, thread_id) == expected
        state = _graph(other).get_state(config)
    assert state.values == {"count": 12, "done": True, "score": 0.5, "label": "short",
                            "note": LONG_NOTE, "missing": None, "items": ["a"]}
    # the long string and the list are blobs; no scalar, and no routing channel, is one
    assert _blob_channels(saver.config.schema, thread_id) == {"note", "items", "__start__"}


def test_postgres_lists_a_version_only_for_a_channel_whose_value_is_a_blob(
    saver: DurableSaver,
) -> None:
    """The versions column is what a Postgres read looks blobs up by: a channel with no
    value at a checkpoint (a routing channel its step consumed) has none to find, so it is
    left out of the column, while LangGraph still reads its version from the checkpoint."""
    thread_id = f"t-{uuid.uuid4()}"
    config = {"configurable": {"thread_id": thread_id}}
    memory = InMemorySaver()
    for checkpointer in (memory, saver):
        _graph(checkpointer).invoke({"count": 0}, config)
    saver.flush()
    with psycopg.connect(POSTGRES_URL) as conn:
        listed = conn.execute(
            f"""SELECT c.checkpoint_id, v.key,
                       EXISTS (SELECT 1 FROM "{saver.config.schema}".lgd_blobs b
                               WHERE b.thread_id = c.thread_id
                                 AND b.checkpoint_ns = c.checkpoint_ns
                                 AND b.channel = v.key AND b.version = v.value)
                FROM "{saver.config.schema}".lgd_checkpoints c,
                     jsonb_each_text(c.channel_versions) v
                WHERE c.thread_id = %s""",
            (thread_id,),
        ).fetchall()
    assert listed, "a checkpoint with a blob value lists its version"
    assert [(checkpoint_id, channel) for checkpoint_id, channel, found in listed
            if not found] == []
    forget_hot(saver, thread_id)
    with twin(saver) as other:  # Postgres alone
        versions = [sorted(t.checkpoint["channel_versions"]) for t in other.list(config)]
    assert versions == [sorted(t.checkpoint["channel_versions"]) for t in memory.list(config)]
    assert any("branch:to:second" in each for each in versions)


def _padded_body(checkpoint: Any, inline: dict[str, Any]) -> dict[str, Any]:
    """The frame's body as the package wrote it before migration 24."""
    body = {k: v for k, v in checkpoint.items() if k != "channel_values"}
    body["channel_values"] = inline
    return body


def _counters(saver: Any, config: Any) -> list[tuple[dict[str, int], dict[str, dict[str, int]]]]:
    """Each checkpoint's version counters (the random part differs from saver to saver)."""

    def counter(version: str) -> int:
        assert len(version.split(".")[0]) == records.VERSION_DIGITS, version
        return int(version.split(".")[0])

    return [
        ({ch: counter(v) for ch, v in t.checkpoint["channel_versions"].items()},
         {node: {ch: counter(v) for ch, v in seen.items()}
          for node, seen in t.checkpoint["versions_seen"].items()})
        for t in saver.list(config)
    ]


def test_a_thread_begun_with_padded_versions_continues_as_on_in_memory(
    saver: DurableSaver, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread_id = f"t-{uuid.uuid4()}"
    config = {"configurable": {"thread_id": thread_id}}
    memory = InMemorySaver()
    with monkeypatch.context() as before:
        before.setattr(records, "checkpoint_body", _padded_body)
        for checkpointer in (memory, saver):
            _graph(checkpointer).invoke({"count": 0}, config)
    for turn in (10, 20):  # the counters pass 9 here, where unpadded strings would misorder
        for checkpointer in (memory, saver):
            _graph(checkpointer).invoke({"count": turn}, config)
    expected = (_history(memory, thread_id), _counters(memory, config))
    assert max(max(cv.values()) for cv, _ in expected[1]) >= 10
    assert (_history(saver, thread_id), _counters(saver, config)) == expected
    saver.flush()
    forget_hot(saver, thread_id)
    with twin(saver) as other:  # Postgres alone
        assert (_history(other, thread_id), _counters(other, config)) == expected
        assert _graph(other).get_state(config).values["count"] == 22
