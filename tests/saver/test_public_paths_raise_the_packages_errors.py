"""The public API raises the package's own errors (`DurableError`), never a bare builtin;
where callers may already catch a builtin, the error is also one (`FlushTimeoutError` is a
`TimeoutError`, `ConfigurationError` a `ValueError`)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from langgraph_durable import (
    ConfigurationError,
    DurableError,
    FlushTimeoutError,
    SerializationError,
)
from langgraph_durable._core import journal
from langgraph_durable._core.keys import Layout
from langgraph_durable.flusher import Sweeper
from tests.support.checkpoints import put_value, value_put_args
from tests.support.servers import REDIS_URL

pytestmark = pytest.mark.parametrize("write_mode", ["behind"])

# No saver here flushes in the background: the entry the first test leaves held by another
# flusher would keep a closing saver's final flush waiting for it.
QUIET = {"background_flush": False}


def test_a_flush_out_of_time_raises_flush_timeout(make_saver: Any, namespace: Any) -> None:
    """An entry another flusher took (and holds, within ``reclaim_after``) keeps
    ``flush(timeout=0.3)`` waiting: it raises `FlushTimeoutError`, a `TimeoutError` too."""
    saver = make_saver(reclaim_after=60.0, **QUIET)
    put_value(saver, f"t-{uuid.uuid4()}", "flushed")
    saver.flush()  # the journal and its consumer group exist from here on
    put_value(saver, f"t-{uuid.uuid4()}", "held")
    client = redis.Redis.from_url(REDIS_URL)
    try:
        key = Layout(namespace[1]).journal(0)
        taken = client.xreadgroup(journal.GROUP, "another-flusher", {key: ">"}, count=10)
    finally:
        client.close()
    assert taken and taken[0][1]
    with pytest.raises(FlushTimeoutError, match=r"still unflushed after 0\.3 s") as caught:
        saver.flush(timeout=0.3)
    assert isinstance(caught.value, TimeoutError) and isinstance(caught.value, DurableError)


class _LongTypeNames(JsonPlusSerializer):
    """A serializer whose type names are longer than a frame holds."""

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        _, payload = super().dumps_typed(obj)
        return "t" * 200, payload


def test_a_type_name_too_long_for_a_frame_is_a_serialization_error(make_saver: Any) -> None:
    """A custom serializer's type name over 127 bytes is refused as `SerializationError`,
    naming the channel, before anything is stored."""
    saver = make_saver(serde=_LongTypeNames(), **QUIET)
    thread_id = f"t-{uuid.uuid4()}"
    args = value_put_args(saver, thread_id, "x", "", None)
    with pytest.raises(SerializationError, match="type tag too long") as caught:
        saver.put(*args)
    assert caught.value.thread_id == thread_id and caught.value.channel == "value"
    assert saver.get_tuple(args[0]) is None


def test_a_sweeper_without_retention_is_a_configuration_error(make_saver: Any) -> None:
    """`Sweeper` on a saver that has no retention policy raises `ConfigurationError`."""
    saver = make_saver(**QUIET)
    with pytest.raises(ConfigurationError, match="retention policy"):
        Sweeper(saver.engine)


def test_resolving_a_dead_letter_wrongly_is_a_configuration_error(make_saver: Any) -> None:
    """An action other than retry or drop is a `ConfigurationError` (still a `ValueError`)."""
    saver = make_saver(**QUIET)
    with pytest.raises(ConfigurationError, match="'retry' or 'drop'") as caught:
        saver.engine.resolve_dead_letter("0-1", "keep")
    assert isinstance(caught.value, ValueError)
