"""User-controlled ids and values cannot collide, escape their keys, or corrupt state."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_durable import ConfigurationError, DurableSaver, SerializationError
from tests.support.graphs import chat_graph

HOSTILE_IDS = [
    "quote'); DROP TABLE lgd_checkpoints; --",
    'double"quote',
    "{brace}",
    "}{",
    "a:b:c",
    "a",
    "a:",
    "*",
    "lgd:*",
    "ünïcødé 🚀 テスト",
    os.urandom(512).hex(),  # 1 KB that no compression shrinks: the longest id stored
    "",
    " ",
    "\\",
    "%s %(thread_id)s",
]


def _put(saver: DurableSaver, thread_id: str, ns: str, value: Any) -> dict[str, Any]:
    checkpoint = empty_checkpoint()
    version = saver.get_next_version(None, None)
    checkpoint["channel_values"] = {"value": value}
    checkpoint["channel_versions"] = {"value": version}
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
    return saver.put(config, checkpoint, {"source": "input", "step": -1, "who": thread_id},
                     {"value": version})


def test_hostile_ids_round_trip_without_collisions(saver: DurableSaver) -> None:
    """Each id and namespace gets back exactly its own value, from Redis and from Postgres."""
    pairs = [(t, ns) for t in HOSTILE_IDS for ns in ("", "ns:{x}", HOSTILE_IDS[0])]
    for t, ns in pairs:
        _put(saver, t, ns, f"value of {t!r} in {ns!r}")
    cold = DurableSaver(saver.config.redis_url, saver.config.postgres_url,
                        key_prefix=f"{saver.config.key_prefix}-cold", schema=saver.config.schema)
    try:
        for reader in (saver, cold):  # hot hit, then a cold read on an empty prefix
            for t, ns in pairs:
                tup = reader.get_tuple({"configurable": {"thread_id": t, "checkpoint_ns": ns}})
                assert tup is not None
                assert tup.checkpoint["channel_values"]["value"] == f"value of {t!r} in {ns!r}"
                assert tup.config["configurable"]["thread_id"] == t
                assert tup.metadata["who"] == t
    finally:
        cold.close()
    for t in HOSTILE_IDS:
        assert {x.config["configurable"]["checkpoint_ns"]
                for x in saver.list({"configurable": {"thread_id": t}})} == {
            "", "ns:{x}", HOSTILE_IDS[0]}


def test_deleting_one_hostile_thread_leaves_the_others(saver: DurableSaver) -> None:
    """Deleting thread "a" or "*" touches no other thread's keys or rows."""
    tag = uuid.uuid4().hex
    ids = [f"{tag}{s}" for s in ("a", "a:", "*", "{a}", "a*")]
    for t in ids:
        _put(saver, t, "", t)
    saver.delete_thread(ids[0])
    saver.delete_thread(ids[2])
    for t in ids:
        tup = saver.get_tuple({"configurable": {"thread_id": t}})
        assert (tup is None) == (t in (ids[0], ids[2]))


def test_hostile_metadata_filter_is_a_parameter(saver: DurableSaver) -> None:
    """Filter keys and values with SQL and JSON syntax match literally."""
    thread = f"t-{uuid.uuid4()}"
    checkpoint = empty_checkpoint()
    key = "k'); DELETE FROM x; --\"{}"
    saver.put({"configurable": {"thread_id": thread, "checkpoint_ns": ""}}, checkpoint,
              {"source": "input", "step": -1, key: "v'\""}, {})  # type: ignore[typeddict-item]
    cfg = {"configurable": {"thread_id": thread}}
    assert len(list(saver.list(cfg, filter={key: "v'\""}))) == 1
    assert list(saver.list(cfg, filter={key: "other"})) == []
    assert list(saver.list(cfg, filter={"source": "input", "step": -1}))


def test_missing_thread_id_is_a_clear_error(saver: DurableSaver) -> None:
    """A config without thread_id names what is missing and how to pass it."""
    with pytest.raises(ConfigurationError, match="thread_id"):
        saver.get_tuple({"configurable": {}})
    with pytest.raises(ConfigurationError, match="thread_id"):
        chat_graph(saver).invoke({"messages": [("user", "x")]},
                                 {"configurable": {"checkpoint_ns": ""}})


def test_nul_in_thread_id_is_rejected(saver: DurableSaver) -> None:
    """Postgres text cannot hold NUL: the saver says so instead of failing in the driver."""
    with pytest.raises(ConfigurationError, match="NUL"):
        _put(saver, "bad\x00id", "", 1)


class Unpicklable:
    """A value the serializer rejects."""

    def __reduce__(self) -> Any:
        raise TypeError("cannot serialize me")


def test_unserializable_value_names_channel_and_stores_nothing(saver: DurableSaver) -> None:
    """The error names the channel; the thread's stored state is exactly as before."""
    thread = f"t-{uuid.uuid4()}"
    first = _put(saver, thread, "", "good")
    checkpoint = empty_checkpoint()
    version = saver.get_next_version(None, None)
    checkpoint["channel_values"] = {"bad_channel": object()}
    checkpoint["channel_versions"] = {"bad_channel": version}
    with pytest.raises(SerializationError, match="bad_channel") as info:
        saver.put(first, checkpoint, {"source": "loop", "step": 0}, {"bad_channel": version})
    assert info.value.channel == "bad_channel"
    assert info.value.thread_id == thread
    tup = saver.get_tuple({"configurable": {"thread_id": thread}})
    assert tup is not None and tup.config == first
    assert tup.checkpoint["channel_values"] == {"value": "good"}
    assert len(list(saver.list({"configurable": {"thread_id": thread}}))) == 1
    with pytest.raises(SerializationError, match="bad_channel"):
        saver.put_writes(first, [("bad_channel", object())], "task-1")
    tup = saver.get_tuple(first)
    assert tup is not None and tup.pending_writes == []
