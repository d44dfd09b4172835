"""A checkpoint's frame holds its versions without the zero padding of their counters.

``get_next_version`` makes ``"<32-digit counter>.<random>"`` strings; a chat graph's
checkpoint holds about nine of them, whose padding was a third of its frame. These tests
hold the encoding to what a reader gets back: the very checkpoint that was put (its
versions, their types and its keys' order), whatever versions it holds, and a frame
written before reads as it did.
"""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from langgraph_durable import DurableSaver
from langgraph_durable._core.records import (
    build_tuple,
    checkpoint_body,
    encode_checkpoint,
    locate,
    sealed_to,
)
from langgraph_durable._core.seal import Codec, Seal, checkpoint_place

CONFIG = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "p"}}
next_version = DurableSaver.get_next_version


def _checkpoint(versions: dict[str, Any], seen: dict[str, dict[str, Any]]) -> Any:
    checkpoint = empty_checkpoint()
    checkpoint["id"] = "c"
    checkpoint["channel_values"] = {}
    checkpoint["channel_versions"] = versions
    checkpoint["versions_seen"] = seen
    return checkpoint


def _round_trip(codec: Codec, checkpoint: Any) -> tuple[Any, int]:
    """The checkpoint read back from its stored frame, and the frame's size."""
    stored = encode_checkpoint(codec, CONFIG, checkpoint, {}, {})
    tup = build_tuple(codec, stored.where, stored.checkpoint_id, stored.parent_id,
                      stored.frame, {}, [], [])
    return tup.checkpoint, len(stored.frame)


def _versions(counters: list[int]) -> list[str]:
    """Versions as the saver makes them, with these counters."""
    return [next_version(None, counter - 1, None) for counter in counters]  # type: ignore[arg-type]


@pytest.mark.parametrize("seal", [Seal(), Seal(secret="s")], ids=["checksum", "hmac"])
def test_versions_read_back_exactly_and_the_frame_is_smaller_by_their_padding(
    seal: Seal,
) -> None:
    codec = Codec(JsonPlusSerializer(), seal)
    # counters of every length, a zero one, and the largest that fits 32 digits
    counters = [0, 1, 9, 10, 12345, 10**20, 10**31, 10**32 - 1]
    versions = dict(zip([f"ch{i}" for i in range(len(counters))], _versions(counters), strict=True))
    seen = {"__input__": {}, "node": {"ch1": versions["ch1"], "ch7": versions["ch7"]}}
    checkpoint = _checkpoint(versions, seen)
    back, size = _round_trip(codec, checkpoint)
    assert back == checkpoint
    assert list(back) == list(checkpoint)  # the keys in their order
    as_before = len(codec.dump(dict(checkpoint), sealed_to(codec, checkpoint_place, "t", "",
                                                            "c", "p")))
    # each version held loses its counter's leading zeros (all 32 of a zero counter's)
    zeros = sum(32 - len(str(c).lstrip("0")) for c in [*counters, 1, 10**32 - 1])
    assert as_before - size >= zeros


@pytest.mark.parametrize(
    "odd",
    [1, 2.5, "1.5", "0" * 31 + "1", "0" * 33 + ".1", "٣" * 32 + ".1", "x" * 32 + ".1",
     "0" * 32 + "-1", ""],
    ids=["int", "float", "short", "no-dot", "33-digits", "arabic-digits", "letters",
         "no-dot-after", "empty"],
)
def test_a_version_not_of_get_next_version_s_form_reads_back_exactly(odd: Any) -> None:
    """A version another saver made (an int counter, a string of its own) beside padded
    ones: every version reads back as it was put, of the same type."""
    codec = Codec(JsonPlusSerializer())
    (padded,) = _versions([7])
    checkpoint = _checkpoint({"a": padded, "b": odd}, {"node": {"a": padded, "b": odd}})
    back, _ = _round_trip(codec, checkpoint)
    assert back == checkpoint
    assert type(back["channel_versions"]["b"]) is type(odd)
    assert type(back["versions_seen"]["node"]["b"]) is type(odd)


def test_int_versions_are_kept_as_ints_beside_unpadded_strings() -> None:
    codec = Codec(JsonPlusSerializer())
    (padded,) = _versions([3])
    checkpoint = _checkpoint({"a": padded, "b": 4}, {"node": {"b": 4}})
    assert "lgd_cv" in checkpoint_body(checkpoint, {})  # the strings are unpadded
    back, _ = _round_trip(codec, checkpoint)
    assert back == checkpoint and type(back["channel_versions"]["b"]) is int


def test_a_frame_written_with_padded_versions_reads_as_before() -> None:
    """Written by an earlier version: the checkpoint itself, versions padded."""
    codec = Codec(JsonPlusSerializer(), Seal(secret="s"))
    versions = dict(zip(["a", "b"], _versions([1, 12]), strict=True))
    checkpoint = _checkpoint(versions, {"node": {"a": versions["a"]}})
    old_frame = codec.dump(dict(checkpoint), sealed_to(codec, checkpoint_place, "t", "", "c", "p"))
    back = build_tuple(codec, locate(CONFIG), "c", "p", old_frame, {}, [], [])
    assert back.checkpoint == checkpoint


def test_a_frame_with_unpadded_versions_has_no_channel_versions_for_an_older_reader() -> None:
    """An older process would compare ``"10.x"`` below ``"9.x"``; it must not find versions
    it would read wrongly where it looks for them (its setup() also refuses the schema)."""
    (padded,) = _versions([10])
    body = checkpoint_body(_checkpoint({"a": padded}, {"node": {"a": padded}}), {})
    assert "channel_versions" not in body and "versions_seen" not in body
    assert body["lgd_cv"] == {"a": padded.lstrip("0")}
