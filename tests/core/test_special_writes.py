"""A special channel (``__interrupt__``, ``__resume__``, ``__error__`` …) written twice in
one ``put_writes`` keeps the last value, as LangGraph's own savers do; ordinary channels
keep one write per position."""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

from langgraph_durable._core import ops
from langgraph_durable._core.codec import decode_frame
from langgraph_durable._core.context import Context
from langgraph_durable._core.keys import ThreadKeys, write_field
from langgraph_durable._core.records import Location, encode_writes, pack_write
from tests.core.script import Script, cold, hot

THREAD = "thread-1"
INTERRUPT = "__interrupt__"
WRITES = [(INTERRUPT, "first question"), ("x", 1), (INTERRUPT, "second question")]


def _value(serde: SerializerProtocol, frame: bytes) -> Any:
    return serde.loads_typed(decode_frame(frame))


def test_encode_writes_keeps_the_last_of_two_special_writes_to_one_channel(
        ctx: Context) -> None:
    """Two writes to ``__interrupt__`` share LangGraph's fixed negative index: one stored
    write remains, holding the second value; the ordinary write keeps its position."""
    stored = encode_writes(ctx.codec, Location(THREAD, "", "c1"), WRITES, "task", "path")
    assert [(w.channel, w.idx, w.special) for w in stored] == [
        (INTERRUPT, -3, True), ("x", 1, False)]
    assert _value(ctx.serde, stored[0].frame) == "second question"
    assert _value(ctx.serde, stored[1].frame) == 1


def test_put_writes_sends_one_special_write_to_both_tiers(ctx: Context) -> None:
    """put_writes: the Postgres statement carries the ordinary write as first-write-wins
    and the surviving special write as a replacing one; the hot script gets the same two
    writes (``"r"``: replace, ``"n"``: first write wins) with the committed version."""
    config = {"configurable": {"thread_id": THREAD, "checkpoint_ns": "", "checkpoint_id": "c1"}}
    keys = ThreadKeys("t", THREAD)
    script = Script([
        (hot("intent", [keys.intents, keys.unflushed, keys.versions]), 0),
        (cold(ctx.statements.put_writes_sql), [[{"version": 8, "checkpoint_stored": True}]]),
        (hot("put_writes", [keys.intents, keys.checkpoint("", "c1"), keys.registry,
                            keys.unflushed, keys.index(""), keys.blobs(""), keys.versions]), 1),
    ])
    script.run(ops.put_writes(ctx, config, WRITES, "task", "path"))  # type: ignore[arg-type]
    assert script.done
    params = script.requests[1].statements[0].params
    assert (params["idxs"], params["channels"]) == ([1], ["x"])
    assert (params["s_idxs"], params["s_channels"]) == ([-3], [INTERRUPT])
    assert _value(ctx.serde, params["s_blobs"][0]) == "second question"
    args = list(script.requests[2].args)
    assert args[3:7] == [8, keys.version_field(""), "c1", 2]
    stored = encode_writes(ctx.codec, Location(THREAD, "", "c1"), WRITES, "task", "path")
    assert args[7:] == [write_field("task", -3), pack_write(stored[0]), "r",
                        write_field("task", 1), pack_write(stored[1]), "n"]
