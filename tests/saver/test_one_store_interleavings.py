"""The two tiers behave as one store when the requests of several processes interleave: an
operation is run request by request with a saver's real driver (`Stepped`), stopped at a
chosen request while another process reads, writes or Redis loses the thread, then
finished. Each case is an interleaving that once made a read return an older checkpoint:
a reader's warm landing after a newer write, a late update moving the head back, a flush
whose acknowledgement was lost, a late root written behind. Separate saver objects stand
in for separate processes."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest
import redis

from langgraph_durable import DurableSaver, ThreadConflictError, TierUnavailableError
from langgraph_durable._core import journal, ops
from langgraph_durable._core.keys import ThreadKeys
from langgraph_durable._core.requests import Cold
from tests.support.checkpoints import (
    config_of,
    forget_hot,
    put_after,
    put_line,
    value_checkpoint,
    value_of,
)
from tests.support.interleave import Stepped, no_effects, script
from tests.support.servers import REDIS_URL


def _put_op(saver: DurableSaver, parent: dict[str, Any], value: str) -> Any:
    """The sans-I/O put of one checkpoint holding ``value`` (run it with `Stepped`)."""
    checkpoint, versions = value_checkpoint(saver, value)
    return ops.put(saver.engine.context, parent, checkpoint, {"source": "loop", "step": 1},
                   versions)


@pytest.mark.parametrize("write_mode", ["through"])
@pytest.mark.parametrize("wiped", [False, True], ids=["redis-kept", "redis-emptied-before-warm"])
def test_a_readers_warm_never_overwrites_newer_pending_writes(
    make_saver: Any, wiped: bool
) -> None:
    """A reader misses Redis and reads Postgres; before it loads that row into Redis, a
    writer stores a pending write and applies it to Redis. The reader's load is refused
    (it is older), so the acknowledged write stays visible to every later read. Also when
    Redis is emptied between the writer and the load: the versions that would refuse it
    are gone, and so is the ticket the reader's miss was handed."""
    saver = make_saver(write_mode="through")
    thread = f"t-{uuid.uuid4()}"
    (config,) = put_line(saver, thread, ["v1"])
    forget_hot(saver, thread)
    reader = ops.get_tuple(saver.engine.context, config_of(thread))
    tiers = saver.engine.tiers()
    request = next(reader)
    while not isinstance(request, Cold):  # up to the Postgres read
        request = reader.send(tiers.execute(request, no_effects))
    row = tiers.execute(request, no_effects)
    saver.put_writes(config, [("value", "pending")], task_id="task-1")
    if wiped:
        forget_hot(saver, thread)
    with pytest.raises(StopIteration):
        request = reader.send(row)
        while True:
            request = reader.send(tiers.execute(request, no_effects))
    for process in (saver, make_saver(write_mode="through")):
        tup = process.get_tuple(config_of(thread))
        assert tup is not None and tup.pending_writes == [("task-1", "value", "pending")]


@pytest.mark.parametrize("write_mode", ["through"])
@pytest.mark.parametrize("fault", ["redis-emptied", "registry-evicted"])
def test_a_late_update_never_moves_the_head_back(make_saver: Any, fault: str) -> None:
    """A writer commits v2 and its update of Redis is slow to land (the writer stalled, or
    the update was sent without waiting); another process extends v2 with v3, whose update
    lands; then Redis loses part of the thread: all of it (a restart: the slow update lost
    its intent with it), or only the registry (an eviction: the intent stands, but the
    versions hash Redis kept knows v3). Either way the slow update starts no fresh index
    at v2, and every process reads v3."""
    slow, other = make_saver(write_mode="through"), make_saver(write_mode="through")
    thread = f"t-{uuid.uuid4()}"
    (first,) = put_line(slow, thread, ["v1"])
    writer = Stepped(slow, _put_op(slow, first, "v2"))
    writer.until(script("put"))  # committed; its Redis update is next
    latest = other.get_tuple(config_of(thread))
    assert latest is not None and latest.checkpoint["channel_values"]["value"] == "v2"
    put_after(other, latest.config, "v3")
    assert value_of(other, config_of(thread)) == "v3"  # served by Redis's index, started at v3
    if fault == "redis-emptied":
        forget_hot(slow, thread)
    else:
        client = redis.Redis.from_url(REDIS_URL)
        client.delete(ThreadKeys(slow.config.key_prefix, thread).registry)
        client.close()
    writer.finish()
    for process in (slow, other, make_saver(write_mode="through")):
        assert value_of(process, config_of(thread)) == "v3"


