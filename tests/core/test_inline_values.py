"""Small scalar channel values ride inside their checkpoint; every other value is a blob.

LangGraph's routing channels (``branch:to:<node>``) hold ``None`` at almost every step, so
a blob row per such value was a Postgres row (and WAL) per step that PostgresSaver does not
write. These tests hold the encoding to what a reader gets back: the same values, of the
same types, whichever part of the stored checkpoint holds them, and a checkpoint stored
before values rode inline reads as it did.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from langgraph_durable._core.keys import blob_field
from langgraph_durable._core.records import (
    INLINE_STR_CHARS,
    build_tuple,
    encode_checkpoint,
    is_inline,
    locate,
    sealed_to,
)
from langgraph_durable._core.seal import Codec, Seal, blob_place, checkpoint_place
from langgraph_durable.errors import SerializationError

CONFIG = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "p"}}
VALUES: dict[str, Any] = {
    "branch:to:act": None,
    "done": True,
    "count": 3,
    "score": 0.5,
    "name": "x" * INLINE_STR_CHARS,
    "document": "x" * (INLINE_STR_CHARS + 1),
    "messages": ["hello"],
    "empty": [],
}
BLOBS = {"document", "messages", "empty"}


def _checkpoint(values: dict[str, Any]) -> Any:
    checkpoint = empty_checkpoint()
    checkpoint["id"] = "c"
    checkpoint["channel_values"] = dict(values)
    checkpoint["channel_versions"] = {ch: f"{i:032}.1" for i, ch in enumerate(values)}
    return checkpoint


def _read_back(codec: Codec, stored: Any) -> dict[str, Any]:
    tup = build_tuple(codec, stored.where, stored.checkpoint_id, stored.parent_id, stored.frame,
                      {}, stored.blobs, [])
    return dict(tup.checkpoint["channel_values"])


@pytest.mark.parametrize("seal", [Seal(), Seal(secret="s")], ids=["checksum", "hmac"])
def test_small_scalars_are_inline_and_every_value_reads_back_with_its_type(seal: Seal) -> None:
    codec = Codec(JsonPlusSerializer(), seal)
    checkpoint = _checkpoint(VALUES)
    stored = encode_checkpoint(codec, CONFIG, checkpoint, {}, checkpoint["channel_versions"])
    assert {ch for ch, _, _ in stored.blobs} == BLOBS
    assert sorted(stored.refs) == sorted(
        blob_field(ch, checkpoint["channel_versions"][ch]) for ch in BLOBS)
    # the versions Postgres looks blobs up by: none for an inline value
    assert json.loads(stored.channel_versions) == {
        ch: checkpoint["channel_versions"][ch] for ch in BLOBS}
    back = _read_back(codec, stored)
    assert back == VALUES
    assert {ch: type(v) for ch, v in back.items()} == {ch: type(v) for ch, v in VALUES.items()}


def test_a_channel_without_a_value_has_no_version_for_postgres_to_look_up() -> None:
    """A routing channel its step consumed keeps its version (LangGraph reads it from the
    checkpoint) but has no value, so no blob: Postgres is not given its version to look
    one up by."""
    codec = Codec(JsonPlusSerializer())
    checkpoint = _checkpoint({"messages": ["hello"]})
    checkpoint["channel_versions"]["branch:to:act"] = f"{7:032}.1"
    stored = encode_checkpoint(codec, CONFIG, checkpoint, {}, checkpoint["channel_versions"])
    assert json.loads(stored.channel_versions) == {"messages": f"{0:032}.1"}
    assert stored.refs == [blob_field("messages", f"{0:032}.1")]
    tup = build_tuple(codec, stored.where, stored.checkpoint_id, stored.parent_id,
                      stored.frame, {}, stored.blobs, [])
    assert tup.checkpoint["channel_versions"] == checkpoint["channel_versions"]


def test_an_unchanged_inline_value_is_held_again_by_the_next_checkpoint() -> None:
    """A channel whose version did not move has no new blob: an inline value must be in
    every checkpoint that holds it, since no blob row will ever hold it."""
    codec = Codec(JsonPlusSerializer())
    checkpoint = _checkpoint({"count": 3, "messages": ["hello"]})
    stored = encode_checkpoint(codec, CONFIG, checkpoint, {}, {})  # nothing changed
    assert stored.blobs == []
    back = build_tuple(codec, stored.where, stored.checkpoint_id, stored.parent_id,
                       stored.frame, {}, [("messages", *_blob_of(codec, stored, "messages"))], [])
    assert back.checkpoint["channel_values"] == {"count": 3, "messages": ["hello"]}


def _blob_of(codec: Codec, stored: Any, channel: str) -> tuple[str, bytes]:
    """The version and frame the blob of ``channel`` got when its version was new."""
    checkpoint = _checkpoint({"count": 3, "messages": ["hello"]})
    first = encode_checkpoint(codec, CONFIG, checkpoint, {}, checkpoint["channel_versions"])
    (blob,) = [(version, frame) for ch, version, frame in first.blobs if ch == channel]
    return blob


def test_a_checkpoint_stored_before_values_rode_inline_reads_as_before() -> None:
    """Written by an earlier version: every value a blob, no ``channel_values`` in the
    checkpoint's own frame."""
    codec = Codec(JsonPlusSerializer(), Seal(secret="s"))
    checkpoint = _checkpoint(VALUES)
    stored = encode_checkpoint(codec, CONFIG, checkpoint, {}, checkpoint["channel_versions"])
    where = locate(CONFIG)
    body = {k: v for k, v in checkpoint.items() if k != "channel_values"}
    old_frame = codec.dump(body, sealed_to(codec, checkpoint_place, "t", "", "c", "p"))
    old_blobs = [
        (ch, version, codec.dump(VALUES[ch], _blob_place(codec, ch, version)))
        for ch, version in checkpoint["channel_versions"].items()
    ]
    back = build_tuple(codec, where, "c", "p", old_frame, {}, old_blobs, [])
    assert back.checkpoint["channel_values"] == VALUES == _read_back(codec, stored)