@pytest.mark.parametrize("write_mode", ["through"])
def test_a_warm_read_before_a_commit_never_lands_after_redis_lost_the_intent(
    make_saver: Any,
) -> None:
    """A writer announces v2; Redis is emptied (the intent goes with it); a reader misses,
    reads v1 from Postgres and is slow to warm; the writer commits v2 and its update
    lands with nothing to join (no index, no intent). The update still tells Redis v2's
    version, so the reader's warm of v1, landing last, is refused: every process reads v2."""
    slow, reader = make_saver(write_mode="through"), make_saver(write_mode="through")
    thread = f"t-{uuid.uuid4()}"
    (first,) = put_line(slow, thread, ["v1"])
    writer = Stepped(slow, _put_op(slow, first, "v2"))
    writer.until(lambda request: isinstance(request, Cold))  # its intent is in Redis
    forget_hot(slow, thread)
    read = Stepped(reader, ops.get_tuple(reader.engine.context, config_of(thread)))
    read.until(script("warm"))  # a miss, then v1 from Postgres
    writer.finish()  # v2 commits, and its update lands with nothing to join
    assert read.finish().checkpoint["channel_values"]["value"] == "v1"  # read before v2
    for process in (slow, reader, make_saver(write_mode="through")):
        assert value_of(process, config_of(thread)) == "v2"


@pytest.mark.parametrize("write_mode", ["behind"])
def test_a_flush_whose_acknowledgement_was_lost_is_acknowledged_before_the_next(
    make_saver: Any,
) -> None:
    """A flusher takes v2 from the journal; Redis is then emptied; a reader misses, reads
    v1 from Postgres and is slow to warm; the flusher commits v2, but Redis cannot be
    reached for its acknowledgement, and the reader's warm of v1 lands. The next flush
    sends that acknowledgement first: Redis learns v2's version and drops the copy the
    warm left, so every process reads v2 and Redis agrees with Postgres. (The lost
    acknowledgement opened the flusher's breaker: the next flush runs once its probe found
    Redis back.)"""
    flusher = make_saver(write_mode="behind", background_flush=False, breaker_cooldown=0.1)
    reader = make_saver(write_mode="behind", background_flush=False)
    thread = f"t-{uuid.uuid4()}"
    (first,) = put_line(flusher, thread, ["v1"])
    flusher.flush()
    put_after(flusher, first, "v2")  # journaled, not in Postgres yet
    ctx = flusher.engine.context
    batch = Stepped(flusher, journal.flush_batch(ctx))
    batch.until(lambda request: isinstance(request, Cold))  # taken from the journal
    forget_hot(flusher, thread)
    client = redis.Redis.from_url(REDIS_URL)
    client.delete(ctx.layout.journal(0), ctx.layout.journal_bytes(0))  # emptied, all of it
    client.close()
    read = Stepped(reader, ops.get_tuple(reader.engine.context, config_of(thread)))
    read.until(script("warm"))  # a miss, then v1 from Postgres
    batch.until(script("flush_ack"))  # v2 commits
    with pytest.raises(TierUnavailableError):
        batch.op.throw(TierUnavailableError("Redis out of reach", tier="hot"))
    read.finish()  # v1 lands in Redis
    deadline = time.monotonic() + 5.0
    while True:  # a call past breaker_cooldown starts the probe that finds Redis back
        try:
            flusher.flush()
            break
        except TierUnavailableError:
            assert time.monotonic() < deadline, "the flusher's breaker stayed open"
            time.sleep(0.05)
    for process in (flusher, reader, make_saver(write_mode="behind")):
        assert value_of(process, config_of(thread)) == "v2"


@pytest.mark.parametrize("write_mode", ["behind"])
def test_a_root_written_behind_never_hides_a_newer_head_redis_forgot(make_saver: Any) -> None:
    """A run found a thread empty and made its first checkpoint; before it is stored,
    another run writes v1 and v2 on the thread, they are flushed, and Redis forgets the
    thread. The late root is refused (it was fenced as "no head yet"), and the same root
    put by a caller that never read the thread (not compared) must not start an index of
    its own in Redis (which would serve it, older than v2, as the thread's latest): it goes
    through Postgres. Every process reads v2."""
    late, other = make_saver(write_mode="behind"), make_saver(write_mode="behind")
    thread = f"t-{uuid.uuid4()}"
    root, versions = value_checkpoint(late, "late root")  # its id is older than v1's and v2's
    assert late.get_tuple(config_of(thread)) is None
    assert other.get_tuple(config_of(thread)) is None
    put_line(other, thread, ["v1", "v2"])
    other.flush()
    forget_hot(other, thread)
    with pytest.raises(ThreadConflictError):
        late.put(config_of(thread), root, {"source": "input", "step": -1}, versions)
    direct = threading.Thread(target=lambda: late.put(
        config_of(thread), root, {"source": "input", "step": -1}, versions))
    direct.start()
    direct.join(30)
    late.flush()
    assert late.get_tuple(config_of(thread, root["id"])) is not None, "the direct root"
    for process in (late, other, make_saver(write_mode="behind")):
        assert value_of(process, config_of(thread)) == "v2"