def _blob_place(codec: Codec, channel: str, version: str) -> bytes:
    return sealed_to(codec, blob_place, "t", "", channel, version)


@pytest.mark.parametrize(
    ("value", "inline"),
    [(None, True), (False, True), (-(2**63), True), (2**63, False), (float("inf"), True),
     ("", True), ("é" * INLINE_STR_CHARS, True), ("é" * (INLINE_STR_CHARS + 1), False),
     (b"", False), ((), False), ({}, False)],
)
def test_only_exact_small_scalars_are_inline(value: Any, inline: bool) -> None:
    assert is_inline(value) is inline


def test_a_subclass_of_a_scalar_keeps_its_blob_and_its_type() -> None:
    """An ``IntEnum`` is an ``int`` to ``isinstance``; held inline it could come back as a
    plain int, so only exact types ride inline."""
    import enum

    class Level(enum.IntEnum):
        HIGH = 2

    assert not is_inline(Level.HIGH)
    codec = Codec(JsonPlusSerializer())
    checkpoint = _checkpoint({"level": Level.HIGH})
    stored = encode_checkpoint(codec, CONFIG, checkpoint, {}, checkpoint["channel_versions"])
    assert [ch for ch, _, _ in stored.blobs] == ["level"]


class _LongTags(JsonPlusSerializer):
    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        return "t" * 300, json.dumps(obj).encode()


def test_an_inline_value_the_serializer_refuses_is_named_in_the_error() -> None:
    codec = Codec(_LongTags())
    checkpoint = _checkpoint({"count": 3})
    with pytest.raises(SerializationError) as caught:
        encode_checkpoint(codec, CONFIG, checkpoint, {}, checkpoint["channel_versions"])
    assert caught.value.channel == "count"
